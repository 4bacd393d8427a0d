#!/usr/bin/env bash
# One command on a bare Ubuntu 22.04/24.04 or Debian 12 machine:  sudo ./setup.sh
# Makes the project's virtual environment, then provisions the machine with playbooks/site.yml
# (packages, Mininet, the P4 toolchain from the p4lang repository, kernel modules, the
# `testbed` command). Extra arguments go to `testbed provision`, e.g. --check or --tags base.
set -euo pipefail
cd "$(dirname "$0")"
if [ "$(id -u)" -ne 0 ]; then
    echo "setup.sh installs packages: run it as  sudo ./setup.sh" >&2
    exit 2
fi
export DEBIAN_FRONTEND=noninteractive
if ! /usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null; then
    apt-get update -qq
    apt-get install -y -qq python3-venv python3-pip >/dev/null
fi
[ -x .venv/bin/python ] || /usr/bin/python3 -m venv --system-site-packages .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e '.[test]'
exec .venv/bin/testbed provision "$@"
