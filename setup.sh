#!/usr/bin/env bash
# One command on a bare Ubuntu 22.04/24.04 or Debian 12 machine:  sudo ./setup.sh
# Makes the project's virtual environment, then provisions the machine with playbooks/site.yml
# (packages, Mininet, the P4 toolchain, kernel modules, the `testbed` command). Extra arguments
# go to `testbed provision`, e.g. --check, --tags base, or for the toolchain from a prebuilt
# archive instead of the p4lang repository: --skip-tags p4repo --toolchain-archive FILE.tar.zst.
# BMv2's fast build: --bmv2-fast-archive FILE, --bmv2-fast-url URL --bmv2-fast-sha256 HEX, or by
# default, online, built from the pinned behavioral-model commit (--no-bmv2-fast-build: none).
# The Vagrant VM and the Docker image are provisioned by this same command.
set -euo pipefail
cd "$(dirname "$0")"
# A download of BMv2's fast build is taken only with its checksum: refuse one without it before
# anything is installed (testbed provision and the playbook refuse it too).
fast_url=0 fast_sum=0
for arg in "$@"; do
    case "$arg" in
        --bmv2-fast-url|--bmv2-fast-url=*) fast_url=1 ;;
        --bmv2-fast-sha256|--bmv2-fast-sha256=*) fast_sum=1 ;;
    esac
done
if [ "$fast_url" = 1 ] && [ "$fast_sum" = 0 ]; then
    echo "error: --bmv2-fast-url needs --bmv2-fast-sha256: give the archive's sha256 too" \
         "(sha256sum FILE prints it)" >&2
    exit 2
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "setup.sh installs packages: run it as  sudo ./setup.sh" >&2
    exit 2
fi
export DEBIAN_FRONTEND=noninteractive
if ! /usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null; then
    apt-get update -qq
    apt-get install -y -qq python3-venv python3-pip >/dev/null
fi
# A .venv made elsewhere (by the host of a VM that shares this folder, say) would half work here.
probe='import sys; print(sys.base_prefix, *sys.version_info[:2])'
if [ -e .venv ] && [ "$(.venv/bin/python -c "$probe" 2>/dev/null)" != "$(/usr/bin/python3 -c "$probe")" ]; then
    echo "setup.sh: .venv was not made by this machine's /usr/bin/python3 (by the host of a VM" \
         "that shares this folder?): move it away, then run setup.sh again" >&2
    exit 2
fi
[ -x .venv/bin/python ] || /usr/bin/python3 -m venv --system-site-packages .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e '.[test]'
exec .venv/bin/testbed provision "$@"
