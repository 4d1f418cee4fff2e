"""IPv4 routes (p4src/include/forwarding.p4: table HotaggIngress.ipv4_lpm).

Routes come from a topology (the P4 tutorials' topology.json format, read and validated by
topologies.topology, the same reader the experiment uses; or a generator spec). Every switch
gets a /32 route to every host: to the host's own MAC on the port it is attached to, else
toward the next switch on a shortest path (ties: lowest port), addressed to that switch's
MAC (its "mac" in the file, else 08:00:00:00:NN:00 as the tutorials use, NN = the switch's
number).
"""

from __future__ import annotations

import ipaddress
import re
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from p4.v1 import p4runtime_pb2

from contract import names
from controller.client import SwitchClient
from controller.errors import BadInput
from controller.p4info import P4Info
from topologies.topology import Topology, TopologyFileError, load_topology

TABLE = names.TABLE_IPV4_LPM
FORWARD = names.ACTION_IPV4_FORWARD
SEND_TO_CPU = names.ACTION_SEND_TO_CPU
DROP = names.ACTION_DROP


class TopologyError(BadInput):
    pass


@dataclass(frozen=True)
class Route:
    prefix: int  # IPv4 address as an int
    prefix_len: int
    dst_mac: int
    port: int

    def __str__(self) -> str:
        return (
            f"{ipaddress.IPv4Address(self.prefix)}/{self.prefix_len} -> port {self.port} "
            f"mac {format_mac(self.dst_mac)}"
        )


def parse_mac(text: str) -> int:
    if not re.fullmatch(r"[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}", text):
        raise TopologyError(f"{text!r} is not a MAC address like 08:00:00:00:01:11")
    return int(text.replace(":", ""), 16)


def format_mac(value: int) -> str:
    return ":".join(f"{b:02x}" for b in value.to_bytes(6, "big"))


def load_routes_topology(spec: str | Path) -> Topology:
    """The topology (a file or a generator spec such as star:8) through the one reader the
    experiment uses too (topologies.topology); its errors become TopologyError."""
    try:
        return load_topology(spec)
    except TopologyFileError as e:
        raise TopologyError(str(e)) from None


def compute_routes(topo: Topology, switch: str) -> list[Route]:
    """The ipv4_lpm routes of `switch`, one /32 per host and one per other aggregating
    switch's service address (the PS's FLUSHes and chained WRITEBACKs go there, design.md
    section 7), sorted by address."""
    if switch not in topo.switches:
        raise TopologyError(f"no switch {switch!r} in {topo.source} (have {sorted(topo.switches)})")
    attached: dict[str, list[tuple[str, int]]] = {s: [] for s in topo.switches}  # host, port
    neighbours: dict[str, list[tuple[int, str]]] = {s: [] for s in topo.switches}
    for link in topo.links:
        if link.port1 is None:  # a host link (Link.is_host_link), written so port1 narrows
            attached[link.node2].append((link.node1, link.port2))
        else:
            neighbours[link.node1].append((link.port1, link.node2))
            neighbours[link.node2].append((link.port2, link.node1))
    # BFS from `switch`: first hop (port, next switch) toward every reachable switch.
    first_hop: dict[str, tuple[int, str] | None] = {switch: None}
    todo = deque([switch])
    while todo:
        here = todo.popleft()
        for port, nxt in sorted(neighbours[here]):
            if nxt not in first_hop:
                first_hop[nxt] = first_hop[here] or (port, nxt)
                todo.append(nxt)
    routes = []
    for sw in sorted(first_hop):
        for host, port in attached[sw]:
            ip = int(ipaddress.IPv4Address(topo.hosts[host].ip))
            first = first_hop[sw]
            if first is None:  # sw is `switch`: the host is on one of its ports
                routes.append(Route(ip, 32, parse_mac(topo.hosts[host].mac), port))
            else:
                hop_port, hop = first
                routes.append(Route(ip, 32, parse_mac(topo.switches[hop].router_mac), hop_port))
        service = topo.switches[sw]
        first = first_hop[sw]
        if first is not None and service.aggregate and service.service_ip:
            hop_port, hop = first
            ip = int(ipaddress.IPv4Address(service.service_ip))
            routes.append(Route(ip, 32, parse_mac(topo.switches[hop].router_mac), hop_port))
    return sorted(routes, key=lambda r: r.prefix)


class Forwarding:
    """The ipv4_lpm table of one switch."""

    def __init__(self, client: SwitchClient, p4info: P4Info) -> None:
        self.client = client
        self.p4info = p4info

    def _entry(self, route: Route) -> p4runtime_pb2.TableEntry:
        return self.p4info.table_entry(
            TABLE,
            {"dst_addr": (route.prefix, route.prefix_len)},
            FORWARD,
            {"dst_mac": route.dst_mac, "port": route.port},
        )

    def routes(self) -> list[Route]:
        out = []
        for entry in self.client.read_table(self.p4info.wildcard(TABLE)):
            e = self.p4info.decode_entry(entry)
            if e.action == FORWARD:
                # dst_addr is lpm, so it decodes to (value, prefix length), never an int
                prefix, plen = e.match["dst_addr"]  # type: ignore[misc]
                out.append(Route(prefix, plen, e.params["dst_mac"], e.params["port"]))
        return sorted(out, key=lambda r: (r.prefix, r.prefix_len))

    def install(self, routes: list[Route], replace: bool = False) -> dict[str, int]:
        """Make the switch hold `routes`: insert new ones, modify changed ones; with
        `replace`, also delete forwarding routes not in `routes`. Idempotent."""
        current = {(r.prefix, r.prefix_len): r for r in self.routes()}
        wanted = {(r.prefix, r.prefix_len): r for r in routes}
        new = [r for k, r in wanted.items() if k not in current]
        changed = [r for k, r in wanted.items() if k in current and current[k] != r]
        stale = [r for k, r in current.items() if k not in wanted] if replace else []
        self.client.write_entries("delete", [self._entry(r) for r in stale])
        self.client.write_entries("modify", [self._entry(r) for r in changed])
        self.client.write_entries("insert", [self._entry(r) for r in new])
        return {"inserted": len(new), "modified": len(changed), "deleted": len(stale)}
