"""`make stop` after an interrupted cluster run (issue #32 step 6, topologies/cluster_state.py)
against the second "server" of tests/cluster_server.py (an sshd in a network namespace).

A subprocess plays the run's coordinator: it builds, across the two servers, an embedded
switch on the server (RemoteP4RuntimeSwitch) with a host there, a host here cabled to it by a
VXLAN link (the redirect's devices in this machine's root namespace, the switch's vxlan port
in the server's), starts an agent on the server's host (RemoteHotaggHost) and records all of
it through cluster_state. It is then SIGKILLed, which leaves its ssh clients, and through
them everything on the server, running. `python -m experiment stop --run ID` must then leave
nothing of the run on either side; with the server's sshd gone it must say so in one line,
exit 1, still clean this side, and finish the server on a later `make stop`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster_server import NetnsServer, netns_server_for
from topologies.switches import REPO_ROOT

PY = sys.executable  # the venv's python: at the same path on the netns server
READY = "coordinator-ready"


@pytest.fixture(scope="module")
def netns_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetnsServer]:
    yield from netns_server_for(tmp_path_factory.mktemp("stop-server"))


def coordinator(address: str, tag: str, run_id: str, log_dir: str) -> None:
    """The interrupted run (run in a subprocess): build, start, record, print what it made
    as one JSON line, then wait to be killed."""
    from mininet.net import Mininet

    from topologies.cluster import LOCALHOST, Server
    from topologies.cluster_state import record_network, record_process, record_server
    from topologies.remote import RemoteHotaggHost, RemoteP4RuntimeSwitch
    from topologies.remote_links import VxlanPlan, use_cross_server_links
    from topologies.targets import EmbeddedTarget
    from topologies.topo import HotaggTopo
    from topologies.topology import parse_topology

    there, here = f"{tag}a", f"{tag}b"
    topology = parse_topology(
        {
            "hosts": {
                there: {"ip": "10.0.0.1/24", "mac": "08:00:00:00:00:01", "role": "worker"},
                here: {"ip": "10.0.0.2/24", "mac": "08:00:00:00:00:02", "role": "ps"},
            },
            "switches": {"s1": {"aggregate": True, "service_ip": "10.0.0.254"}},
            "links": [[there, "s1-p1", "0ms", 10], [here, "s1-p2", "0ms", 10]],
        }
    )
    topo = HotaggTopo(
        topology, switch_cls=RemoteP4RuntimeSwitch, host_cls=RemoteHotaggHost,
        intf_prefix=tag, log_dir=Path(log_dir), run_id=run_id, netem=False,
        switch_opts={"target": EmbeddedTarget()},
    )  # fmt: skip
    topo.nodeInfo("s1").update(server=address, grpc_port=0)
    topo.nodeInfo(there)["server"] = address
    plan = VxlanPlan(tag=tag[0] + tag[-3:])
    use_cross_server_links(topo, plan)
    net = Mininet(topo=topo, controller=None, build=False, autoSetMacs=False, waitConnected=False)
    net.build()
    net.start()
    record_network(run_id, net)
    # This side's host: start_network's state file records such nodes in a real run.
    record_server(run_id, Server(LOCALHOST), node_shells={here: net.get(here).pid})
    marker = f"hotagg-stop-test-{tag}"
    agent = net.get(there).popen(
        [PY, "-c", "import sys, time; print('ready', flush=True); time.sleep(600)", marker]
    )
    assert agent.stdout is not None and agent.stdout.readline().strip() == b"ready"
    record_process(run_id, f"agent {there}", agent)
    switch = net.get("s1").process.proc
    made = {
        "agent": agent.remote_pid,
        "switch": switch.remote_pid,
        "shells": [net.get(there).pid, net.get(here).pid, net.get("s1").pid],
        "ssh": [agent.pid, switch.pid, net.get(there).shell.pid, net.get("s1").shell.pid],
        "marks": [f"hx{plan.tag}", f"hw{plan.tag}", tag],
        "marker": marker,
    }
    print(json.dumps(made), flush=True)
    print(READY, flush=True)
    time.sleep(600)


def interrupted_run(address: str, tag: str, run_id: str, log_dir: Path) -> dict[str, Any]:
    """Start the coordinator, wait until all is up, SIGKILL it (its python only), and return
    what it made, checked alive after the kill."""
    arguments = (address, tag, run_id, str(log_dir))
    code = f"from tests.test_cluster_stop import coordinator; coordinator{arguments!r}"
    proc = subprocess.Popen([PY, "-c", code], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    made: dict[str, Any] = {}
    try:
        for line in proc.stdout:
            if line.strip() == READY:
                break
            if line.startswith("{"):
                made = json.loads(line)
        assert made, f"the coordinator did not come up (exit {proc.poll()})"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    # What a killed coordinator leaves: the ssh clients of the processes it started on the
    # server (their own sessions), and through them those processes. (Node shells read
    # their commands from the coordinator: they end on its death.)
    left = {k: alive(made[k]) for k in ("agent", "switch")} | {
        f"ssh {p}": alive(p) for p in made["ssh"][:2]
    }
    assert all(left.values()), left
    # The server's host's namespace, held open so that its inode is not reused (by another
    # run's namespace) before the check.
    made["netns_fd"] = os.open(f"/proc/{made['agent']}/ns/net", os.O_RDONLY)
    made["namespaces"] = [os.fstat(made["netns_fd"]).st_ino]
    return made


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat.rpartition(b")")[2].split()[:1] != b"Z".split()


def processes_with(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and entry.name != str(os.getpid()):
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def devices(netns_name: str | None) -> list[str]:
    argv = ["ip", *(["-n", netns_name] if netns_name else []), "-br", "link"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return [line.split()[0].split("@")[0] for line in out.splitlines()]


def ours(names: list[str], marks: list[str]) -> list[str]:
    return [n for n in names if n.startswith(tuple(marks))]


def make_stop(run_id: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PY, "-m", "experiment", "stop", "--run", run_id],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def master_open(address: str) -> bool:
    from topologies.cluster import parse_server, ssh_options

    check = ["ssh", *ssh_options(), "-O", "check", parse_server(address).dest]
    return subprocess.run(check, capture_output=True, check=False).returncode == 0


def local_part_left(made: dict[str, Any]) -> list[str]:
    """What of the run is left on this side: ssh clients, the redirect's devices, this
    side's host's shell."""
    left = [f"ssh client {p}" for p in made["ssh"] if alive(p)]
    left += [f"node shell {made['shells'][1]}"] if alive(made["shells"][1]) else []
    return left + ours(devices(None), made["marks"])


def server_part_left(made: dict[str, Any], server: NetnsServer, run_id: str) -> list[str]:
    from topologies.network import _processes_in, switch_processes

    left = [f"process {p}" for p in (made["agent"], made["switch"]) if alive(p)]
    left += [f"node shell {p}" for p in (made["shells"][0], made["shells"][2]) if alive(p)]
    left += [f"switch process {p}" for p in switch_processes(run_id)]
    left += [f"agent {p}" for p in processes_with(made["marker"])]
    left += [f"in a host's namespace: {p}" for p in _processes_in(set(made["namespaces"]))]
    return left + ours(devices(server.netns), made["marks"])


@pytest.mark.root
def test_make_stop_after_a_killed_coordinator_cleans_both_sides(
    netns_server: NetnsServer, tmp_path: Path
) -> None:
    tag = f"k{os.getpid() % 10000:04d}"
    run_id = f"test-stop-{tag}"
    started = time.monotonic()
    made = interrupted_run(netns_server.address, tag, run_id, tmp_path)
    try:
        stopped_cleanly(made, netns_server, run_id, started)
    finally:
        make_stop(run_id)  # whatever an assertion above left
        os.close(made["netns_fd"])


def stopped_cleanly(made: dict[str, Any], netns_server: NetnsServer, run_id: str,
                    started: float) -> None:  # fmt: skip
    assert ours(devices(None), made["marks"]) and ours(devices(netns_server.netns), made["marks"])
    built = time.monotonic() - started

    stop = make_stop(run_id)
    assert stop.returncode == 0, stop.stdout + stop.stderr
    # The server's records name what it ends there (the ssh clients then end by themselves).
    assert f" {netns_server.address}: ended process groups" in stop.stdout, stop.stdout
    assert local_part_left(made) == []
    assert server_part_left(made, netns_server, run_id) == []
    assert not master_open(netns_server.address)
    assert not list((Path("/tmp/hotagg-state") / "servers").glob(f"*/{run_id}.json"))
    print(f"built in {built:.1f} s, stopped in {time.monotonic() - started - built:.1f} s")

    again = make_stop(run_id)  # idempotent: nothing is left to find
    assert again.returncode == 0
    assert f"nothing of run {run_id} to stop" in again.stdout, again.stdout


@pytest.mark.root
def test_an_unreachable_server_is_named_and_this_side_still_cleaned(
    netns_server: NetnsServer, tmp_path: Path
) -> None:
    tag = f"u{os.getpid() % 10000:04d}"
    run_id = f"test-stop-{tag}"
    made = interrupted_run(netns_server.address, tag, run_id, tmp_path)
    try:
        unreachable_then_back(made, netns_server, run_id)
    finally:
        make_stop(run_id)  # whatever an assertion above left
        os.close(made["netns_fd"])


def unreachable_then_back(made: dict[str, Any], netns_server: NetnsServer, run_id: str) -> None:
    # The server drops off the network: its link goes down, the run's ssh connections hang
    # (their clients stay), and a new login finds no route.
    subprocess.run(["ip", "link", "set", netns_server.root_veth, "down"], check=True)
    try:
        stop = make_stop(run_id)
        assert stop.returncode == 1, stop.stdout + stop.stderr
        unreached = [line for line in stop.stdout.splitlines() if netns_server.address in line]
        assert len(unreached) == 1 and "unreachable: " in unreached[0], stop.stdout
        assert f"not cleaned on root@{netns_server.address}" in stop.stderr
        assert "killed ssh clients" in stop.stdout, stop.stdout  # the hung ones
        assert local_part_left(made) == []
        assert alive(made["agent"])  # the server's part waits there: not cleaned from here
    finally:
        subprocess.run(["ip", "link", "set", netns_server.root_veth, "up"], check=True)
        subprocess.run(["ip", "addr", "replace", netns_server.subnet + "1/24", "dev",
                        netns_server.root_veth], check=True)  # fmt: skip
    time.sleep(0.3)
    later = make_stop(run_id)  # the next make stop finishes the server
    assert later.returncode == 0, later.stdout + later.stderr
    assert server_part_left(made, netns_server, run_id) == []
    assert local_part_left(made) == []


# --- without ssh or root ------------------------------------------------------------------


def test_a_run_without_servers_is_left_to_the_local_cleanup(tmp_path: Path) -> None:
    from topologies.cluster_state import cleanup_servers

    state = {"run_id": "plain", "checkout": str(REPO_ROOT), "owner": {"pid": os.getpid()}}
    (tmp_path / "plain.json").write_text(json.dumps(state))
    report = cleanup_servers("plain", state_dir=tmp_path, owner_timeout=0.1)
    assert report.lines == [] and report.ok
    assert json.loads((tmp_path / "plain.json").read_text()) == state


def test_a_record_ends_its_process_groups_and_goes(tmp_path: Path) -> None:
    """The server's side, run here on its own processes: a recorded process group (a shell
    and its child) ends; a later record of the same pid number would not match its start."""
    from topologies.cluster_state import cleanup_here, record_here, server_dir

    group = subprocess.Popen(["sh", "-c", "sleep 300 & wait"], start_new_session=True)
    try:
        time.sleep(0.2)  # the child is started
        children = [int(p) for p in subprocess.run(["pgrep", "-P", str(group.pid)],
                    capture_output=True, text=True, check=False).stdout.split()]  # fmt: skip
        assert children
        record = record_here("r1", "h1", {"process_groups": {"agent": group.pid}}, tmp_path)
        assert record.process_groups["agent"]["start"] is not None
        done = cleanup_here("r1", "h1", tmp_path)
        assert done == [f"h1: ended process groups [{group.pid}] of run r1"]
        assert group.wait(5) is not None and not any(alive(p) for p in children)
        assert not server_dir("h1", tmp_path).exists()
        assert cleanup_here("r1", "h1", tmp_path) == []  # nothing the second time
    finally:
        group.kill()


def test_an_unreachable_server_is_kept_for_the_next_stop(tmp_path: Path) -> None:
    from topologies.cluster_state import PENDING_DIR, cleanup_servers

    dead = {"pid": 999999999, "start": 1}  # no such process: the run's owner is gone
    state = {"run_id": "r2", "checkout": "/x", "owner": dead, "servers": ["root@nosuch.invalid"]}
    (tmp_path / "r2.json").write_text(json.dumps(state))
    report = cleanup_servers("r2", state_dir=tmp_path)
    assert report.unreachable == ["root@nosuch.invalid"]
    assert [line for line in report.lines if "nosuch" in line] == [
        next(line for line in report.lines if line.startswith("root@nosuch.invalid: unreachable: "))
    ]
    pending = tmp_path / PENDING_DIR / "r2.json"
    assert json.loads(pending.read_text())["servers"] == ["root@nosuch.invalid"]
    (tmp_path / "r2.json").unlink()  # the local clean-up deletes the state file
    again = cleanup_servers(checkout="/x", state_dir=tmp_path)  # tried again from pending
    assert again.unreachable == ["root@nosuch.invalid"] and pending.exists()
