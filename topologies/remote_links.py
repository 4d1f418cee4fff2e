"""Links between servers: the kernel's VXLAN, one VNI per link and run (issue #32).

`VXLANLink` is a Mininet Cluster Edition `RemoteLink`: two nodes on the same server get a
veth pair, as today; across servers each end is made on its own server by one root shell
script (locally, or over the server's shared ssh connection, topologies/cluster.py):

- a switch end (a node in its server's root namespace) is a vxlan device, created under a
  temporary name, moved into the node and renamed to the switch port's name;
- a host end cannot be a vxlan device: hotagg's forwarding writes the last hop with source
  MAC = destination MAC = the host's MAC, and the kernel's vxlan drops a received frame whose
  inner source MAC is its own ("ignore packet loops", issue #32 spike 7). So the vxlan device
  stays in the server's root namespace, a veth pair leads from there into the host (its end
  named eth0, carrying the host's MAC), and tc's u32 + mirred redirect every frame between
  the two, both ways. Mininet's SSH tunnel would also work there, but costs an ssh process
  per link, about 27 % of a core per 8k frames/s, and a hard-wired tap9 (spikes 1, 4, 4b).

The tunnel is UDP 4789 between the servers' addresses. Its MTU is VXLAN_MTU (1450 on a
1500-byte underlay), set on both ends and on a host's veth; hotagg's largest packet
(LARGEST_PACKET, contract/codec.py) must fit, which `mtu_problem()` checks on every link.
Shaping is today's: HtbIntf on the node's interface (the switch's vxlan port, the host's eth0).

Every name and VNI comes from the run's `VxlanPlan`, so concurrent runs and what an earlier
run left behind do not collide: the VNI is the plan's base plus the link's number, and one the
kernel already has on either server (a left-over device) is swapped for a random one; root
namespace devices carry the plan's tag. A link whose set-up fails removes what it made.
"""

from __future__ import annotations

import contextlib
import ipaddress
import random
import re
import secrets
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from mininet.link import Link

from contract.codec import ETH_LEN, IPV4_LEN, UDP_LEN
from contract.constants import ENTRY_LEN, HEADER_LEN, MAX_ENTRIES
from topologies.cluster import DEFAULT_USER, LOCALHOST, Server, _Shell, load_cluster
from topologies.topo import HtbIntf, HtbLink

_cluster = load_cluster()
RemoteLink: Any = _cluster.RemoteLink  # a class of a module loaded by path: untyped

VXLAN_PORT = 4789  # IANA's VXLAN port, on every server
UNDERLAY_MTU = 1500
# What VXLAN adds around the inner IP packet: inner Ethernet, VXLAN, outer UDP and IPv4.
VXLAN_OVERHEAD = ETH_LEN + 8 + UDP_LEN + IPV4_LEN
VXLAN_MTU = UNDERLAY_MTU - VXLAN_OVERHEAD  # 1450
# hotagg's largest IP packet: a full header with MAX_ENTRIES entries, in UDP in IPv4.
LARGEST_PACKET = IPV4_LEN + UDP_LEN + HEADER_LEN + ENTRY_LEN * MAX_ENTRIES
VNI_LIMIT = 1 << 24
VNI_TRIES = 8  # VNIs tried per link before giving up
VNI_TAKEN = 17  # exit status of an end's script when the kernel holds its VNI already (EEXIST)
_TAG = re.compile(r"[a-z][a-z0-9]{0,3}")


class RemoteLinkError(RuntimeError):
    """A link between servers could not be made; the message names the link and the server."""


def mtu_problem(largest_packet: int = LARGEST_PACKET, mtu: int = VXLAN_MTU) -> str | None:
    """Why hotagg's packets would not cross a tunnel of `mtu`, or None."""
    if largest_packet <= mtu:
        return None
    return (
        f"hotagg's largest packet ({largest_packet} bytes: {MAX_ENTRIES} entries) exceeds the "
        f"cross-server tunnels' MTU ({mtu} = {UNDERLAY_MTU} - {VXLAN_OVERHEAD} bytes of VXLAN)"
    )


@dataclass
class VxlanPlan:
    """A run's names and VNIs for its links between servers: `tag` (1-4 of [a-z0-9]) marks
    the devices it makes in a server's root namespace (hx<tag><n>: vxlan, hw<tag><n>: veth)."""

    tag: str = field(default_factory=lambda: "v" + secrets.token_hex(2)[:3])
    vni_base: int = field(default_factory=lambda: secrets.randbelow(VNI_LIMIT - 1) + 1)
    links: int = 0

    def __post_init__(self) -> None:
        if not _TAG.fullmatch(self.tag):
            raise ValueError(f"tag {self.tag!r}: 1-4 characters, [a-z][a-z0-9]*")

    def next_link(self) -> int:
        self.links += 1
        return self.links - 1

    def vnis(self, link: int) -> Iterator[int]:
        """The VNIs to try for link number `link`: the plan's own, then random ones."""
        yield (self.vni_base + link - 1) % (VNI_LIMIT - 1) + 1
        rng = random.Random(self.vni_base * 7919 + link)
        for _ in range(VNI_TRIES - 1):
            yield rng.randrange(1, VNI_LIMIT)

    def vxlan_name(self, link: int) -> str:
        return f"hx{self.tag}{link}"

    def veth_name(self, link: int) -> str:
        return f"hw{self.tag}{link}"


def _server(node: Any) -> str:
    return getattr(node, "server", LOCALHOST) or LOCALHOST


def _is_local(node: Any) -> bool:
    return _server(node) == LOCALHOST


def run_root(node: Any, script: str) -> subprocess.CompletedProcess:
    """Run a shell script as root in the root namespace of `node`'s server (over its shared
    ssh connection unless it is this machine)."""
    if _is_local(node):
        return _Shell(Server(LOCALHOST)).run(script)
    user = getattr(node, "user", DEFAULT_USER)
    line = script if user == DEFAULT_USER else f"sudo -n sh -c {shlex.quote(script)}"
    return _Shell(Server(node.serverIP, user)).run(line)


def underlay_address(node: Any, peer: Any) -> str:
    """The address `node`'s server sends the tunnel from towards `peer`'s server: the one
    the coordinator reaches it at, or for the coordinator its route's source address."""
    if not _is_local(node):
        return str(node.serverIP)
    out = subprocess.run(
        ["ip", "-o", "route", "get", str(peer.serverIP)], capture_output=True, text=True,
        check=False,
    ).stdout  # fmt: skip
    match = re.search(r"\bsrc (\S+)", out)
    if match is None:
        raise RemoteLinkError(f"no route from this machine to {peer.server} ({peer.serverIP})")
    return str(ipaddress.IPv4Address(match.group(1)))


@dataclass
class TunnelEnd:
    """One end of a link between servers: `intf` in `node`, tunnelled to `peer`'s server."""

    node: Any
    peer: Any
    intf: str
    addr: str | None
    vxlan: str  # the vxlan device's name in the server's root namespace (or its temporary)
    veth: str  # a host end's veth in the root namespace

    @property
    def is_host(self) -> bool:
        """A node with its own namespace: the redirect through a veth (see the module)."""
        return bool(self.node.inNamespace)

    def make_script(self, vni: int, local: str, remote: str) -> str:
        q = shlex.quote
        vx, veth, intf = q(self.vxlan), q(self.veth), q(self.intf)
        address = f" address {q(self.addr)}" if self.addr else ""
        create = (
            f"err=$(ip link add {vx} type vxlan id {vni} local {local} remote {remote} "
            f'dstport {VXLAN_PORT} nolearning 2>&1) || {{ echo "$err" >&2; '
            f'case "$err" in *VNI*|*"File exists"*) exit {VNI_TAKEN};; esac; exit 1; }}'
        )
        undo = f"ip link del {vx} 2>/dev/null" + (
            f"; ip link del {veth} 2>/dev/null" if self.is_host else ""
        )
        if self.is_host:
            redirect = "protocol all u32 match u32 0 0 action mirred egress redirect dev"
            steps = [
                f"ip link set {vx} mtu {VXLAN_MTU} up",
                f"ip link add {veth} mtu {VXLAN_MTU} type veth peer name {intf} mtu {VXLAN_MTU}"
                f"{address} netns {int(self.node.pid)}",
                f"ip link set {veth} up",
                f"tc qdisc add dev {vx} ingress",
                f"tc filter add dev {vx} parent ffff: {redirect} {veth}",
                f"tc qdisc add dev {veth} ingress",
                f"tc filter add dev {veth} parent ffff: {redirect} {vx}",
            ]
        else:
            # A switch runs in its server's root namespace: the move is to where it is,
            # and the rename (which fails if the port's name is taken) happens there.
            steps = [
                f"ip link set {vx} mtu {VXLAN_MTU}",
                f"ip link set {vx} netns {int(self.node.pid)}",
                f"ip link set {vx} name {intf}{address}",
            ]
        # The device is made first; any later step that fails removes it again.
        return "\n".join(
            [create, "trap 'rc=$?; [ $rc -eq 0 ] || { " + undo + "; }; exit $rc' EXIT", "set -e",
             *steps]
        )  # fmt: skip

    def make(self, vni: int) -> bool:
        """Make this end with `vni`; False if a server already holds that VNI."""
        local = underlay_address(self.node, self.peer)
        remote = underlay_address(self.peer, self.node)
        result = run_root(self.node, self.make_script(vni, local, remote))
        if result.returncode == VNI_TAKEN:
            return False
        if result.returncode != 0:
            last = (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1]
            raise RemoteLinkError(
                f"{self.node.name}:{self.intf} on {_server(self.node)}: vxlan {vni}: {last}"
            )
        return True

    def remove(self) -> None:
        """Delete what make() left in the server's root namespace and, for a switch end, the
        renamed device; never raises (clean-up)."""
        q = shlex.quote
        if self.is_host:
            script = f"ip link del {q(self.vxlan)}; ip link del {q(self.veth)}"
        else:
            script = f"ip link del {q(self.intf)}"
        with contextlib.suppress(Exception):
            run_root(self.node, script + " 2>/dev/null; true")


class VXLANLink(RemoteLink):
    """A link that is a veth pair within a server and a VXLAN tunnel between servers."""

    def __init__(self, node1: Any, node2: Any, plan: VxlanPlan | None = None, **kwargs: Any):
        self.plan = plan if plan is not None else default_plan()
        self.ends: list[TunnelEnd] = []
        self.vni: int | None = None
        super().__init__(node1, node2, **kwargs)

    def makeIntfPair(
        self,
        intfname1: str,
        intfname2: str,
        addr1: str | None = None,
        addr2: str | None = None,
        node1: Any = None,
        node2: Any = None,
        deleteIntfs: bool = True,
    ) -> Any:
        node1 = self.node1 if node1 is None else node1
        node2 = self.node2 if node2 is None else node2
        if _server(node1) == _server(node2):
            return Link.makeIntfPair(
                intfname1, intfname2, addr1, addr2, node1, node2, deleteIntfs=deleteIntfs
            )
        if problem := mtu_problem():
            raise RemoteLinkError(problem)
        number = self.plan.next_link()
        vxlan, veth = self.plan.vxlan_name(number), self.plan.veth_name(number)
        ends = [
            TunnelEnd(node1, node2, intfname1, addr1, vxlan, veth),
            TunnelEnd(node2, node1, intfname2, addr2, vxlan, veth),
        ]
        for vni in self.plan.vnis(number):
            made: list[TunnelEnd] = []
            try:
                for end in ends:
                    if not end.make(vni):
                        break
                    made.append(end)
            except RemoteLinkError:
                for end in made:
                    end.remove()
                raise
            if len(made) == len(ends):
                self.ends, self.vni = ends, vni
                self.tunnel: str | None = f"vxlan {vni}"  # RemoteLink's cross-server mark
                return None
            for end in made:  # this VNI is taken on the other server: both ends try another
                end.remove()
        raise RemoteLinkError(
            f"{node1.name}:{intfname1} <-> {node2.name}:{intfname2}: every VNI tried is taken "
            f"on {_server(node1)} or {_server(node2)}"
        )

    def stop(self) -> None:
        """Delete both ends (and a host end's root-namespace devices) or the veth pair."""
        if not self.ends:
            Link.stop(self)
            return
        for intf in (self.intf1, self.intf2):
            if intf is not None:
                with contextlib.suppress(Exception):
                    intf.node.delIntf(intf)
        for end in self.ends:
            end.remove()
        self.ends, self.tunnel = [], None

    def status(self) -> str:
        return f"{Link.status(self)} {self.tunnel or 'veth'}"


_default_plan: VxlanPlan | None = None


def default_plan() -> VxlanPlan:
    """One plan for links made without one (this process is one run)."""
    global _default_plan
    if _default_plan is None:
        _default_plan = VxlanPlan()
    return _default_plan


def use_cross_server_links(topo: Any, plan: VxlanPlan) -> None:
    """Turn every link of a HotaggTopo into a VXLANLink of `plan`, keeping its shaping (its
    link infos are the stored dicts, so Mininet's build sees the change)."""
    for _, _, info in topo.links(withInfo=True):
        if info.get("cls") is HtbLink:
            info["cls1"] = info["cls2"] = HtbIntf
        info["cls"] = VXLANLink
        info["plan"] = plan
