# roce-testbed without a hypervisor. Build and run (Mininet needs a privileged container):
#   docker build -t roce-testbed .
#   docker run --rm -it --privileged roce-testbed testbed up --pingall
# or through the CLI: `testbed image build` and `testbed image run -- testbed up --pingall`.
FROM ubuntu:24.04
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update && apt-get install -y --no-install-recommends \
        python3 python3-venv python3-pip python3-apt sudo ca-certificates gnupg kmod \
    && rm -rf /var/lib/apt/lists/*
COPY . /opt/roce-testbed
WORKDIR /opt/roce-testbed
# The same playbook as the Vagrant lab and CI, from a throwaway venv that holds Ansible.
RUN python3 -m venv /opt/ansible && /opt/ansible/bin/pip install --no-cache-dir ansible-core \
    && /opt/ansible/bin/ansible-playbook -i playbooks/inventory.ini playbooks/site.yml \
         --skip-tags kernel \
    && rm -rf /opt/ansible /var/lib/apt/lists/*
CMD ["testbed", "up"]
