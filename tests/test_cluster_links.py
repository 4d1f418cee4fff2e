"""Links between servers (issue #32 step 4, topologies/remote_links.py) against the second
"server" of tests/cluster_server.py (an sshd in a network namespace): two embedded switches on
different servers joined by a VXLAN link, a host on the other server cabled to a local switch
through the VXLAN-to-veth redirect, pings and a rate-shaped UDP burst through both, a VNI
held by an earlier run's left-over device, and nothing of either left on either side after a
stop, also after a link failed half-way. Nodes are placed by experiment/placement.py.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster_server import NetnsServer, netns_server_for
from topologies import cluster
from topologies.cluster import Server

PY = sys.executable  # the venv's python: at the same path on the netns server
# Switch interface prefix (5 characters: a run's own are 4) and VXLAN plan tag of this module.
TAG, PLAN_TAG = f"lk{os.getpid() % 1000:03d}", f"t{os.getpid() % 1000:03d}"
SHAPED_MBPS = 2.0  # the switch-to-switch link's rate; the host links run at 10 Mbit/s


@pytest.fixture(scope="module")
def netns_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetnsServer]:
    """tests/test_cluster.py's second server, one for this module."""
    yield from netns_server_for(tmp_path_factory.mktemp("links-server"))


def remote_switch_class() -> type:
    """The embedded switch, run on its node's server: ports prepared through the node's shell,
    the process started through rpopen (its ssh has a pty: the process gets SIGHUP when it
    ends) and killed by the pid it prints, P4Runtime on the server's address. A stand-in for
    the remote switch of topologies/remote.py, which another step builds."""
    from topologies.nodes import OFFLOADS, P4RuntimeSwitch
    from topologies.remote import RemoteHotaggHost, RemoteMixin
    from topologies.switches import REPO_ROOT, RUN_ENV, SwitchStartError
    from topologies.targets import LaunchSpec, port_open

    class RemoteEmbeddedSwitch(RemoteMixin, P4RuntimeSwitch):
        sshbase = RemoteHotaggHost.sshbase  # the server's shared ssh connection
        remote: Any = None
        remote_pid: int | None = None

        @property
        def grpc_addr(self) -> str:
            return f"{self.serverIP}:{self.grpc_port}" if self.isRemote else super().grpc_addr

        def start(self, controllers: Any = ()) -> None:
            if not self.isRemote:
                return super().start(controllers)
            for ifname in self.p4_ports().values():
                self.cmd("ethtool -K " + ifname + " " + " ".join(f"{f} off" for f in OFFLOADS))
            spec = LaunchSpec(self.name, self.p4_ports(), self.grpc_addr, self.device_id,
                              self.cpu_port, self.seed)  # fmt: skip
            line = shlex.join(["env", "-C", str(REPO_ROOT), f"PYTHONPATH={REPO_ROOT}",
                               f"{RUN_ENV}={self.run_id}", *self.kind.argv(spec)])  # fmt: skip
            script = f"echo $$; exec {line} > {shlex.quote(str(self.log_path))} 2>&1"
            self.remote = self.rpopen(["sh", "-c", shlex.quote(script)])
            self.remote_pid = int(self.remote.stdout.readline().strip())
            deadline = time.monotonic() + self.start_timeout
            while not port_open(self.serverIP, self.grpc_port):
                if self.remote.poll() is not None or time.monotonic() > deadline:
                    raise SwitchStartError(f"{self.name} on {self.server} did not come up")
                time.sleep(0.1)
            return None

        @classmethod
        def batchStartup(cls, switches: Any) -> Any:
            # The remote ones waited in start(); P4RuntimeSwitch's waits on local processes.
            P4RuntimeSwitch.batchStartup([s for s in switches if not s.isRemote])
            return switches

        def stop_process(self) -> None:
            if self.remote is not None and self.remote_pid is not None:
                self.rcmd(f"kill -KILL {self.remote_pid}")
                self.remote.terminate()
                self.remote.wait(10)
                self.remote = None
            super().stop_process()

    return RemoteEmbeddedSwitch


def links_topology(prefix: str) -> Any:
    """h1 and the PS h3 on s1; h2 on s2, behind s1-s2 (2 Mbit/s)."""
    from topologies.topology import parse_topology

    h1, h2, h3 = f"{prefix}a", f"{prefix}b", f"{prefix}c"
    return parse_topology(
        {
            "hosts": {
                h1: {"ip": "10.0.1.1/24", "mac": "08:00:00:00:01:01", "role": "worker"},
                h3: {"ip": "10.0.1.3/24", "mac": "08:00:00:00:01:03", "role": "ps"},
                h2: {"ip": "10.0.2.1/24", "mac": "08:00:00:00:02:01", "role": "worker"},
            },
            "switches": {
                "s1": {"aggregate": True, "service_ip": "10.0.1.254", "mac": "08:00:00:00:01:00"},
                "s2": {"mac": "08:00:00:00:02:00"},
            },
            "links": [  # the cross-server ones (once h3 is moved) are numbers 0 and 1
                [h1, "s1-p1", "0ms", 10],
                [h3, "s1-p3", "0ms", 10],
                ["s1-p2", "s2-p2", "0ms", SHAPED_MBPS],
                [h2, "s2-p1", "0ms", 10],
            ],
        },
        "links-test",
    )


def build(topology: Any, placement: dict[str, Server], plan: Any, prefix: str, logs: Path) -> Any:
    """An unstarted Mininet of `topology` with its nodes on their servers and VXLAN links."""
    from mininet.net import Mininet

    from topologies.remote import RemoteHotaggHost
    from topologies.remote_links import use_cross_server_links
    from topologies.switches import free_tcp_port
    from topologies.topo import HotaggTopo

    topo = HotaggTopo(
        topology, switch_cls=remote_switch_class(), host_cls=RemoteHotaggHost,
        grpc_ports={s: free_tcp_port() for s in topology.switches}, intf_prefix=prefix,
        log_dir=logs, run_id=f"test-links-{prefix}", netem=False,
    )  # fmt: skip
    for node, server in placement.items():
        topo.nodeInfo(node).update(server=server.host, user=server.user)
    use_cross_server_links(topo, plan)
    return Mininet(topo=topo, controller=None, build=False, autoSetMacs=False,
                   waitConnected=False)  # fmt: skip


def server_links(netns_server: NetnsServer) -> str:
    """`ip -br link` on the netns server, in its root namespace."""
    return subprocess.run(["ip", "-n", netns_server.netns, "-br", "link"], capture_output=True,
                          text=True, check=True).stdout  # fmt: skip


def local_links() -> str:
    return subprocess.run(["ip", "-br", "link"], capture_output=True, text=True,
                          check=True).stdout  # fmt: skip


def ours(text: str, *marks: str) -> list[str]:
    """Lines of `ip -br link` naming one of our devices."""
    return [line for line in text.splitlines() if any(line.startswith(m) for m in marks)]


@pytest.fixture(scope="module")
def network(netns_server: NetnsServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The running two-server network, a VNI already held on the server by a left-over
    vxlan device when it is built; stopped at the latest when the module ends."""
    from contract.p4files import P4INFO_PATH
    from controller.client import SwitchClient
    from controller.forwarding import Forwarding, compute_routes
    from controller.p4info import P4Info
    from experiment.placement import crossing_links, place
    from topologies.remote_links import VxlanPlan

    topology = links_topology(TAG)
    servers = cluster.parse_servers(netns_server.address)
    # s1 keeps the PS's rack (s1, h1, h3) on this machine, s2 and h2 go to the server;
    # h3 moved there too, so its link to s1 crosses.
    placement = place(topology, servers, f"{TAG}c@{netns_server.address}")
    crossing = {(link.node1, link.node2) for link in crossing_links(topology, placement)}
    assert crossing == {("s1", "s2"), (f"{TAG}c", "s1")}
    plan = VxlanPlan(tag=PLAN_TAG)
    taken = next(plan.vnis(1))  # the first VNI the s1-s2 link tries, held on the server
    leftover = f"old{TAG}"
    subprocess.run(["ip", "-n", netns_server.netns, "link", "add", leftover, "type", "vxlan",
                    "id", str(taken), "dstport", "4789"], check=True)  # fmt: skip
    net = build(topology, placement, plan, TAG, tmp_path_factory.mktemp("links-logs"))
    state = {"net": net, "topology": topology, "plan": plan, "taken": taken, "stopped": False}

    def stop() -> None:
        if not state["stopped"]:
            state["stopped"] = True
            for switch in net.switches:
                switch.stop_process()
            net.stop()

    state["stop"] = stop
    try:
        started = time.monotonic()
        net.build()
        net.start()
        state["build_seconds"] = time.monotonic() - started
        p4info = P4Info.from_file(P4INFO_PATH)
        for name in topology.switches:
            switch = net.get(name)
            with SwitchClient(switch.grpc_addr, device_id=switch.device_id, wait=10.0) as client:
                client.set_pipeline(p4info.message, b"")
                Forwarding(client, p4info).install(compute_routes(topology, name))
        yield state
    finally:
        stop()
        subprocess.run(["ip", "-n", netns_server.netns, "link", "del", leftover], check=False)


RECEIVER = textwrap.dedent(
    """
    import socket, time
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", 9999))
    s.settimeout(3)
    print("ready", flush=True)
    n, first, last = 0, 0.0, 0.0
    try:
        while True:
            s.recv(2048)
            last = time.monotonic()
            first = first or last
            n += 1
    except socket.timeout:
        pass
    print(n, last - first, flush=True)
    """
)
SENDER = (
    "import socket, sys; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
    "for _ in range(int(sys.argv[2])): s.sendto(bytes(int(sys.argv[3])), (sys.argv[1], 9999))"
)


@pytest.mark.root
def test_two_switches_on_two_servers_join_over_vxlan(network: Any, netns_server: NetnsServer):
    from topologies.remote_links import VXLAN_MTU, VXLANLink, run_root

    net, h1, h2 = network["net"], network["net"].get(f"{TAG}a"), network["net"].get(f"{TAG}b")
    assert net.get("s2").isRemote and h2.isRemote and not net.get("s1").isRemote
    link = next(lk for lk in net.links if {lk.intf1.node.name, lk.intf2.node.name} == {"s1", "s2"})
    assert isinstance(link, VXLANLink) and link.vni is not None
    assert link.vni != network["taken"]  # the left-over device's VNI was passed over
    port = f"{TAG}s1-eth2"
    here = subprocess.run(["ip", "-d", "link", "show", port], capture_output=True, text=True,
                          check=True).stdout  # fmt: skip
    assert f"mtu {VXLAN_MTU}" in here and f"vxlan id {link.vni} " in here, here
    assert f"remote {netns_server.address} " in here and "dstport 4789" in here
    there = run_root(net.get("s2"), f"ip -d link show {TAG}s2-eth2; tc class show dev {TAG}s2-eth2")
    assert f"vxlan id {link.vni} " in there.stdout and "rate 2Mbit" in there.stdout, there

    out = h1.cmd(f"ping -c 3 -i 0.2 -W 2 {h2.IP()}")
    assert " 0% packet loss" in out, out

    # A burst at h1's 10 Mbit/s leaves s1 at the s1-s2 link's 2 Mbit/s.
    count, size = 300, 1200
    receiver = h2.popen([PY, "-c", RECEIVER], text=True)
    assert receiver.stdout.readline().strip() == "ready"
    sender = h1.popen([PY, "-c", SENDER, h2.IP(), str(count), str(size)])
    assert sender.wait(30) == 0
    received, seconds = receiver.communicate(timeout=30)[0].split()
    frame_bits = (size + 8 + 20 + 14) * 8  # UDP, IPv4, Ethernet: what htb counts
    mbps = (int(received) - 1) * frame_bits / float(seconds) / 1e6
    assert int(received) == count
    assert 0.75 * SHAPED_MBPS < mbps < 1.15 * SHAPED_MBPS, f"{mbps:.2f} Mbit/s"


@pytest.mark.root
def test_a_host_on_another_server_reaches_its_switch_through_the_redirect(network: Any):
    from topologies.remote_links import VXLAN_MTU

    net = network["net"]
    h1, h2, h3 = (net.get(f"{TAG}{x}") for x in "abc")
    assert h3.isRemote and not net.get("s1").isRemote
    eth0 = h3.cmd("ip -d link show eth0")
    assert "veth" in eth0 and f"mtu {VXLAN_MTU}" in eth0 and "08:00:00:00:01:03" in eth0, eth0
    # h1 -> h3: s1 writes h3's MAC as both source and destination, into the redirect
    for source, target in ((h1, h3), (h3, h1), (h3, h2)):
        out = source.cmd(f"ping -c 3 -i 0.2 -W 2 {target.IP()}")
        assert " 0% packet loss" in out, f"{source.name} -> {target.name}: {out}"


@pytest.mark.root
def test_stopping_removes_every_device_on_both_servers(network: Any, netns_server: NetnsServer):
    plan = network["plan"]
    marks = (f"hx{plan.tag}", f"hw{plan.tag}", TAG)
    assert ours(server_links(netns_server), *marks)  # the redirect's devices, s2's ports
    assert network["build_seconds"] < 30
    network["stop"]()
    assert ours(local_links(), *marks) == []
    assert ours(server_links(netns_server), *marks) == []
    pids = subprocess.run(["ip", "netns", "pids", netns_server.netns], capture_output=True,
                          text=True, check=True).stdout.split()  # fmt: skip
    cmdlines = [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in pids
                if Path(f"/proc/{pid}/cmdline").exists()]  # fmt: skip
    assert not [c for c in cmdlines if b"softswitch" in c]  # the remote switch is gone


@pytest.mark.root
def test_a_link_that_fails_half_way_leaves_nothing(netns_server: NetnsServer, tmp_path: Path):
    """s2's port name is taken on the server: the s1-s2 link fails after its local end was
    made; that end, and the host link made before it, are gone after the stop."""
    from experiment.placement import place
    from topologies.remote_links import RemoteLinkError, VxlanPlan

    prefix = f"fk{os.getpid() % 1000:03d}"
    topology = links_topology(prefix)
    address = netns_server.address
    placement = place(topology, cluster.parse_servers(address), f"{prefix}c@{address}")
    plan = VxlanPlan(tag=f"u{os.getpid() % 1000:03d}")
    taken = f"{prefix}s2-eth2"
    subprocess.run(["ip", "-n", netns_server.netns, "link", "add", taken, "type", "veth",
                    "peer", "name", f"{prefix}x"], check=True)  # fmt: skip
    net = build(topology, placement, plan, prefix, tmp_path)
    try:
        with pytest.raises(RemoteLinkError, match=rf"s2:{taken} on {address}: .*File exists"):
            net.build()
    finally:
        net.stop()
        subprocess.run(["ip", "-n", netns_server.netns, "link", "del", taken], check=False)
    marks = (f"hx{plan.tag}", f"hw{plan.tag}", prefix)
    assert ours(local_links(), *marks) == []
    assert ours(server_links(netns_server), *marks) == []
