"""The analytical bound: bytes per iteration on every directed link in each mode, and the
time the busiest of them needs at its rate.

An iteration cannot be shorter than the time the busiest link needs to carry the
iteration's packets in its busier direction. This module counts those packets from the
workload itself, grouped as the workers group them (hosts/worker.py: at most MAX_ENTRIES
keys per packet, per shard, hot keys in packets of their own), and from the hot set chosen
as the experiment chooses it (the warm-up's update counts, controller.hotset.choose with
the same floor). Per worker and PS shard, each iteration:

- server-only: a PULL, a PUSH and a DONE go to the PS, which answers each (PULL_REPLY as
  large as the PULL, a header-only PUSH_ACK per PUSH packet, a DONE_ACK).
- offload: the packets of hot keys stop at the switch the aggregation design names (today
  `ps-leaf`: the first aggregating switch on the worker's path to the PS), which acks the
  pushes and answers the pulls from its cache (a PULL only when the whole packet hit it; in
  the steady state every hot key's value is cached) and sends those replies back; they
  never cross the links beyond it. The cold packets go on to the PS as in server-only. The
  design adds its control traffic: with `ps-leaf` each PS sends its switch
  ceil(hot keys / MAX_ENTRIES) full COLLECT packets per iteration, each answered by a
  COLLECT_REPLY of the same size.

Every packet follows the route the controller installs (controller.forwarding's shortest
paths), so each directed link ("<sender>-<receiver>", experiment/schema.py directed_link)
gets the bytes of the flows that cross it. A mode's bound is its busiest link's bytes * 8 /
that link's rate; the PS-link bound (`server_ms`, `offload_ms`, `speedup`) is the same on
the busiest PS link alone, and on a star the two are one link. It leaves out compute, the
barrier's round trips and retransmissions, so measured times sit above it. Wire bytes are
Ethernet (no FCS) + IPv4 + UDP + the hotagg header + 12 bytes per entry, what the kernel's
shaper counts.

A second aggregation design is one function of DESIGNS: given the topology and each PS's
hot keys, it says where a hot packet stops on a worker's path and what control traffic
each aggregating switch exchanges per iteration (an `Aggregation`).
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from contract.constants import ENTRY_LEN, HEADER_LEN, MAX_ENTRIES, UDP_HEADER_LEN
from controller.forwarding import compute_routes
from controller.hotset import choose
from experiment.config import WARMUP_STREAM_OFFSET
from experiment.schema import ModelBound, ModeLoad, directed_link
from hosts import workloads
from hosts.workloads import Workload
from topologies.generate import star
from topologies.topology import Topology, parse_topology

ETHERNET_LEN = 14
IPV4_LEN = 20
PACKET_OVERHEAD = ETHERNET_LEN + IPV4_LEN + UDP_HEADER_LEN + HEADER_LEN  # 62 bytes
DEFAULT_AGGREGATE = "ps-leaf"


def packet_bytes(keys: int) -> tuple[int, int]:
    """(packets, wire bytes) of `keys` entries packed MAX_ENTRIES to a packet."""
    packets = -(-keys // MAX_ENTRIES)
    return packets, packets * PACKET_OVERHEAD + keys * ENTRY_LEN


def link_ms(wire_bytes: float, mbps: float) -> float:
    """Milliseconds a link of `mbps` needs for `wire_bytes`."""
    return wire_bytes * 8 / (mbps * 1e6) * 1e3


class Paths:
    """Node paths through a topology along the routes the controller installs
    (controller.forwarding.compute_routes: at every switch a /32 per host, toward a
    shortest path, ties to the lowest port)."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self._port_to: dict[str, dict[int, int]] = {}  # switch -> host address -> out port
        self._peer: dict[tuple[str, int], str] = {}  # (switch, port) -> the node cabled there
        for link in topology.links:
            self._peer[link.node2, link.port2] = link.node1
            if link.port1 is not None:
                self._peer[link.node1, link.port1] = link.node2

    def _out_port(self, switch: str, host: str) -> int:
        if switch not in self._port_to:
            routes = compute_routes(self.topology, switch)
            self._port_to[switch] = {r.prefix: r.port for r in routes if r.prefix_len == 32}
        address = int(ipaddress.IPv4Address(self.topology.hosts[host].ip))
        return self._port_to[switch][address]

    def between(self, src: str, dst: str) -> list[str]:
        """The nodes a packet from `src` to `dst` (hosts or switches) passes, both ends
        included. Toward a switch, a packet follows the routes to the hosts cabled to it."""
        topo = self.topology
        if dst in topo.hosts:
            toward = dst
        else:
            cabled = sorted(h for h in topo.hosts if topo.attachment(h)[0] == dst)
            if not cabled:
                raise ValueError(f"no host is cabled to switch {dst}: no route leads there")
            toward = cabled[0]
        nodes = [src]
        here = src if src in topo.switches else topo.attachment(src)[0]
        if here != src:
            nodes.append(here)
        while nodes[-1] != dst:
            nxt = self._peer[here, self._out_port(here, toward)]
            nodes.append(nxt)
            if len(nodes) > len(topo.switches) + 2:
                raise ValueError(f"the routes from {src} to {dst} loop: {nodes}")
            here = nxt
        return nodes


@dataclass(frozen=True)
class Transfer:
    """Bytes one node sends another each iteration (control traffic of a design)."""

    src: str
    dst: str
    wire_bytes: int


@dataclass(frozen=True)
class Aggregation:
    """An aggregation design as the model sees it.

    `stop`: given the nodes of a worker's path to its PS, the index of the node where a
    hot key's PUSH and PULL stop (it acks and answers them; the last index: the PS).
    `control`: what the design's switches and the PSs exchange each iteration."""

    stop: Callable[[Sequence[str]], int]
    control: tuple[Transfer, ...]
    # leaves: a remote leaf -> the switch its partial PUSHes go to (the root), and how many
    # partial PUSHes it sends per iteration (one per FLUSH); their entries are the distinct
    # hot keys its rack pushed, which the model counts from the workload
    upward: Mapping[str, str] = field(default_factory=dict)
    partial_pushes: int = 0


def ps_leaf(topology: Topology, hot_keys_of: Mapping[str, int]) -> Aggregation:
    """AGGREGATE=ps-leaf: the switch a PS hangs off aggregates. A hot packet stops at the
    first aggregating switch on its path; each PS collects its hot keys from its switch
    (COLLECT out, a COLLECT_REPLY of the same size back)."""

    def stop(path: Sequence[str]) -> int:
        switches = topology.switches
        aggregating = (i for i, n in enumerate(path) if n in switches and switches[n].aggregate)
        return next(aggregating, len(path) - 1)

    control: list[Transfer] = []
    for ps, hot_keys in hot_keys_of.items():
        switch = topology.attachment(ps)[0]
        _, collect = packet_bytes(hot_keys)
        if collect and topology.switches[switch].aggregate:
            control += [Transfer(ps, switch, collect), Transfer(switch, ps, collect)]
    return Aggregation(stop, tuple(control))


def leaves(topology: Topology, hot_keys_of: Mapping[str, int]) -> Aggregation:
    """AGGREGATE=leaves (docs/design.md section 7): every leaf aggregates, so a hot packet
    stops at the worker's own leaf. Per iteration the PS sends each remote leaf one
    header-only FLUSH per MAX_ENTRIES slots; each FLUSH comes back as a partial PUSH from
    the leaf to the root (the PS's switch), which absorbs it; the PS collects from the root
    as with ps-leaf, and writes every hot key's value down the chain of remote leaves once,
    the last leaf acking each packet without entries. `topology` must have its leaves
    marked aggregating (Topology.with_leaves_aggregating)."""
    base = ps_leaf(topology, hot_keys_of)
    if len(hot_keys_of) != 1:
        raise ValueError("the leaves design has one PS shard")
    ((ps, hot_keys),) = hot_keys_of.items()
    root = topology.attachment(ps)[0]
    remote = topology.remote_leaves()
    batches = -(-hot_keys // MAX_ENTRIES)
    packets, chained = packet_bytes(hot_keys)
    control = list(base.control)
    for leaf in remote:
        control.append(Transfer(ps, leaf, batches * PACKET_OVERHEAD))  # FLUSHes
    for src, dst in zip([ps, *remote], remote):
        control.append(Transfer(src, dst, chained))  # the chained WRITEBACK, hop by hop
    if remote and chained:
        control.append(Transfer(remote[-1], ps, packets * PACKET_OVERHEAD))  # its acks
    return Aggregation(base.stop, tuple(control), {leaf: root for leaf in remote}, batches)


# AGGREGATE= -> the design: (topology, PS host -> hot keys it owns) -> Aggregation.
DESIGNS: dict[str, Callable[[Topology, Mapping[str, int]], Aggregation]] = {
    "ps-leaf": ps_leaf,
    "leaves": leaves,
}


@dataclass(frozen=True)
class LinkLoad:
    """One mode's bytes per iteration on every directed link, and its bottleneck."""

    links: dict[str, float]  # directed link "<sender>-<receiver>" -> bytes per iteration
    bottleneck: str  # the directed link that needs the longest at its rate
    bound_ms: float  # that time: the mode's bound
    to_ps: float  # the busiest PS link, toward the PS
    from_ps: float  # ... and from it
    ps_mbps: float  # that PS link's rate

    @property
    def ps_ms(self) -> float:
        """The PS-link bound: the busiest PS link's time at its rate."""
        return link_ms(max(self.to_ps, self.from_ps), self.ps_mbps)

    def as_dict(self) -> ModeLoad:
        return {
            "to_ps": self.to_ps,
            "from_ps": self.from_ps,
            "links": dict(self.links),
            "bottleneck": self.bottleneck,
            "bound_ms": round(self.bound_ms, 3),
        }


@dataclass(frozen=True)
class Prediction:
    server: LinkLoad
    offload: LinkLoad
    mbps: float  # the busiest PS link's rate (the PS-link bound's)
    hot_keys: int
    hot_coverage: float
    aggregate: str = DEFAULT_AGGREGATE

    @property
    def server_ms(self) -> float:
        return self.server.ps_ms

    @property
    def offload_ms(self) -> float:
        return self.offload.ps_ms

    @property
    def speedup(self) -> float:
        return self.server_ms / self.offload_ms if self.offload_ms else float("inf")

    @property
    def bound_speedup(self) -> float:
        """The speed-up of the busiest-link bounds (every link, not only the PS's)."""
        off = self.offload.bound_ms
        return self.server.bound_ms / off if off else float("inf")

    def as_dict(self) -> ModelBound:
        """summary.json's `model` block."""
        return {
            "aggregate": self.aggregate,
            "server": self.server.as_dict(),
            "offload": self.offload.as_dict(),
            "mbps": self.mbps,
            "hot_keys": self.hot_keys,
            "hot_coverage": self.hot_coverage,
            "server_ms": round(self.server_ms, 3),
            "offload_ms": round(self.offload_ms, 3),
            "speedup": round(self.speedup, 3),
            "bound_speedup": round(self.bound_speedup, 3),
        }


def warmup_hot_set(
    workload: Workload,
    workers: int,
    warmup: int,
    budget: int,
    offset: int = WARMUP_STREAM_OFFSET,
) -> tuple[set[int], float]:
    """The keys the experiment would make hot, and the share of warm-up updates they
    cover: each worker pushes each of its keys once per iteration."""
    freqs: Counter[int] = Counter()
    for w in range(workers):
        for t in range(1 + offset, warmup + 1 + offset):
            freqs.update(np.asarray(workload.pull_keys(w, t), dtype=np.uint64).tolist())
    hot = choose(freqs, budget=budget, min_updates=warmup)
    return set(hot.keys), hot.coverage


def star_topology(workers: int, shards: int, mbps: float) -> Topology:
    """The generated star (`star:W:S`) with every link at `mbps`."""
    return parse_topology(star(workers, shards), f"star:{workers}:{shards}").with_bandwidth(mbps)


def _requests(keys: int) -> tuple[int, int]:
    """(bytes toward the answerer, bytes back) of one iteration's `keys` of one shard:
    PULL + PUSH out (DONE is counted apart), PULL_REPLY as large as the PULL and a
    header-only PUSH_ACK per PUSH packet back."""
    packets, wire = packet_bytes(keys)
    return 2 * wire, wire + packets * PACKET_OVERHEAD


def _link_load(
    flows: Counter[tuple[str, str]], topology: Topology, paths: Paths, iterations: int
) -> LinkLoad:
    """Every directed link's bytes per iteration from the flows' totals, and the busiest."""
    totals: Counter[str] = Counter()
    for (src, dst), wire in flows.items():
        nodes = paths.between(src, dst)
        for a, b in zip(nodes, nodes[1:]):
            totals[directed_link(a, b)] += wire
    links: dict[str, float] = {}
    rate: dict[str, float] = {}
    for link in topology.links:
        if link.bandwidth is None:
            raise ValueError(
                f"link {link.node1}-{link.node2} has no rate: the bound needs every link's"
            )
        for a, b in ((link.node1, link.node2), (link.node2, link.node1)):
            name = directed_link(a, b)
            links[name] = round(totals[name] / iterations, 1)
            rate[name] = link.bandwidth
    bottleneck = max(links, key=lambda name: link_ms(links[name], rate[name]))
    ps_links = [
        (directed_link(s, ps.name), directed_link(ps.name, s))
        for ps in topology.parameter_servers
        for s in [topology.attachment(ps.name)[0]]
    ]
    into, out = max(ps_links, key=lambda pair: max(links[pair[0]], links[pair[1]]) / rate[pair[0]])
    return LinkLoad(
        links,
        bottleneck,
        link_ms(links[bottleneck], rate[bottleneck]),
        links[into],
        links[out],
        rate[into],
    )


def predict(
    workload: Workload,
    workers: int,
    iterations: int,
    mbps: float | None,
    hot: set[int],
    hot_coverage: float = 0.0,
    shards: int | None = None,
    stream_offset: int = 0,
    topology: Topology | None = None,
    aggregate: str = DEFAULT_AGGREGATE,
) -> Prediction:
    """Bytes per iteration on every directed link in each mode, averaged over the measured
    iterations, and the bounds they give. `topology`: the run's (its first `workers`
    workers, PS shard i its i-th parameter server); None, a star of `workers` and `shards`.
    `mbps` sets every link's rate, as BW= does (None: the topology's own)."""
    if topology is None:
        if mbps is None:
            raise ValueError("a star needs a link rate (mbps)")
        topology = star_topology(workers, shards or 1, mbps)
    elif mbps is not None:
        topology = topology.with_bandwidth(mbps)
    servers = [h.name for h in topology.parameter_servers]
    if shards is not None and shards != len(servers):
        raise ValueError(f"{shards} shards, but {topology.source} has {len(servers)} PSs")
    hosts = [h.name for h in topology.workers[:workers]]
    if len(hosts) < workers:
        raise ValueError(f"{workers} workers, but {topology.source} has {len(hosts)}")
    if aggregate not in DESIGNS:
        raise ValueError(f"aggregate {aggregate!r}: the designs are {sorted(DESIGNS)}")
    n = len(servers)
    mine = Counter(servers[k % n] for k in hot)
    design = DESIGNS[aggregate](topology, {ps: mine[ps] for ps in servers})
    paths = Paths(topology)
    flows = {"server": Counter[tuple[str, str]](), "offload": Counter[tuple[str, str]]()}
    rack_hot: dict[tuple[str, int], set[int]] = {}  # (leaf, iteration) -> hot keys pushed
    for w, host in enumerate(hosts):
        routes = [paths.between(host, ps) for ps in servers]
        stops = [path[design.stop(path)] for path in routes]  # where its hot packets stop
        for t in range(1 + stream_offset, iterations + 1 + stream_offset):
            keys = np.asarray(workload.pull_keys(w, t), dtype=np.uint64)
            shard_of = keys % np.uint64(n)
            is_hot = np.fromiter((k in hot for k in keys.tolist()), bool, len(keys))
            for s, ps in enumerate(servers):
                in_shard = shard_of == np.uint64(s)
                n_hot = int((in_shard & is_hot).sum())
                n_cold = int(in_shard.sum()) - n_hot
                # DONE and its DONE_ACK once per shard and iteration, in both modes.
                for mode, at_ps in (("server", n_cold + n_hot), ("offload", n_cold)):
                    out, back = _requests(at_ps)
                    flows[mode][host, ps] += out + PACKET_OVERHEAD
                    flows[mode][ps, host] += back + PACKET_OVERHEAD
                out, back = _requests(n_hot)
                flows["offload"][host, stops[s]] += out
                flows["offload"][stops[s], host] += back
                if stops[s] in design.upward:
                    hot_keys = keys[in_shard & is_hot].tolist()
                    rack_hot.setdefault((stops[s], t), set()).update(hot_keys)
    for transfer in design.control:
        flows["offload"][transfer.src, transfer.dst] += transfer.wire_bytes * iterations
    for leaf, root in design.upward.items():  # partial PUSHes, one per FLUSH
        partials = design.partial_pushes * PACKET_OVERHEAD * iterations
        touched = sum(len(keys) for (at, _), keys in rack_hot.items() if at == leaf)
        flows["offload"][leaf, root] += partials + touched * ENTRY_LEN
    server, offload = (_link_load(flows[m], topology, paths, iterations) for m in flows)
    return Prediction(server, offload, server.ps_mbps, len(hot), round(hot_coverage, 4), aggregate)


def workload_argv(config: dict[str, Any]) -> list[str]:
    """The workers' workload options of a run's config.json / summary config, as the agents
    of the measured phases get them (with its DRIFT, which the warm-up does not have), from
    the stream's start."""
    return [
        "--workload", str(config["workload"]), "--keys", str(config["keys"]),
        "--skew", str(config["skew"]), "--seed", str(config["seed"]),
        "--keys-per-iter", str(config["keys_per_iter"]),
        *config.get("extra_workload_args", []),
        *(["--drift", config["drift"]] if config.get("drift") else []),
    ]  # fmt: skip


def workload_of(config: dict[str, Any]) -> Workload:
    """The workload of a run's config.json / summary config, built as the agents of the
    measured phases build it. Raises WorkloadError on options it cannot take."""
    return workloads.from_args(workloads.parse_args(workload_argv(config)))


def predict_run(
    workload: Workload,
    workers: int,
    iterations: int,
    mbps: float,
    hot_slots: int,
    warmup: int = 5,
    shards: int = 1,
) -> Prediction:
    """The bound of a whole `make run`: the hot set from a simulated warm-up, then both modes."""
    hot, coverage = warmup_hot_set(workload, workers, warmup, hot_slots)
    return predict(workload, workers, iterations, mbps, hot, coverage, shards)
