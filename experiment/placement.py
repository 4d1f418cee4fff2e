"""Which server each node of a topology runs on, when an experiment is spread over several
machines (issue #32; servers: topologies/cluster.py).

Automatic placement:
- racks (a switch with the hosts cabled to it) go round-robin over the servers, the
  coordinator first; the rack of the parameter server comes first, so the PS and its leaf
  stay on the coordinator with the controller. Switches without hosts (spines) stay on the
  coordinator. Only switch-to-switch links then cross servers.
- a topology with one rack (a star): the switch and the parameter servers stay on the
  coordinator, the workers go round-robin over the servers, starting with the second, so
  the coordinator (which also runs the switch and the controller) gets the fewest.

`PLACE=h3@host2,s2@host2` moves single nodes (only those: a switch's hosts do not follow it).
Which links cross servers follows from the placement (`crossing_links`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from topologies.cluster import ClusterError, Server, parse_server
from topologies.topology import Link, Topology

PLACE_FORMAT = "comma-separated node@server, e.g. h3@host2,s2@host2"


class PlacementError(ValueError):
    """A PLACE= override names a node or server that does not exist, or is malformed."""


def racks(topology: Topology) -> dict[str, list[str]]:
    """Switch -> the hosts cabled to it, for every switch with hosts, in file order."""
    cabled: dict[str, list[str]] = {}
    for host in topology.hosts:
        cabled.setdefault(topology.attachment(host)[0], []).append(host)
    return {name: cabled[name] for name in topology.switches if name in cabled}


def auto_placement(topology: Topology, servers: Sequence[Server]) -> dict[str, Server]:
    """node -> server for every switch and host (servers[0] is the coordinator)."""
    if not servers:
        raise PlacementError("no servers to place nodes on")
    coordinator = servers[0]
    where = {name: coordinator for name in (*topology.switches, *topology.hosts)}
    by_rack = racks(topology)
    if len(by_rack) <= 1:  # a star: spread its workers
        for i, worker in enumerate(topology.workers):
            where[worker.name] = servers[(i + 1) % len(servers)]
        return where
    ps_hosts = {h.name for h in topology.parameter_servers}
    with_ps = [s for s, hosts in by_rack.items() if ps_hosts.intersection(hosts)]
    ordered = with_ps + [s for s in by_rack if s not in with_ps]
    for i, switch in enumerate(ordered):
        server = servers[i % len(servers)]
        for name in (switch, *by_rack[switch]):
            where[name] = server
    return where


def _server_named(text: str, servers: Sequence[Server]) -> Server | None:
    try:
        wanted = parse_server(text)
    except ClusterError:
        return None
    explicit_user = "@" in text
    for server in servers:
        if server.host == wanted.host and (not explicit_user or server.user == wanted.user):
            return server
    return None


def parse_overrides(text: str, topology: Topology, servers: Sequence[Server]) -> dict[str, Server]:
    """`h3@host2,s2@host2` -> {node: server}; one-line PlacementError for a malformed entry,
    an unknown node or server, or a node given twice."""
    overrides: dict[str, Server] = {}
    nodes = {*topology.switches, *topology.hosts}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            if text.strip():
                raise PlacementError(f"PLACE={text}: empty entry ({PLACE_FORMAT})")
            continue
        node, at, where = entry.partition("@")
        if not at or not node or not where:
            raise PlacementError(f"PLACE entry {entry!r} is not node@server ({PLACE_FORMAT})")
        if node not in nodes:
            raise PlacementError(
                f"PLACE entry {entry!r}: {topology.source} has no host or switch {node!r}"
            )
        server = _server_named(where, servers)
        if server is None:
            known = ", ".join(str(s) for s in servers)
            raise PlacementError(
                f"PLACE entry {entry!r}: {where!r} is not one of the servers ({known})"
            )
        if node in overrides:
            raise PlacementError(f"PLACE names {node} twice")
        overrides[node] = server
    return overrides


def place(topology: Topology, servers: Sequence[Server], overrides: str = "") -> dict[str, Server]:
    """The automatic placement with the PLACE= overrides on top."""
    where = auto_placement(topology, servers)
    where.update(parse_overrides(overrides, topology, servers))
    return where


def crossing_links(topology: Topology, placement: Mapping[str, Server]) -> list[Link]:
    """The links whose two ends run on different servers (tunnelled: topologies/remote_links)."""
    return [link for link in topology.links if placement[link.node1] != placement[link.node2]]
