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

import heapq
import ipaddress
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, cast

import numpy as np

from contract.constants import ENTRY_LEN, HEADER_LEN, MAX_ENTRIES, UDP_HEADER_LEN
from controller.forwarding import compute_routes
from controller.hotset import choose
from experiment.config import WARMUP_STREAM_OFFSET, RunConfig
from experiment.schema import IterationBound, ModelBound, ModeLoad, directed_link
from hosts import workloads
from hosts.compute import ComputePlan, ComputeSpec, Stragglers
from hosts.ps_config import SyncMode
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
    # the transfers of `control` that only start once every DONE (and every partial PUSH)
    # is in, step after step (each step's transfers at once): the barrier's serial part
    steps: tuple[tuple[Transfer, ...], ...] = ()


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
    steps = (tuple(control),) if control else ()
    return Aggregation(stop, tuple(control), steps=steps)


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
    # the chained WRITEBACK, hop by hop, and its acks: once the COLLECTs are answered
    chain = [Transfer(src, dst, chained) for src, dst in zip([ps, *remote], remote)]
    if remote and chained:
        chain.append(Transfer(remote[-1], ps, packets * PACKET_OVERHEAD))
    control += chain
    steps = (*base.steps, tuple(chain)) if chain else base.steps
    upward = {leaf: root for leaf in remote}
    return Aggregation(base.stop, tuple(control), upward, batches, steps)


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
    # the bound with the barrier in order (_serial_ms): never below bound_ms
    serial_ms: float = 0.0

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
            "serial_ms": round(self.serial_ms, 3),
        }


@dataclass(frozen=True)
class Prediction:
    server: LinkLoad
    offload: LinkLoad
    mbps: float  # the busiest PS link's rate (the PS-link bound's)
    hot_keys: int
    hot_coverage: float
    aggregate: str = DEFAULT_AGGREGATE
    # each mode's bytes per iteration by exchange, and every directed link's rate (Mbit/s):
    # what iteration_times needs beyond the bound
    phased: dict[str, PhaseBytes] = field(default_factory=dict, repr=False, compare=False)
    rates: dict[str, float] = field(default_factory=dict, repr=False, compare=False)
    # [iteration][worker] -> its keys per PS shard: what the per-worker model (worker_timelines)
    # routes anew where the switch does not answer a pull or sum a push
    shard_keys: list[list[list[ShardKeys]]] = field(default_factory=list, repr=False, compare=False)

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

    @property
    def serial_speedup(self) -> float:
        """The speed-up of the bounds with the barrier in order (LinkLoad.serial_ms)."""
        off = self.offload.serial_ms
        return self.server.serial_ms / off if off else float("inf")

    def as_dict(self, compute: np.ndarray | None = None, sync: str = "bsp") -> ModelBound:
        """summary.json's `model` block; with `compute` (ms, [worker, iteration]: the run's
        draws, compute_table) also the iteration model's (`iteration`) under SYNC=`sync`,
        which for ssp:S and async it has without compute too (their own model, not BSP's)."""
        bound: ModelBound = {
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
            "serial_speedup": round(self.serial_speedup, 3),
        }
        if compute is None and SyncMode.parse(sync).bound != 0 and self.shard_keys:
            compute = np.zeros((len(self.shard_keys[0]), len(self.shard_keys)))
        if compute is not None:
            bound["iteration"] = predict_iterations(self, compute, sync).as_dict()
        return bound


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
    (pull_out, pull_back), (push_out, push_back) = _pull_push(keys)
    return pull_out + push_out, pull_back + push_back


def _pull_push(keys: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """_requests' bytes split by exchange: ((PULL, PULL_REPLY), (PUSH, PUSH_ACKs))."""
    packets, wire = packet_bytes(keys)
    return (wire, wire), (wire, packets * PACKET_OVERHEAD)


@dataclass(frozen=True)
class ShardKeys:
    """One worker's keys of one PS shard in one iteration, as predict counts them: its hot
    keys, the switch their packets stop at in offload, and how many keys are cold."""

    host: str
    ps: str
    stop: str
    hot: np.ndarray
    cold: int


class PhaseBytes:
    """One mode's bytes per directed link in each iteration, split by where they fall in it
    (the compute model, iteration_times): each worker's pull exchange, each worker's push
    exchange, and the barrier (DONEs and the design's control traffic, after the pushes)."""

    def __init__(self, paths: Paths, workers: int, iterations: int) -> None:
        self._paths = paths
        self._links: dict[tuple[str, str], list[str]] = {}
        self.pull = [[Counter[str]() for _ in range(workers)] for _ in range(iterations)]
        self.push = [[Counter[str]() for _ in range(workers)] for _ in range(iterations)]
        self.barrier = [Counter[str]() for _ in range(iterations)]

    def add(self, into: Counter[str], src: str, dst: str, wire: int) -> None:
        """`wire` bytes from `src` to `dst` on every directed link of their route."""
        if not wire:
            return
        if (src, dst) not in self._links:
            nodes = self._paths.between(src, dst)
            self._links[src, dst] = [directed_link(a, b) for a, b in zip(nodes, nodes[1:])]
        for link in self._links[src, dst]:
            into[link] += wire


def link_rates(topology: Topology) -> dict[str, float]:
    """Every directed link's rate in Mbit/s; ValueError where a link has none."""
    rate: dict[str, float] = {}
    for link in topology.links:
        if link.bandwidth is None:
            raise ValueError(
                f"link {link.node1}-{link.node2} has no rate: the bound needs every link's"
            )
        for a, b in ((link.node1, link.node2), (link.node2, link.node1)):
            rate[directed_link(a, b)] = link.bandwidth
    return rate


def _link_load(
    flows: Counter[tuple[str, str]], topology: Topology, paths: Paths, iterations: int
) -> LinkLoad:
    """Every directed link's bytes per iteration from the flows' totals, and the busiest."""
    totals: Counter[str] = Counter()
    for (src, dst), wire in flows.items():
        nodes = paths.between(src, dst)
        for a, b in zip(nodes, nodes[1:]):
            totals[directed_link(a, b)] += wire
    rate = link_rates(topology)
    links = {name: round(totals[name] / iterations, 1) for name in rate}
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
    phased = {mode: PhaseBytes(paths, workers, iterations) for mode in flows}
    rack_hot: dict[tuple[str, int], set[int]] = {}  # (leaf, iteration) -> hot keys pushed
    shard_keys: list[list[list[ShardKeys]]] = [[[] for _ in hosts] for _ in range(iterations)]
    for w, host in enumerate(hosts):
        routes = [paths.between(host, ps) for ps in servers]
        stops = [path[design.stop(path)] for path in routes]  # where its hot packets stop
        for i, t in enumerate(range(1 + stream_offset, iterations + 1 + stream_offset)):
            keys = np.asarray(workload.pull_keys(w, t), dtype=np.uint64)
            shard_of = keys % np.uint64(n)
            is_hot = np.fromiter((k in hot for k in keys.tolist()), bool, len(keys))
            for s, ps in enumerate(servers):
                in_shard = shard_of == np.uint64(s)
                n_hot = int((in_shard & is_hot).sum())
                n_cold = int(in_shard.sum()) - n_hot
                hot_keys_of = keys[in_shard & is_hot]
                shard_keys[i][w].append(ShardKeys(host, ps, stops[s], hot_keys_of, n_cold))
                # DONE and its DONE_ACK once per shard and iteration, in both modes.
                # the keys each mode sends to the PS, and offload's hot ones to where they stop
                exchanges = (
                    ("server", ps, n_cold + n_hot),
                    ("offload", ps, n_cold),
                    ("offload", stops[s], n_hot),
                )
                for mode, dst, k in exchanges:
                    (pull_out, pull_back), (push_out, push_back) = _pull_push(k)
                    flows[mode][host, dst] += pull_out + push_out
                    flows[mode][dst, host] += pull_back + push_back
                    bytes_of = phased[mode]
                    bytes_of.add(bytes_of.pull[i][w], host, dst, pull_out)
                    bytes_of.add(bytes_of.pull[i][w], dst, host, pull_back)
                    bytes_of.add(bytes_of.push[i][w], host, dst, push_out)
                    bytes_of.add(bytes_of.push[i][w], dst, host, push_back)
                for mode in flows:
                    flows[mode][host, ps] += PACKET_OVERHEAD
                    flows[mode][ps, host] += PACKET_OVERHEAD
                    phased[mode].add(phased[mode].barrier[i], host, ps, PACKET_OVERHEAD)
                    phased[mode].add(phased[mode].barrier[i], ps, host, PACKET_OVERHEAD)
                if aggregate == "leaves":  # the unanswered DONE flagged HOT_PUSHED
                    flows["offload"][host, ps] += PACKET_OVERHEAD
                    offload_push = phased["offload"].push[i][w]
                    phased["offload"].add(offload_push, host, ps, PACKET_OVERHEAD)
                if stops[s] in design.upward:
                    hot_keys = keys[in_shard & is_hot].tolist()
                    rack_hot.setdefault((stops[s], i), set()).update(hot_keys)
    offload = phased["offload"]
    for transfer in design.control:
        flows["offload"][transfer.src, transfer.dst] += transfer.wire_bytes * iterations
        for barrier in offload.barrier:
            offload.add(barrier, transfer.src, transfer.dst, transfer.wire_bytes)
    for leaf, root in design.upward.items():  # partial PUSHes, one per FLUSH
        partials = design.partial_pushes * PACKET_OVERHEAD * iterations
        touched = sum(len(keys) for (at, _), keys in rack_hot.items() if at == leaf)
        flows["offload"][leaf, root] += partials + touched * ENTRY_LEN
        for i, barrier in enumerate(offload.barrier):
            rack = len(rack_hot.get((leaf, i), ()))
            offload.add(barrier, leaf, root, design.partial_pushes * PACKET_OVERHEAD)
            offload.add(barrier, leaf, root, rack * ENTRY_LEN)
    server_load, offload_load = (_link_load(flows[m], topology, paths, iterations) for m in flows)
    # the barrier's serial part: the design's steps, then the DONE_ACKs
    steps: dict[str, list[Counter[str]]] = {"server": [], "offload": []}
    for mode in steps:
        transfers = design.steps if mode == "offload" else ()
        for step in transfers:
            steps[mode].append(Counter())
            for transfer in step:
                phased[mode].add(steps[mode][-1], transfer.src, transfer.dst, transfer.wire_bytes)
        if not steps[mode]:
            steps[mode].append(Counter())
        for host in hosts:
            for ps in servers:
                phased[mode].add(steps[mode][-1], ps, host, PACKET_OVERHEAD)  # DONE_ACK
    rates = link_rates(topology)
    server_load, offload_load = (
        replace(load, serial_ms=max(load.bound_ms, _serial_ms(load.links, rates, steps[mode])))
        for mode, load in (("server", server_load), ("offload", offload_load))
    )
    return Prediction(
        server_load,
        offload_load,
        server_load.ps_mbps,
        len(hot),
        round(hot_coverage, 4),
        aggregate,
        phased,
        rates,
        shard_keys,
    )


def _serial_ms(
    links: Mapping[str, float], rates: Mapping[str, float], steps: Sequence[Counter[str]]
) -> float:
    """A bound that keeps the barrier in order (docs/design.md sections 3 and 7): the bytes of
    `steps` (each one's per link; the DONE_ACKs in the last) cross their links only once
    every DONE and partial PUSH is in, each step once the one before has been answered. So
    an iteration takes at least the busiest link's other bytes, then each step's busiest
    link. Each link may send SHAPER_BURST_BYTES at once after idling, which every term
    subtracts, so this stays a bound where the links idle (they do during the barrier)."""
    after: Counter[str] = Counter()
    for step in steps:
        after.update(step)

    def busiest(bytes_of: Mapping[str, float]) -> float:
        return max(
            (
                link_ms(max(0.0, b - SHAPER_BURST_BYTES), rates[link])
                for link, b in bytes_of.items()
            ),
            default=0.0,
        )

    before = busiest({link: b - after[link] for link, b in links.items()})
    return before + sum(busiest(step) for step in steps)


# The links' shaper (topologies/topo.py: htb with ceil = rate) lets a link that was idle send
# this many bytes at once: htb's default cburst (`tc -d class show` reads "cburst 1600b" at
# every rate), which bounds its 15k `burst`. A backlogged link never has it, so the bound
# ignores it; with compute the links idle and each burst saves ~6 ms at 2 Mbit/s.
SHAPER_BURST_BYTES = 1600


class _Shaper:
    """A directed link as its token-bucket shaper serves it: queued bytes go at its rate,
    and once it has idled, up to SHAPER_BURST_BYTES of them at once (times in ms)."""

    def __init__(self, mbps: float) -> None:
        self.bytes_per_ms = mbps * 1e3 / 8
        self.free_at = 0.0  # when what is queued has gone
        self.tokens = float(SHAPER_BURST_BYTES)

    def serve(self, at: float, wire: float) -> float:
        """Queue `wire` bytes at time `at`; when the last of them has gone."""
        if at >= self.free_at:  # idle since free_at: the bucket refilled meanwhile
            idle = at - self.free_at
            self.tokens = min(SHAPER_BURST_BYTES, self.tokens + idle * self.bytes_per_ms)
            self.free_at = at
        at_once = min(wire, self.tokens)
        self.tokens -= at_once
        self.free_at += (wire - at_once) / self.bytes_per_ms
        return self.free_at


def _shares(work: Sequence[float]) -> list[float]:
    """When each of jobs that start together on a link shared equally between the jobs still
    running ends, as a share of when the last does: job w after the sum over every job j of
    min(work[j], work[w])."""
    total = sum(work)
    return [sum(min(other, mine) for other in work) / total for mine in work]


def iteration_ms(phased: PhaseBytes, rates: Mapping[str, float], compute: np.ndarray) -> np.ndarray:
    """Each iteration's time (ms) with compute (`compute[w, i]`: worker w's in iteration i,
    ms), the iterations one after another: every worker pulls, computes, pushes, and the
    barrier follows.

    Every link is its shaper (_Shaper: its rate, and a small burst after it idled). The
    pulls start together and share each link equally, so a worker with fewer bytes on its
    busiest link has its values sooner (_shares). Worker w then computes, and pushes once
    done: each link serves the pushes in the order they come, so a fast worker's push
    overlaps a slow worker's compute, and the slowest worker's push, last and alone, takes
    its own path's time. The barrier's DONEs and the design's control traffic (COLLECTs)
    follow. Without compute and with one busiest link throughout, this is that link's
    bound; with compute the critical path runs through the slowest worker."""
    workers, iterations = compute.shape
    shapers = {link: _Shaper(mbps) for link, mbps in rates.items()}
    times = np.zeros(iterations)
    start = 0.0
    for i in range(iterations):
        pulls = [phased.pull[i][w] for w in range(workers)]
        pulled = [start] * workers
        for link in {link for p in pulls for link in p}:
            on = [w for w in range(workers) if pulls[w].get(link)]
            done = shapers[link].serve(start, sum(pulls[w][link] for w in on))
            for w, share in zip(on, _shares([pulls[w][link] for w in on])):
                pulled[w] = max(pulled[w], start + share * (done - start))
        ready = [pulled[w] + float(compute[w, i]) for w in range(workers)]
        pushed = max(ready, default=start)
        for w in sorted(range(workers), key=lambda w: ready[w]):
            for link, wire in phased.push[i][w].items():
                pushed = max(pushed, shapers[link].serve(ready[w], wire))
        end = pushed
        for link, wire in phased.barrier[i].items():
            end = max(end, shapers[link].serve(pushed, wire))
        times[i], start = end - start, end
    return times


@dataclass(frozen=True)
class IterationModel:
    """The model with compute: each mode's iteration times for the run's compute draws
    (BSP: iteration_ms's, one per iteration; ssp:S and async: worker_timelines', one per
    worker and iteration, as the workers log them), and what they are made of."""

    times: dict[str, np.ndarray]  # mode -> ms per iteration
    communication: dict[str, np.ndarray]  # mode -> the same without compute
    slowest_compute: np.ndarray  # per iteration: the slowest worker's compute (ms)
    sync: str = "bsp"  # the SYNC= mode modelled
    switch_summed: dict[str, float | None] = field(default_factory=dict)  # mode -> share
    # ssp:S and async: mode -> the run's time over its iterations, and mean staleness
    period_ms: dict[str, float] = field(default_factory=dict)
    staleness: dict[str, float | None] = field(default_factory=dict)

    def as_dict(self) -> IterationBound:
        """summary.json's `model.iteration` block."""
        out: dict[str, Any] = {
            "slowest_compute_ms": round(float(np.mean(self.slowest_compute)), 3),
        }
        for mode, times in self.times.items():
            out[mode] = {
                "p50_ms": round(float(np.median(times)), 3),
                "p99_ms": round(float(np.percentile(times, 99)), 3),
                "mean_ms": round(float(np.mean(times)), 3),
                "communication_ms": round(float(np.mean(self.communication[mode])), 3),
            }
            if mode in self.period_ms:
                out[mode]["period_ms"] = round(self.period_ms[mode], 3)
                staleness = self.staleness.get(mode)
                out[mode]["staleness_mean"] = None if staleness is None else round(staleness, 3)
        server, offload = out["server"]["p50_ms"], out["offload"]["p50_ms"]
        out["speedup"] = round(server / offload, 3) if offload else None
        out["sync"] = self.sync
        share = self.switch_summed.get("offload")
        out["switch_summed"] = None if share is None else round(share, 4)
        return cast(IterationBound, out)


def predict_iterations(
    prediction: Prediction, compute: np.ndarray, sync: str = "bsp"
) -> IterationModel:
    """The iteration model of `prediction` (predict's) with compute[w, i] ms under SYNC=
    `sync`: BSP's iterations one after another (iteration_ms), or for `ssp:S` (S >= 1) and
    `async` every worker's own iterations (worker_timelines)."""
    idle = np.zeros_like(compute)
    slowest = compute.max(axis=0) if compute.size else np.zeros(0)
    bound = SyncMode.parse(sync).bound
    if bound == 0:
        return IterationModel(
            {m: iteration_ms(b, prediction.rates, compute) for m, b in prediction.phased.items()},
            {m: iteration_ms(b, prediction.rates, idle) for m, b in prediction.phased.items()},
            slowest,
            switch_summed={"offload": _hot_share(prediction.shard_keys)},
        )
    starts = start_offsets(compute.shape[0])
    runs = {m: _pooled(prediction, m, compute, bound, starts) for m in prediction.phased}
    bare = {m: _pooled(prediction, m, idle, bound, starts) for m in prediction.phased}
    return IterationModel(
        {m: run.durations.ravel() for m, run in runs.items()},
        {m: run.durations.ravel() for m, run in bare.items()},
        slowest,
        str(SyncMode(bound)),
        {"offload": runs["offload"].summed_share},
        {m: run.period_ms for m, run in runs.items()},
        {m: run.staleness_mean for m, run in runs.items()},
    )


# Workers start when `make run` writes them 'go', one after another (experiment/processes.py
# start_workers), and wake on shared cores: in the twelve phases of
# docs/results/2026-12-03-sync-model.md their first pulls lay 0-19.4 ms apart. Without a
# barrier, which state the workers settle in (in phase or spread out, design.md section 8)
# turns on such offsets, so the model runs START_DRAWS seeded draws of them and pools them.
START_SPREAD_MS = 20.0
START_DRAWS = 8


def start_offsets(workers: int, draws: int = START_DRAWS) -> list[list[float]]:
    """`draws` seeded sets of each worker's start (ms), uniform over START_SPREAD_MS."""
    rng = np.random.default_rng(0)
    return [rng.uniform(0.0, START_SPREAD_MS, workers).tolist() for _ in range(draws)]


def _pooled(
    prediction: Prediction,
    mode: str,
    compute: np.ndarray,
    bound: int | None,
    starts: Sequence[Sequence[float]],
) -> WorkerTimelines:
    """worker_timelines for each set of `starts`, pooled: every draw's iterations, and the
    draws' mean period, switch-summed share and staleness."""
    runs = [worker_timelines(prediction, mode, compute, bound, s) for s in starts]

    def mean(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return float(np.mean(known)) if known else None

    return WorkerTimelines(
        np.concatenate([run.durations for run in runs], axis=1),
        float(np.mean([run.period_ms for run in runs])),
        mean([run.summed_share for run in runs]),
        mean([run.staleness_mean for run in runs]),
    )


def _hot_share(shard_keys: Sequence[Sequence[Sequence[ShardKeys]]]) -> float | None:
    """The share of pushed entries that are hot: what offload sums in the switch in BSP."""
    hot = sum(len(k.hot) for row in shard_keys for keys in row for k in keys)
    total = hot + sum(k.cold for row in shard_keys for keys in row for k in keys)
    return hot / total if total else None


_DRAINED = 1e-6  # bytes (or ms): below this, what is left has gone


class _Queue:
    """One directed link's queue as worker_timelines sees it (times in ms, sizes in bytes):
    bytes join it as they arrive and leave in that order at the link's rate, and a link
    that sent less than its rate may send up to SHAPER_BURST_BYTES at once (htb's tokens).
    `arrived` and `sent` count bytes since the start, so a byte that arrived as the n-th has
    left once `sent` >= n whatever else arrived later."""

    def __init__(self, mbps: float) -> None:
        self.rate = mbps * 1e3 / 8  # bytes per ms
        self.arrived = 0.0
        self.sent = 0.0
        self.tokens = float(SHAPER_BURST_BYTES)
        self.idle_since = 0.0  # when it last had nothing queued or coming
        self.arriving: dict[int, list[float]] = {}  # exchange -> [bytes yet to come, pace]
        self.last_at: deque[tuple[float, int]] = deque()  # (its last byte's n, exchange)

    @property
    def backlog(self) -> float:
        return self.arrived - self.sent

    @property
    def inflow(self) -> float:
        return sum(pace for _, pace in self.arriving.values())

    def busy(self) -> bool:
        return bool(self.arriving or self.last_at)

    def arrive(self, now: float, exchange: int, wire: float, share: float, pace: float) -> None:
        """`exchange`'s `wire` bytes reach the link from `now` as its sender's own link
        sends them: `share` of what that link lets go at once, the rest at `pace`."""
        if not self.busy():  # idle since idle_since: its tokens refilled meanwhile
            idle = now - self.idle_since
            self.tokens = min(SHAPER_BURST_BYTES, self.tokens + idle * self.rate)
        at_once = min(wire, share * SHAPER_BURST_BYTES)
        self.arrived += at_once
        if wire - at_once > _DRAINED:
            self.arriving[exchange] = [wire - at_once, pace]
        else:
            self.last_at.append((self.arrived, exchange))
        burst = min(self.backlog, self.tokens)  # bytes its tokens let through at once
        self.sent += burst
        self.tokens -= burst

    def next_event(self) -> float:
        """In how many ms something changes: an arrival ends, an exchange's last byte
        leaves, or the backlog empties (inf: nothing queued or coming)."""
        inflow, backlog = self.inflow, self.backlog
        due = min((left / pace for left, pace in self.arriving.values()), default=float("inf"))
        if self.last_at and (backlog > _DRAINED or inflow > self.rate):
            due = min(due, (self.last_at[0][0] - self.sent) / self.rate)
        if backlog > _DRAINED and inflow < self.rate:
            due = min(due, backlog / (self.rate - inflow))
        return max(due, 0.0)

    def advance(self, now: float, ms: float) -> list[int]:
        """Serve the `ms` ms up to `now`; the exchanges whose last byte left."""
        inflow, backlog = self.inflow, self.backlog
        self.arrived += inflow * ms
        if backlog > _DRAINED or inflow > self.rate:
            out = self.rate * ms
        else:  # keeping up: what arrives leaves, and the unused rate refills the tokens
            out = inflow * ms
            self.tokens = min(SHAPER_BURST_BYTES, self.tokens + (self.rate - inflow) * ms)
        self.sent = min(self.arrived, self.sent + out)
        for exchange, coming in list(self.arriving.items()):
            coming[0] -= coming[1] * ms
            if coming[0] <= _DRAINED:
                del self.arriving[exchange]
                self.last_at.append((self.arrived, exchange))
        return self.settle(now)

    def settle(self, now: float) -> list[int]:
        """The exchanges whose last byte has left by `now`, taken off the queue."""
        gone = []
        while self.last_at and self.last_at[0][0] <= self.sent + _DRAINED:
            gone.append(self.last_at.popleft()[1])
        if not self.busy():
            self.idle_since = now
        return gone


class _FifoLinks:
    """Every directed link as its shaper and its queue serve several senders at once: each
    exchange (bytes per link, its links in parallel as in iteration_ms) reaches every link
    of its path as its sender's shaped link lets it go (_Queue.arrive: a burst, then the
    sender's rate), and each link sends what reached it first first. An exchange ends when
    its last byte has left its last link. Times in ms."""

    def __init__(self, rates: Mapping[str, float]) -> None:
        self.queues = {link: _Queue(mbps) for link, mbps in rates.items()}
        self.active: dict[str, _Queue] = {}  # the links with bytes queued or coming
        self.links_left: dict[int, int] = {}  # exchange -> links still carrying its bytes
        self.now = 0.0

    def busy(self) -> bool:
        return bool(self.active)

    def start(self, exchange: int, bytes_of: Mapping[str, float], sender: str) -> list[int]:
        """Send `exchange`'s bytes now from `sender`; the exchanges that ended at once (it,
        if its bytes all went in its links' bursts)."""
        links = [link for link, wire in bytes_of.items() if wire > 0]
        if not links:
            return [exchange]
        # its packets reach every link interleaved as its sender's link sends them
        own = next((link for link in links if link.startswith(f"{sender}-")), None)
        self.links_left[exchange] = len(links)
        for link in links:
            queue, wire = self.queues[link], bytes_of[link]
            share = wire / bytes_of[own] if own else 1.0
            pace = share * self.queues[own].rate if own else queue.rate
            queue.arrive(self.now, exchange, wire, share, pace)
            self.active[link] = queue
        return self._finish([e for link in links for e in self._settle(link, self.now, None)])

    def next_end(self) -> float:
        """When some link's state next changes (inf: nothing queued or coming)."""
        return self.now + min((q.next_event() for q in self.active.values()), default=float("inf"))

    def advance(self, to: float) -> list[int]:
        """Serve every link until `to`; the exchanges whose last bytes went."""
        ms, self.now = to - self.now, to
        busy = [link for link in self.queues if link in self.active]  # in a fixed order
        return self._finish([e for link in busy for e in self._settle(link, to, ms)])

    def _settle(self, link: str, now: float, ms: float | None) -> list[int]:
        """Serve `link` `ms` ms up to `now` (None: only what already left): the exchanges
        whose last byte left it."""
        queue = self.active[link]
        gone = queue.settle(now) if ms is None else queue.advance(now, ms)
        if not queue.busy():
            del self.active[link]
        return gone

    def _finish(self, gone: list[int]) -> list[int]:
        ended = []
        for exchange in gone:
            self.links_left[exchange] -= 1
            if not self.links_left[exchange]:
                del self.links_left[exchange]
                ended.append(exchange)
        return ended


@dataclass(frozen=True)
class WorkerTimelines:
    """One mode's run as worker_timelines simulates it."""

    durations: np.ndarray  # ms, [worker, iteration]: DONE_ACK(t - 1) to DONE_ACK(t)
    period_ms: float  # the whole run's time over its iterations
    summed_share: float | None  # pushed entries the switch summed (offload), of all
    staleness_mean: float | None  # per pull: iterations the PS had not applied, (t-1) - A


class _Events:
    """A discrete-event clock over _FifoLinks: callbacks at times, and when exchanges end."""

    def __init__(self, rates: Mapping[str, float]) -> None:
        self.links = _FifoLinks(rates)
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._waiting: dict[int, Callable[[], None]] = {}
        self._ids = 0

    @property
    def now(self) -> float:
        return self.links.now

    def at(self, when: float, then: Callable[[], None]) -> None:
        self._ids += 1
        heapq.heappush(self._timers, (when, self._ids, then))

    def send(self, bytes_of: Mapping[str, float], sender: str, then: Callable[[], None]) -> None:
        """Send an exchange from `sender` now; `then` once its bytes have crossed every link."""
        self._ids += 1
        self._waiting[self._ids] = then
        for exchange in self.links.start(self._ids, bytes_of, sender):
            self.at(self.now, self._waiting.pop(exchange))

    def run(self) -> None:
        while self._timers or self.links.busy():
            due = min(self._timers[0][0] if self._timers else float("inf"), self.links.next_end())
            for exchange in self.links.advance(due):
                self._waiting.pop(exchange)()
            while self._timers and self._timers[0][0] <= due:
                heapq.heappop(self._timers)[2]()


def _routed(phased: PhaseBytes, keys: Sequence[ShardKeys]) -> tuple[Counter[str], Counter[str]]:
    """(PULL, PUSH) exchanges of one worker's iteration in offload where the switch neither
    answers its pulls nor sums its pushes: its hot packets go on to the PS as they are."""
    pull: Counter[str] = Counter()
    push: Counter[str] = Counter()
    for k in keys:
        for n in (len(k.hot), k.cold):
            (pull_out, pull_back), (push_out, push_back) = _pull_push(n)
            phased.add(pull, k.host, k.ps, pull_out)
            phased.add(pull, k.ps, k.host, pull_back)
            phased.add(push, k.host, k.ps, push_out)
            phased.add(push, k.ps, k.host, push_back)
    return pull, push


def worker_timelines(
    prediction: Prediction,
    mode: str,
    compute: np.ndarray,
    bound: int | None,
    starts: Sequence[float] | None = None,
) -> WorkerTimelines:
    """SYNC=ssp:`bound` (None: async), worker by worker (docs/design.md section 8), over
    links that queue as _FifoLinks says. Worker w starts at starts[w] ms (None: every
    worker at 0). Its iteration t: it pulls once
    DONE_ACK(t - 1) is in, computes compute[w, t - 1] ms, pushes, and sends DONE(t); the PS
    returns DONE_ACK(t) once iteration t - S is applied (async: at once). The PS applies
    iterations in order, each once every DONE of it is in: it collects t from the switch
    (COLLECT, as the BSP barrier), which marks t read, then writes back the hot keys some
    push of t took to the PS, and t is applied.

    In offload a pull of t is answered by the switch only if t - 1 is applied (its cache
    holds t), else the PS answers the whole pull; a push of t is summed by the switch only
    if t <= collected + 2 (the two-copy rule), else its hot packets go to the PS
    (SLOT_BUSY). A worker's iteration runs from DONE_ACK(t - 1) to DONE_ACK(t), as the
    worker measures it."""
    phased = prediction.phased[mode]
    shard_keys = prediction.shard_keys
    workers, iterations = compute.shape
    offload = mode == "offload"
    done: list[Counter[str]] = [Counter() for _ in range(workers)]
    done_ack: list[Counter[str]] = [Counter() for _ in range(workers)]
    for w in range(workers):
        for k in shard_keys[0][w]:
            phased.add(done[w], k.host, k.ps, PACKET_OVERHEAD)
            phased.add(done_ack[w], k.ps, k.host, PACKET_OVERHEAD)
    # the barrier's control traffic: its bytes less the DONEs and DONE_ACKs
    control = [+(barrier - sum(done, Counter()) - sum(done_ack, Counter()))
               for barrier in phased.barrier]  # fmt: skip
    host = [shard_keys[0][w][0].host for w in range(workers)]
    ps_host = shard_keys[0][0][0].ps  # the PS's own sends (several shards count as one, above)
    clock = _Events(prediction.rates)
    durations = np.zeros((workers, iterations))
    started = [0.0] * workers
    dones: Counter[int] = Counter()
    waiting: list[tuple[int, int]] = []  # (worker, t): DONE(t) in, DONE_ACK(t) held
    refused: dict[int, dict[tuple[str, str], set[int]]] = {}  # t -> (PS, switch) -> keys
    stale: list[int] = []
    state = {"applied": 0, "collected": 0, "applying": 0, "summed": 0, "entries": 0}

    def begin(w: int, t: int) -> None:
        started[w] = clock.now
        keys = shard_keys[t - 1][w]
        stale.append(t - 1 - state["applied"])
        answered = not offload or state["applied"] == t - 1
        pull = phased.pull[t - 1][w] if answered else _routed(phased, keys)[0]
        clock.send(
            pull,
            host[w],
            lambda: clock.at(clock.now + float(compute[w, t - 1]), lambda: push(w, t)),
        )

    def push(w: int, t: int) -> None:
        keys = shard_keys[t - 1][w]
        summed = not offload or t <= state["collected"] + 2
        hot = sum(len(k.hot) for k in keys)
        state["entries"] += hot + sum(k.cold for k in keys)
        if offload and summed:
            state["summed"] += hot
        elif offload:
            for k in keys:
                refused.setdefault(t, {}).setdefault((k.ps, k.stop), set()).update(k.hot.tolist())
        pushes = phased.push[t - 1][w] if summed else _routed(phased, keys)[1]
        clock.send(pushes, host[w], lambda: clock.send(done[w], host[w], lambda: arrived(w, t)))

    def arrived(w: int, t: int) -> None:
        dones[t] += 1
        waiting.append((w, t))
        release()
        apply()

    def release() -> None:
        held = []
        for w, t in waiting:
            if bound is None or t - bound <= state["applied"]:
                clock.send(done_ack[w], ps_host, partial(acked, w, t))
            else:
                held.append((w, t))
        waiting[:] = held

    def acked(w: int, t: int) -> None:
        durations[w, t - 1] = clock.now - started[w]
        if t < iterations:
            begin(w, t + 1)

    def apply() -> None:
        u = state["applied"] + 1
        if state["applying"] or u > iterations or dones[u] < workers:
            return
        state["applying"] = u
        clock.send(control[u - 1], ps_host, lambda: collected(u))

    def collected(u: int) -> None:
        state["collected"] = u
        writeback: Counter[str] = Counter()
        for (ps, switch), keys in refused.pop(u, {}).items():
            _, wire = packet_bytes(len(keys))  # WRITEBACK, and its ack as large
            phased.add(writeback, ps, switch, wire)
            phased.add(writeback, switch, ps, wire)
        clock.send(writeback, ps_host, lambda: applied(u))

    def applied(u: int) -> None:
        state["applied"], state["applying"] = u, 0
        release()
        apply()

    for w in range(workers):
        clock.at(float(starts[w]) if starts else 0.0, partial(begin, w, 1))
    clock.run()
    entries = state["entries"]
    return WorkerTimelines(
        durations,
        clock.now / iterations if iterations else 0.0,
        state["summed"] / entries if offload and entries else None,
        float(np.mean(stale)) if stale else None,
    )


def compute_table(cfg: RunConfig) -> np.ndarray | None:
    """The run's compute draws (ms, [worker, iteration]) as its workers draw them
    (hosts/compute.py, in emulated time); None without COMPUTE."""
    spec = ComputeSpec.parse(cfg.compute or "")
    if spec is None:
        return None
    plan = ComputePlan(
        spec.scaled(cfg.time_scale), Stragglers.parse(cfg.stragglers or ""), cfg.seed
    )
    return plan.table(cfg.workers, cfg.iterations)


def ps_link_mbps(topology: Topology) -> float | None:
    """The rate of the slowest link into a parameter server (None: none has a rate)."""
    rates = [
        link.bandwidth
        for ps in topology.parameter_servers
        for link in topology.links
        if ps.name in (link.node1, link.node2) and link.bandwidth
    ]
    return min(rates) if rates else None


def time_scale(real_mbps: float | None, topology: Topology) -> float | None:
    """Emulated seconds per real second: the real link rate over the PS link's emulated one
    (None without a real rate or a PS link rate)."""
    emulated = ps_link_mbps(topology)
    return real_mbps / emulated if real_mbps and emulated else None


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
