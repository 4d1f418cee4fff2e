#!/usr/bin/env bash
# Installs what hotagg needs on a fresh Debian/Ubuntu machine: the distribution packages
# (as root) and a virtual environment in .venv. Safe to run again; it skips what is there.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
need_apt=()
command -v mnexec >/dev/null 2>&1 || need_apt+=(mininet)
command -v ifconfig >/dev/null 2>&1 || need_apt+=(net-tools)
command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)
command -v ethtool >/dev/null 2>&1 || need_apt+=(ethtool)
command -v ping >/dev/null 2>&1 || need_apt+=(iputils-ping)
"$PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1 || need_apt+=(python3-venv)
# Cluster runs (docs/cluster.md): Mininet's cluster edition reaches servers by ssh and runs
# every command under sudo. No ssh server: where an init system runs, its package would start
# an sshd on port 22 as a side effect of make run. tests/test_cluster.py needs one (its second
# "server" is an sshd in a network namespace) and skips, saying so, without it; .ci/run
# installs it.
command -v ssh >/dev/null 2>&1 || need_apt+=(openssh-client)
command -v sudo >/dev/null 2>&1 || need_apt+=(sudo)

if ((${#need_apt[@]})); then
    if [[ $(id -u) -ne 0 ]]; then
        echo "hotagg: missing system packages: ${need_apt[*]}" >&2
        echo "hotagg: run this as root (sudo make ...) or: sudo apt-get install -y ${need_apt[*]}" >&2
        exit 1
    fi
    echo "hotagg: installing system packages: ${need_apt[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    # Mininet's recommends (Open vSwitch etc.) are not needed: our switches are own processes.
    apt-get install -y -q --no-install-recommends "${need_apt[@]}"
fi

if [[ ! -x $VENV/bin/python ]]; then
    echo "hotagg: creating virtual environment in $VENV"
    "$PYTHON" -m venv "$VENV"
fi
echo "hotagg: installing Python packages into $VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
"$VENV/bin/python" -m pip install -q -e '.[dev]'
touch "$VENV/.hotagg-installed"
echo "hotagg: ready"
