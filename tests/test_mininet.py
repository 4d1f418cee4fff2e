"""Mininet end-to-end: the star and leaf-spine topologies with real switch processes, routes
from the controller, ping and UDP through the switches, and nothing left behind afterwards
(root; skips otherwise, with the reason).

One test body per switch target, as mininet's own test/test_nets.py runs one body per switch
class; a target whose binary is missing is skipped with the reason.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from topologies.network import Network, missing_prerequisites, start_network, switch_processes
from topologies.switches import SwitchStartError, bmv2_missing
from topologies.topology import load_topology

pytestmark = [pytest.mark.root, pytest.mark.e2e]

REPO = Path(__file__).resolve().parent.parent
TOPOLOGIES = REPO / "topologies"
STAR = TOPOLOGIES / "star.json"
P4INFO = REPO / "p4src" / "hotagg.p4info.txtpb"
PREFIX = f"t{os.getpid() % 100000}"  # our switch interfaces: t<pid>s1-eth1, apart from others'


def _skip_reason(target: str, pipeline: bool = True) -> str | None:
    if why := missing_prerequisites():
        return why
    if not (REPO / "softswitch" / "__main__.py").exists():
        return "softswitch/__main__.py does not exist yet"
    if pipeline and not P4INFO.exists():
        return f"{P4INFO} does not exist yet"
    if target == "bmv2" and (why := bmv2_missing()):
        return why
    return None


def our_interfaces() -> list[str]:
    return sorted(p.name for p in Path("/sys/class/net").iterdir() if p.name.startswith(PREFIX))


def alive_node_shells(pids: dict[str, int]) -> list[str]:
    alive = []
    for name, pid in pids.items():
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if f"mininet:{name}".encode() in cmdline.split(b"\0"):
            alive.append(name)
    return alive


def our_node_shells() -> list[int]:
    """Live Mininet node shells that this test process started."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes()
            status = (entry / "status").read_text()
        except OSError:
            continue
        if b"mininet:" in cmdline and f"\nPPid:\t{os.getpid()}\n" in status:
            pids.append(int(entry.name))
    return pids


def program_switches(network: Network, target: str, topo_file: Path) -> None:
    """Push the pipeline and the routes, as the experiment's controller does."""
    from controller.client import SwitchClient
    from controller.forwarding import Forwarding, compute_routes
    from controller.p4info import P4Info

    p4info = P4Info.from_file(P4INFO)
    topology = load_topology(topo_file)
    from tests.conftest import bmv2_config  # compiles with p4c on first use

    config = bmv2_config() if target == "bmv2" else b""
    for name, addr in network.grpc_addrs.items():
        with SwitchClient(addr, device_id=network.device_ids[name], wait=5.0) as client:
            client.set_pipeline(p4info.message, config)
            Forwarding(client, p4info).install(compute_routes(topology, name))


RECEIVER = textwrap.dedent(
    """
    import socket, sys
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", 9999))
    s.settimeout(10)
    print("ready", flush=True)
    data, peer = s.recvfrom(2048)
    print(data.decode(), peer[0], flush=True)
    """
)
SENDER = textwrap.dedent(
    """
    import socket, sys, time
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for _ in range(20):  # until the receiver got one (it exits then)
        s.sendto(b"hello-hotagg", (sys.argv[1], 9999))
        time.sleep(0.1)
    """
)


@pytest.mark.parametrize("topo_name", ["star", "leafspine"])
@pytest.mark.parametrize("target", ["embedded", "bmv2"])
def test_ping_udp_and_clean_stop(target: str, topo_name: str, tmp_path: Path) -> None:
    if why := _skip_reason(target):
        pytest.skip(why)
    topo_file = TOPOLOGIES / f"{topo_name}.json"
    topo = load_topology(topo_file)
    ps = topo.parameter_servers[0]
    # The farthest worker: on another leaf than the PS if there is one.
    far = [w for w in topo.workers if topo.attachment(w.name)[0] != topo.attachment(ps.name)[0]]
    sender = (far or topo.workers)[0]
    network = start_network(
        topo,
        target,
        grpc_base_port=0,
        intf_prefix=PREFIX,
        log_dir=tmp_path / "logs",
        state_dir=tmp_path / "state",
        seed=1,
    )
    try:
        shells = {n.name: n.pid for n in (*network.net.hosts, *network.net.switches)}
        assert len(switch_processes(network.run_id)) == len(topo.switches)
        ports = [(link.node2, link.port2) for link in topo.links]
        ports += [(link.node1, link.port1) for link in topo.links if link.port1 is not None]
        assert set(our_interfaces()) == {f"{PREFIX}{s}-eth{p}" for s, p in ports}
        assert network.state_path.exists()
        src, dst = network.host(sender.name), network.host(ps.name)
        # Nothing passes before the controller programs the switches: the path is theirs.
        ping = src.popen(["ping", "-c", "1", "-W", "1", ps.ip], text=True)
        ping.communicate(timeout=10)
        assert ping.returncode != 0, "ping went through an unprogrammed switch"
        program_switches(network, target, topo_file)

        ping = src.popen(["ping", "-c", "3", "-i", "0.2", "-W", "2", ps.ip], text=True)
        out, err = ping.communicate(timeout=30)
        assert ping.returncode == 0, f"ping {sender.name} -> {ps.name} failed:\n{out}{err}"
        assert ", 0% packet loss" in out

        recv = dst.popen([sys.executable, "-c", RECEIVER], text=True)
        assert recv.stdout.readline().strip() == "ready"
        send = src.popen([sys.executable, "-c", SENDER, ps.ip], text=True)
        out, err = recv.communicate(timeout=20)
        send.kill()
        send.wait()
        assert recv.returncode == 0, f"no UDP datagram reached {ps.name}: {err}"
        assert out.split() == ["hello-hotagg", sender.ip]
    finally:
        network.stop()
    assert switch_processes(network.run_id) == []
    assert our_interfaces() == []
    assert alive_node_shells(shells) == []
    assert not network.state_path.exists()


def _unstopped_star(tmp_path: Path) -> Network:
    """The embedded star, for a test that plays a run whose owner never calls stop()."""
    if why := _skip_reason("embedded", pipeline=False):
        pytest.skip(why)
    return start_network(
        STAR, grpc_base_port=0, intf_prefix=PREFIX, state_dir=tmp_path / "state",
        log_dir=tmp_path / "logs",
    )  # fmt: skip


def test_cleanup_after_a_crash(tmp_path: Path) -> None:
    """A run whose owner never calls stop(): cleanup(run_id) removes everything it made."""
    from topologies.network import cleanup

    network = _unstopped_star(tmp_path)
    shells = {n.name: n.pid for n in (*network.net.hosts, *network.net.switches)}
    assert switch_processes(network.run_id) and our_interfaces()
    done = cleanup(network.run_id, state_dir=tmp_path / "state")
    assert any("switch processes" in d for d in done)
    assert switch_processes(network.run_id) == []
    assert our_interfaces() == []
    assert alive_node_shells(shells) == []
    assert not network.state_path.exists()
    network._stopped = True  # everything is gone; keep Mininet from tearing down twice


def test_cleanup_stops_a_crashed_runs_agents(tmp_path: Path) -> None:
    """A run that dies by SIGKILL takes its hosts' shells with it; an agent it started in a
    host lives on, and so does its namespace. cleanup(run_id) finds it by its record."""
    from topologies.network import cleanup

    network = _unstopped_star(tmp_path)
    host = sorted(network.topology.hosts)[0]
    agent = network.host(host).popen([sys.executable, "-c", "import time; time.sleep(120)"])
    network.record_agent(host, agent.pid)
    shells = {n.name: n.pid for n in network.net.hosts}
    for pid in shells.values():  # what the run's death does to them
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while alive_node_shells(shells) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert agent.poll() is None, "the agent should outlive its host's shell, as in a crash"
    done = cleanup(network.run_id, state_dir=tmp_path / "state")
    assert any("stopped agents" in d for d in done), done
    assert agent.wait(timeout=5) is not None
    assert our_interfaces() == []
    assert not network.state_path.exists()
    network._stopped = True  # everything is gone; keep Mininet from tearing down twice


def test_failed_switch_start_leaves_nothing(tmp_path: Path, monkeypatch) -> None:
    """A BMv2 binary that dies at start: a clear error naming it, and the half-built network
    undone. The binary is a stand-in that exits at once, so this runs with or without BMv2."""
    if why := missing_prerequisites():
        pytest.skip(why)
    broken = tmp_path / "simple_switch_grpc-broken"
    broken.write_text("#!/bin/sh\necho 'cannot start: no such device' >&2\nexit 1\n")
    broken.chmod(0o755)
    p4c = tmp_path / "p4c-bm2-ss"  # bmv2_missing() wants p4c too; only its presence counts
    p4c.write_text("#!/bin/sh\nexit 0\n")
    p4c.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("BMV2_BINARY", broken.name)
    with pytest.raises(SwitchStartError, match="exited with code 1"):
        start_network(
            STAR, "bmv2", grpc_base_port=0, intf_prefix=PREFIX, state_dir=tmp_path / "state",
            log_dir=tmp_path / "logs",
        )  # fmt: skip
    assert our_interfaces() == []
    assert list((tmp_path / "state").glob("*.json")) == []
    assert our_node_shells() == []


def test_cleanup_touches_only_marked_processes(tmp_path: Path) -> None:
    """cleanup(run_id) stops the switch processes of that run, and no other process."""
    from topologies.network import cleanup

    # Stand-ins for switch processes: their command line names softswitch.
    argv = [sys.executable, "-c", "import time; time.sleep(60)  # softswitch"]
    env = dict(os.environ, HOTAGG_RUN="run-a")
    mine = subprocess.Popen(argv, env=env)
    other = subprocess.Popen(argv, env=dict(env, HOTAGG_RUN="run-b"))
    unmarked = subprocess.Popen(argv, env={k: v for k, v in env.items() if k != "HOTAGG_RUN"})
    try:
        # Popen returns once exec has begun, but /proc/PID/cmdline stays empty until the new
        # program's arguments are in place: under load switch_processes once found none.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not all(
            b"softswitch" in Path(f"/proc/{p.pid}/cmdline").read_bytes()
            for p in (mine, other, unmarked)
        ):
            time.sleep(0.01)
        assert mine.pid in switch_processes("run-a")
        assert other.pid not in switch_processes("run-a")
        assert unmarked.pid not in switch_processes(None)
        done = cleanup("run-a", state_dir=tmp_path)
        assert done == [f"stopped switch processes [{mine.pid}]"]
        assert mine.wait(5) == -15  # SIGTERM
        assert other.poll() is None and unmarked.poll() is None
    finally:
        for proc in (mine, other, unmarked):
            proc.kill()
            proc.wait()


def test_without_root_start_network_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    from topologies import network

    monkeypatch.setattr(network.os, "geteuid", lambda: 1000)
    with pytest.raises(network.NetworkError, match="needs root"):
        start_network(STAR)
