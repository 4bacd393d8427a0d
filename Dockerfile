# roce-testbed without a hypervisor. Build and run (Mininet needs a privileged container):
#   docker build -t roce-testbed .
#   docker run --rm -it --privileged roce-testbed testbed up --pingall
# or through the CLI: `testbed image build` and `testbed image run -- testbed up --pingall`.
# Provisioned by the command a bare machine uses, ./setup.sh, without the kernel role (a container
# runs on the host's kernel). The P4 toolchain comes from the p4lang repository, or from a
# prebuilt archive inside this folder built for the base image's release (README: The P4
# toolchain without internet), e.g.
#   docker build --build-arg BASE=debian:12 \
#     --build-arg TOOLCHAIN=toolchain/p4toolchain-debian12-amd64.tar.zst -t roce-testbed .
ARG BASE=ubuntu:24.04
FROM ${BASE}
ARG TOOLCHAIN=""
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update && apt-get install -y --no-install-recommends \
        python3 python3-venv python3-pip python3-apt sudo ca-certificates gnupg kmod \
    && rm -rf /var/lib/apt/lists/*
COPY . /opt/roce-testbed
WORKDIR /opt/roce-testbed
RUN if [ -n "$TOOLCHAIN" ]; then set -- --skip-tags kernel,p4repo --toolchain-archive "$TOOLCHAIN"; \
    else set -- --skip-tags kernel; fi \
    && PIP_NO_CACHE_DIR=1 ./setup.sh "$@" \
    && rm -rf /var/lib/apt/lists/*
CMD ["testbed", "up"]
