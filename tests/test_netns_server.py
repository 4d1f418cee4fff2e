"""`make local-server` / `make local-server-stop` (topologies/netns_server.py's CLI): a second
server on this machine that `make run SERVERS=` reaches by ssh, and nothing left after stop."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from topologies.netns_server import SSH_CLIENT_SNIPPETS, STATE_FILE, server_missing

REPO = Path(__file__).resolve().parents[1]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "topologies.netns_server", *args],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def _namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


def test_start_reaches_by_ssh_and_stop_leaves_nothing(tmp_path: Path) -> None:
    if why := server_missing():
        pytest.skip(why)
    workdir = tmp_path / "server"
    started = _cli("start", "--dir", str(workdir))
    assert started.returncode == 0, started.stderr
    state = json.loads((workdir / STATE_FILE).read_text())
    address = state["subnet"] + "2"
    try:
        assert f"SERVERS={address}" in started.stdout
        assert state["tag"] in _namespaces()
        login = subprocess.run(
            ["ssh", "-o", "BatchMode=yes", f"root@{address}", "ip", "-o", "-4", "addr"],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        assert login.returncode == 0, login.stderr
        assert address in login.stdout  # the shell ran inside the server's namespace
        again = _cli("start", "--dir", str(workdir))
        assert again.returncode == 1 and "runs already" in again.stderr
    finally:
        stopped = _cli("stop", "--dir", str(workdir))
    assert stopped.returncode == 0, stopped.stderr
    assert state["tag"] not in _namespaces()
    assert not workdir.exists()
    assert not list(SSH_CLIENT_SNIPPETS.glob(f"{state['tag']}-*"))
    assert not Path(f"/sys/class/net/{state['tag']}r").exists()
    assert "no local server" in _cli("stop", "--dir", str(workdir)).stdout
