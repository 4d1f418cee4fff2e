"""Cluster (issue #32, step 3): P4Runtime switches on another server, both targets, against
the netns "server" of tests/cluster_server.py (an sshd in a network namespace). The switch is
started over ssh, its pipeline and routes are pushed from here with hotagg's controller code
to the server's address, pings cross it, and a SIGKILL on the server is reported as the
run's watch reports a death, with the tail of the log the switch keeps there. The tests skip
with the reason without root, openssh-server, sudo or (BMv2) simple_switch_grpc.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from experiment.processes import ProcessDied, Watched, raise_first_death
from tests.cluster_server import NetnsServer, netns_server_for
from topologies import cluster
from topologies.cluster import Server
from topologies.network import switch_processes
from topologies.switches import SwitchStartError
from topologies.targets import Bmv2Target, EmbeddedTarget, Target

pytestmark = pytest.mark.root


@pytest.fixture(scope="module")
def netns_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetnsServer]:
    yield from netns_server_for(tmp_path_factory.mktemp("netns-server"))


def leftovers(run_id: str, tag: str) -> list[str]:
    """What a test of run `run_id` with names starting `tag` left on the machine (the netns
    server shares its PID namespace and filesystem, not its interfaces)."""
    found = [f"switch process {pid}" for pid in switch_processes(run_id)]
    links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True, check=False)
    found += [line.split()[0] for line in links.stdout.splitlines() if tag in line]
    found += ["tap9"] if "tap9" in links.stdout else []
    return found


def test_a_switch_that_fails_on_its_server_says_where_with_its_log(
    netns_server: NetnsServer, tmp_path: Path
) -> None:
    from topologies.remote import RemoteSwitchProcess

    server = Server(netns_server.address)
    run_id = f"test-rswitch-fail-{os.getpid()}"
    process = RemoteSwitchProcess(
        name="s9", ports={1: "nosuchif0"}, log_dir=tmp_path, run_id=run_id, server=server
    )
    assert process.grpc_port > 0 and process.grpc_addr == f"{server.host}:{process.grpc_port}"
    assert process.log_path == tmp_path / server.host / "s9.log"
    with pytest.raises(SwitchStartError) as e:
        process.start(timeout=20)
    message = str(e.value)
    assert message.startswith(f"s9 (embedded) on {server} exited with code 3:"), message
    assert "error: interface 'nosuchif0' does not exist" in message
    assert "error: interface 'nosuchif0' does not exist" in process.log_path.read_text()
    assert not (tmp_path / "s9.log").exists()  # the log is the server's, under its name
    assert not switch_processes(run_id)


def two_host_topology(tag: str) -> Any:
    from topologies.topology import parse_topology

    return parse_topology(
        {
            "hosts": {
                f"{tag}a": {"ip": "10.0.0.1/24", "mac": "08:00:00:00:00:01", "role": "worker"},
                f"{tag}b": {"ip": "10.0.0.2/24", "mac": "08:00:00:00:00:02", "role": "ps"},
            },
            "switches": {"s1": {"aggregate": True, "service_ip": "10.0.0.254"}},
            "links": [[f"{tag}a", "s1-p1", "0ms", 10], [f"{tag}b", "s1-p2", "0ms", 10]],
        }
    )


def ping_kill_and_watch(
    address: str, target: Target, remote_hosts: set[str], tag: str, log_dir: Path
) -> None:
    """s1 on the server with hosts `tag`a and `tag`b (those in `remote_hosts` there too, the
    others here: their links cross over Mininet's SSH tunnel); the pipeline and routes
    pushed from here; a ping through s1; then s1 SIGKILLed on its server and seen dead."""
    from mininet.net import Mininet

    from contract.p4files import P4INFO_PATH
    from controller.client import SwitchClient
    from controller.forwarding import Forwarding, compute_routes
    from controller.p4info import P4Info
    from topologies.network import Network
    from topologies.remote import RemoteHotaggHost, RemoteP4RuntimeSwitch
    from topologies.topo import HotaggTopo

    topology = two_host_topology(tag)
    run_id = f"test-rswitch-{tag}"
    topo = HotaggTopo(
        topology, switch_cls=RemoteP4RuntimeSwitch, host_cls=RemoteHotaggHost,
        intf_prefix=tag, log_dir=log_dir, run_id=run_id, netem=False,
        switch_opts={"target": target},
    )  # fmt: skip
    topo.nodeInfo("s1").update(server=address, grpc_port=0)  # 0: a port free on the server
    for host in remote_hosts:
        topo.nodeInfo(host)["server"] = address
    for _, _, info in topo.links(withInfo=True):
        info["cls"] = cluster.load_cluster().RemoteSSHLink  # veth within a server, else a tunnel
    net = Mininet(topo=topo, controller=None, build=False, autoSetMacs=False, waitConnected=False)
    try:
        started = time.monotonic()
        net.build()
        net.start()
        switch = net.get("s1")
        assert switch.isRemote and switch.process.server == Server(address)
        network = Network(topology, net, target.name, run_id, log_dir / "state.json", log_dir)
        grpc_addr = network.grpc_addrs["s1"]
        assert grpc_addr == f"{address}:{switch.process.grpc_port}"
        p4info = P4Info.from_file(P4INFO_PATH)
        with SwitchClient(grpc_addr, device_id=switch.device_id, wait=10.0) as client:
            client.set_pipeline(p4info.message, target.device_config())
            Forwarding(client, p4info).install(compute_routes(topology, "s1"))
        out = net.get(f"{tag}a").cmd("ping -c 3 -i 0.2 -W 2 10.0.0.2")
        assert " 0% packet loss" in out, out
        print(f"built, programmed and pinged in {time.monotonic() - started:.1f} s")

        # The switch is the wrapper's only child on the server (same PID namespace here).
        proc = switch.process.proc
        children = subprocess.run(["pgrep", "-P", str(proc.remote_pid)], capture_output=True,
                                  text=True, check=False).stdout.split()  # fmt: skip
        assert len(children) == 1, children
        kill = [*cluster.ssh_command(Server(address)), f"kill -KILL {children[0]}"]
        assert subprocess.run(kill, check=False).returncode == 0
        # As the testbed watches its switches (experiment/testbed.py watched_switches).
        watched = Watched(f"{target.name} switch s1", proc, switch.process.log_path)
        deadline = time.monotonic() + 10
        while watched.failed() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(ProcessDied) as died:
            raise_first_death("measure phase", [watched])
        message = str(died.value)
        first = (
            rf"measure phase: {target.name} switch s1 \(pid {proc.remote_pid}\) was killed by "
            rf"SIGKILL on root@{re.escape(address)}; the run stopped\. Last lines of "
            rf"root@{re.escape(address)}:{re.escape(str(log_dir / address / 's1.log'))}:\n"
        )
        assert re.match(first, message), message
        tail = (log_dir / address / "s1.log").read_text().splitlines()[-8:]
        assert message.endswith("\n".join(f"  | {line}" for line in tail)) and tail
        assert not proc.connection_lost
    finally:
        net.stop()
    assert not leftovers(run_id, tag)


def test_ping_through_an_embedded_switch_on_another_server(
    netns_server: NetnsServer, tmp_path: Path
) -> None:
    """One host here (its link is an SSH tunnel), one on the switch's server."""
    tag = f"e{os.getpid() % 100000}"
    ping_kill_and_watch(netns_server.address, EmbeddedTarget(), {f"{tag}b"}, tag, tmp_path)


def test_ping_through_a_bmv2_switch_on_another_server(
    netns_server: NetnsServer, tmp_path: Path
) -> None:
    """Both hosts on the switch's server; BMv2 started there by its absolute path."""
    target = Bmv2Target.from_environment()
    if why := target.missing():
        pytest.skip(why)
    tag = f"b{os.getpid() % 100000}"
    hosts = {f"{tag}a", f"{tag}b"}
    ping_kill_and_watch(netns_server.address, target, hosts, tag, tmp_path)
