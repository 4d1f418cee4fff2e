"""Runs that share a machine: two `make run` from two checkouts at the same time, `make stop`
of one leaving the other alone, and what a run reserves and removes (root; skips otherwise).

The checkouts are copies of this one in a temporary directory (the files git tracks), run
with this checkout's virtual environment; make, Mininet, the switches and the agents are
real.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from topologies.network import (
    DEFAULT_STATE_DIR,
    NetworkError,
    cleanup,
    missing_prerequisites,
    start_network,
    switch_processes,
)
from topologies.switches import REPO_ROOT, SwitchProcess, SwitchStartError, free_tcp_port

pytestmark = [pytest.mark.root]

VENV = REPO_ROOT / ".venv"
# Small and quick: both runs share the machine's two cores.
# BW= keeps the topology's rates: no calibration, the runs are about sharing, not regime
SMALL = ["TOPO=star:2", "WORKERS=2", "ITERATIONS=3", "KEYS=2000", "HOT_SLOTS=32", "SKEW=1.2", "BW="]


def checkout(dest: Path) -> Path:
    """A copy of this checkout's tracked files (timestamps kept, so make sees its install
    step as done), as a fresh clone would be."""
    files = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "ls-files", "-z"], capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, (f.decode() for f in files)):
        src = REPO_ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def make(where: Path, *args: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(where)}
    argv = ["make", "-s", "-C", str(where), f"VENV={VENV}", "-o", f"{VENV}/.hotagg-installed"]
    return subprocess.Popen(
        [*argv, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        **kwargs,
    )  # fmt: skip


def states_of(home: Path) -> list[dict]:
    out = []
    for path in DEFAULT_STATE_DIR.glob("*.json"):
        try:
            state = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if state.get("checkout") == str(home):
            out.append(state)
    return out


def existing(names) -> list[str]:
    return [n for n in names if Path(f"/sys/class/net/{n}").exists()]


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


@pytest.fixture
def two_checkouts(tmp_path: Path):
    if why := missing_prerequisites():
        pytest.skip(why)
    if shutil.which("make") is None or not (REPO_ROOT / ".git").exists():
        pytest.skip("needs make and a git checkout")
    homes = [checkout(tmp_path / name) for name in ("a", "b")]
    yield homes
    for home in homes:  # whatever a failed test left
        cleanup(checkout=str(home), owner_timeout=5.0)


@pytest.mark.e2e
def test_two_make_runs_at_once_both_finish_exact(two_checkouts: list[Path]) -> None:
    runs = [make(home, "run", *SMALL) for home in two_checkouts]
    outs = [p.communicate(timeout=600)[0] for p in runs]
    summaries = []
    for home, proc, out in zip(two_checkouts, runs, outs, strict=True):
        assert proc.returncode == 0, out[-3000:]
        summaries.append(json.loads((home / "runs" / "latest" / "summary.json").read_text()))
        assert "interface prefix" in out and "P4Runtime: s1 127.0.0.1:" in out
    a, b = (s["config"] for s in summaries)
    assert all(s["exact"] for s in summaries)
    assert a["run_id"] != b["run_id"]
    assert a["intf_prefix"] and a["intf_prefix"] != b["intf_prefix"]
    assert set(a["grpc_ports"].values()).isdisjoint(b["grpc_ports"].values())
    # Both cleaned up after themselves: no state, no interface with their prefixes.
    for home, config in zip(two_checkouts, (a, b), strict=True):
        assert states_of(home) == []
        left = [p.name for p in Path("/sys/class/net").iterdir()]
        assert not [n for n in left if n.startswith(config["intf_prefix"] + "s1-")]


def wait_for_keep(proc: subprocess.Popen, deadline: float) -> str:
    """Read a KEEP=1 run's output until the network is up for hands-on use."""
    seen = []
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if "KEEP=1: the network stays up" in line:
            return "".join(seen)
    raise AssertionError("the run never reached KEEP=1:\n" + "".join(seen)[-3000:])


@pytest.mark.e2e
def test_stop_of_one_checkout_leaves_the_other_run_alone(two_checkouts: list[Path]) -> None:
    home_a, home_b = two_checkouts
    procs = [make(home, "run", *SMALL, "KEEP=1") for home in two_checkouts]
    try:
        deadline = time.monotonic() + 600
        for proc in procs:
            wait_for_keep(proc, deadline)
        (state_a,), (state_b,) = states_of(home_a), states_of(home_b)
        b_intfs = state_b["interfaces"]
        b_pids = [r["pid"] for r in state_b["switch_processes"].values()]
        b_pids += [r["pid"] for r in state_b["nodes"].values()]
        assert existing(state_a["interfaces"]) and existing(b_intfs) == sorted(b_intfs)

        stop = make(home_a, "stop")
        out = stop.communicate(timeout=120)[0]
        assert stop.returncode == 0, out
        assert f"stopped run {state_a['run_id']}" in out
        assert procs[0].wait(60) == 0  # A's run ended as after Ctrl-C at KEEP=1
        assert existing(state_a["interfaces"]) == []
        assert switch_processes(state_a["run_id"]) == []
        assert states_of(home_a) == []
        # B: every interface (the same one: same index), process and node shell still there.
        for name, index in b_intfs.items():
            assert int(Path(f"/sys/class/net/{name}/ifindex").read_text()) == index, name
        assert all(alive(pid) for pid in b_pids)
        assert procs[1].poll() is None and states_of(home_b)

        # RUN=id stops that run, from any checkout.
        stop = make(home_a, "stop", f"RUN={state_b['run_id']}")
        out = stop.communicate(timeout=120)[0]
        assert stop.returncode == 0 and f"stopped run {state_b['run_id']}" in out, out
        assert procs[1].wait(60) == 0
        assert existing(b_intfs) == [] and not any(alive(p) for p in b_pids)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                proc.wait(60)


# --- what a run reserves, and what cleanup may remove -------------------------------------


def _skip_without_root() -> None:
    if why := missing_prerequisites():
        pytest.skip(why)


def _stale_state(state_dir: Path, run_id: str, **fields) -> Path:
    """A state file whose run is gone (its owner: a process that has exited)."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    state = {"run_id": run_id, "checkout": "/nowhere", "owner": {"pid": gone.pid, "start": 1}}
    path = state_dir / f"{run_id}.json"
    state_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**state, **fields}))
    return path


def test_stale_state_never_deletes_a_live_interface_of_the_same_name(tmp_path: Path) -> None:
    """A stale state file names an interface that now belongs to someone else (same name,
    another interface index): cleanup leaves it. An old state file (names only) too."""
    _skip_without_root()
    name, peer = f"zz{os.getpid() % 10000}s1-e1", f"zz{os.getpid() % 10000}s1-e2"
    subprocess.run(["ip", "link", "add", name, "type", "veth", "peer", "name", peer], check=True)
    try:
        index = int(Path(f"/sys/class/net/{name}/ifindex").read_text())
        _stale_state(tmp_path, "stale-new", interfaces={name: index + 1000})
        _stale_state(tmp_path, "stale-old", interfaces=[name], nodes={"h1": 1})
        # One run at a time: cleanup() with no run id would stop every hotagg switch here.
        done = cleanup("stale-new", state_dir=tmp_path) + cleanup("stale-old", state_dir=tmp_path)
        assert existing([name]) == [name], done
        assert list(tmp_path.glob("*.json")) == []
        # ... and the recorded index is the proof that it is the run's own.
        _stale_state(tmp_path, "stale-own", interfaces={name: index})
        assert f"deleted interface {name}" in cleanup("stale-own", state_dir=tmp_path)
        assert existing([name, peer]) == []
    finally:
        subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)


def test_a_live_runs_prefix_and_ports_are_refused(tmp_path: Path) -> None:
    """The reservations of a live run (here: a state file owned by this process) cannot be
    taken by another, and the refusal comes before anything is built."""
    _skip_without_root()
    from topologies.network import _identity

    port = free_tcp_port()
    live = {
        "run_id": "live-run",
        "checkout": str(REPO_ROOT),
        "owner": _identity(os.getpid()),
        "prefix": "qq1",
        "grpc_ports": {"s1": port},
    }
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "live-run.json").write_text(json.dumps(live))
    kw = {"state_dir": tmp_path, "log_dir": tmp_path / "logs"}
    star = REPO_ROOT / "topologies" / "star.json"
    with pytest.raises(NetworkError, match="prefix 'qq1' is held by the running run live-run"):
        start_network(star, intf_prefix="qq1", grpc_base_port=0, **kw)
    with pytest.raises(NetworkError, match=f"port {port} .* held by the running run live-run"):
        start_network(star, intf_prefix="qq2", grpc_ports={"s1": port}, **kw)
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["live-run.json"]
    assert existing(["qq1s1-eth1", "qq2s1-eth1"]) == []


def test_a_switch_does_not_pass_for_ready_on_another_process_port(tmp_path: Path) -> None:
    """The P4Runtime port answers, but not from our switch (another run took it first): the
    switch is not taken for up (its controller would program the other one)."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        sw = SwitchProcess("s1", {}, grpc_port=port, log_dir=tmp_path, run_id="port-test")
        with pytest.raises(SwitchStartError):
            sw.start(timeout=10.0)
        sw.stop()
