"""The analytical bound: PS-link bytes per iteration in each mode, divided by the link rate.

When the PS link is the bottleneck (experiment/fidelity.py's `ps_link` regime), an
iteration cannot be shorter than the time its busier direction needs to carry the
iteration's packets. This module counts those packets from the workload itself, grouped as
the workers group them (hosts/worker.py: at most MAX_ENTRIES keys per packet, per shard, hot
keys in packets of their own), and from the hot set chosen as the experiment chooses it
(the warm-up's update counts, controller.hotset.choose with the same floor):

- server-only: every PULL, PUSH and DONE reaches a PS; the PS answers each (PULL_REPLY as
  large as the PULL, PUSH_ACK and DONE_ACK header-only).
- offload: packets of hot keys are answered by the switch (a PULL only when the whole packet
  hit the cache; in the steady state every hot key's value is cached) and never reach the
  PS; the PS collects ceil(hot keys / MAX_ENTRIES) full COLLECT packets per iteration, each
  answered by a COLLECT_REPLY of the same size.

bound_ms = max(bytes toward the PS, bytes from the PS) * 8 / rate, per PS link (shards
split the keys, each has its own link; the slowest sets the pace). It leaves out compute,
the barrier's round trips and retransmissions, so measured times sit above it; the speed-up
bound is server_ms / offload_ms. Wire bytes are Ethernet (no FCS) + IPv4 + UDP + the hotagg
header + 12 bytes per entry, what the kernel's shaper counts.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from contract.constants import ENTRY_LEN, HEADER_LEN, MAX_ENTRIES, UDP_HEADER_LEN
from controller.hotset import choose
from experiment.config import WARMUP_STREAM_OFFSET
from experiment.schema import ModelBound
from hosts import workloads
from hosts.workloads import Workload

ETHERNET_LEN = 14
IPV4_LEN = 20
PACKET_OVERHEAD = ETHERNET_LEN + IPV4_LEN + UDP_HEADER_LEN + HEADER_LEN  # 62 bytes


@dataclass(frozen=True)
class LinkLoad:
    """Bytes per iteration on the busiest PS link, each direction."""

    to_ps: float
    from_ps: float

    def ms(self, mbps: float) -> float:
        return max(self.to_ps, self.from_ps) * 8 / (mbps * 1e6) * 1e3


@dataclass(frozen=True)
class Prediction:
    server: LinkLoad
    offload: LinkLoad
    mbps: float
    hot_keys: int
    hot_coverage: float

    @property
    def server_ms(self) -> float:
        return self.server.ms(self.mbps)

    @property
    def offload_ms(self) -> float:
        return self.offload.ms(self.mbps)

    @property
    def speedup(self) -> float:
        return self.server_ms / self.offload_ms if self.offload_ms else float("inf")

    def as_dict(self) -> ModelBound:
        """summary.json's `model` block."""
        return {
            "server": {"to_ps": self.server.to_ps, "from_ps": self.server.from_ps},
            "offload": {"to_ps": self.offload.to_ps, "from_ps": self.offload.from_ps},
            "mbps": self.mbps,
            "hot_keys": self.hot_keys,
            "hot_coverage": self.hot_coverage,
            "server_ms": round(self.server_ms, 3),
            "offload_ms": round(self.offload_ms, 3),
            "speedup": round(self.speedup, 3),
        }


def packet_bytes(keys: int) -> tuple[int, int]:
    """(packets, wire bytes) of `keys` entries packed MAX_ENTRIES to a packet."""
    packets = -(-keys // MAX_ENTRIES)
    return packets, packets * PACKET_OVERHEAD + keys * ENTRY_LEN


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


def predict(
    workload: Workload,
    workers: int,
    iterations: int,
    mbps: float,
    hot: set[int],
    hot_coverage: float = 0.0,
    shards: int = 1,
    stream_offset: int = 0,
) -> Prediction:
    """Bytes per iteration on the busiest PS link in each mode, averaged over the measured
    iterations, and the bound they give at `mbps`."""
    to_ps = {"server": np.zeros(shards), "offload": np.zeros(shards)}
    from_ps = {"server": np.zeros(shards), "offload": np.zeros(shards)}
    for w in range(workers):
        for t in range(1 + stream_offset, iterations + 1 + stream_offset):
            keys = np.asarray(workload.pull_keys(w, t), dtype=np.uint64)
            shard_of = keys % np.uint64(shards)
            is_hot = np.fromiter((k in hot for k in keys.tolist()), bool, len(keys))
            for s in range(shards):
                in_shard = shard_of == np.uint64(s)
                n_all = int(in_shard.sum())
                n_cold = int((in_shard & ~is_hot).sum())
                for mode, n in (("server", n_all), ("offload", n_cold)):
                    packets, wire = packet_bytes(n)
                    # PULL + PUSH toward the PS, then DONE; PULL_REPLY, PUSH_ACK, DONE_ACK back.
                    to_ps[mode][s] += 2 * wire + PACKET_OVERHEAD
                    from_ps[mode][s] += wire + packets * PACKET_OVERHEAD + PACKET_OVERHEAD
    for s in range(shards):
        mine = sum(1 for k in hot if k % shards == s)
        _, collect = packet_bytes(mine)
        to_ps["offload"][s] += collect * iterations  # COLLECT_REPLY
        from_ps["offload"][s] += collect * iterations  # COLLECT

    def load(mode: str) -> LinkLoad:
        busiest = int(np.argmax(np.maximum(to_ps[mode], from_ps[mode])))
        return LinkLoad(
            round(float(to_ps[mode][busiest]) / iterations, 1),
            round(float(from_ps[mode][busiest]) / iterations, 1),
        )

    return Prediction(load("server"), load("offload"), mbps, len(hot), round(hot_coverage, 4))


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
