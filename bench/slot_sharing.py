"""Several synchronous jobs on one switch of S slots: how should the slots be shared?

Each job has its own workers, PS and Zipf workload (hosts/workloads.py, the seeded stream
make run's workers read). Policies (POLICIES):

- `equal`: equal static halves (controller.hotset.equal_split), each job in its own slot range;
- `savings`: the controller's split that maximises the jobs' summed PS-link savings
  (controller.hotset.split_slots), from a warm-up's counts;
- `first-come`: sharing in the data plane in the spirit of ATP. ATP's switch keeps, per
  aggregator, the (job, sequence) holding it; the first packet of a (job, sequence) claims a
  free aggregator, a packet that finds it held by another goes on to the PS flagged as a
  collision, and the aggregator is freed when the PS's ack of its complete sum passes
  (in-ATP/ATP p4src/p4ml.p4, `appID_and_seq_table` and `clean_appID_and_seq_table`). Here,
  what hotagg's protocol would allow: every job's hot-key table maps its own top-S keys
  onto one shared pool of S slots (`hashed`: a per-job seeded permutation, as ATP's workers
  place sequences by hash; `rank`: rank i on slot i for every job). A slot copy is held
  by (job, iteration) from the first PUSH entry of that job and iteration that reaches it
  until that job's PS has collected the iteration (its barrier); another job's entries
  for it are refused and go on to that job's PS with the packet's cold entries (the
  SLOT_CONFLICT path: no flag is needed, hotagg's PS already takes refused entries as cold
  parts). The cache follows: a job's pulls of t+1 hit a slot only if that job collected it
  in t (write-back) or its entry tagged t was refreshed (no other job held the slot in t).
  Every PS collects the whole pool each iteration: it cannot know which slots its job won.
- `alone` (a reference, `alone()`): each job with all S slots to itself.

Iterations are `aligned` (every job's iteration t runs in [t, t+1)) or not (job j's starts
j/J of an iteration later); a job's pushes reach the switch at uniformly random times in
its iteration, its pulls of t+1 at its barrier of t. Workers group keys as hosts/worker.py
does: hot keys (learnt from PUSH_ACK masks) in PUSHes of their own, cached keys (from
PULL_REPLY masks) in PULLs of their own, and the switch answers a PULL only whole; a DONE_ACK
names the keys that left the cache (a key cached for t with a cold part in t). Optimistic
for first-come: a slot is released at its holder's barrier (a real switch must wait for
proof that the COLLECT_REPLY arrived), and a PULL_REPLY's mask is the truth.

Per job and iteration it counts the PS link's bytes each way (experiment.model.packet_bytes,
as the model does: PULL, PUSH and DONE with their replies, COLLECT and COLLECT_REPLY,
WRITEBACKs, the DONE_ACK's evicted keys), the same in server-only mode, and hence the PS-link
speed-up; and the entries the switch saved (push entries applied plus pull entries answered,
gross, and net of the COLLECT_REPLY entries). Bounds: `alone_bound`, twice a job's S most
updated keys of the iteration in hindsight, and `oracle`, the same over all jobs' keys.

    .venv/bin/python -m bench.slot_sharing --out bench/results/slot_sharing.json
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from contract.constants import ENTRY_LEN, MAX_ENTRIES
from controller.hotset import HotSet, JobDemand, choose, equal_split, split_slots
from experiment.config import WARMUP_STREAM_OFFSET
from experiment.model import PACKET_OVERHEAD, packet_bytes
from hosts.workloads import StreamOffset, Workload, ZipfWorkload

POLICIES = ("equal", "savings", "first-come")
MAPPINGS = ("hashed", "rank")
GRID_SLOTS = (64, 128, 256, 512)
GRID_SKEWS = (1.1, 1.3)


@dataclass(frozen=True)
class SharingJob:
    skew: float
    seed: int


@dataclass(frozen=True)
class SharingConfig:
    """One simulated run (module doc)."""

    jobs: tuple[SharingJob, ...]
    slots: int
    policy: str = "first-come"
    mapping: str = "hashed"  # first-come only: where a job's keys sit in the pool
    aligned: bool = True
    iterations: int = 40
    settle: int = 2  # first iterations left out of the averages (the initial write-back's)
    warmup: int = 5  # iterations of the warm-up whose counts choose the tables
    workers: int = 4
    draws: int = 256  # keys each worker draws per iteration
    keys: int = 100_000
    seed: int = 1  # the push times'

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"policy {self.policy!r}: one of {', '.join(POLICIES)}")
        if self.mapping not in MAPPINGS:
            raise ValueError(f"mapping {self.mapping!r}: one of {', '.join(MAPPINGS)}")
        if not self.jobs or self.slots < 1:
            raise ValueError(f"need a job and a slot, got {len(self.jobs)} and {self.slots}")
        if not 0 <= self.settle < self.iterations:
            raise ValueError(f"settle {self.settle} must be in [0, {self.iterations})")

    def workload(self, job: int) -> ZipfWorkload:
        spec = self.jobs[job]
        return ZipfWorkload(self.keys, spec.skew, self.draws, seed=spec.seed)


@dataclass
class JobTally:
    """One job's counts over the measured iterations."""

    to_ps: float = 0.0  # PS-link bytes toward the PS, offload
    from_ps: float = 0.0
    server_to_ps: float = 0.0  # ... and in server-only mode
    server_from_ps: float = 0.0
    push_entries: int = 0
    push_applied: int = 0  # summed in the switch
    push_refused: int = 0  # of the job's hot keys, refused: another job held the slot
    push_to_ps: int = 0  # entries the PS received in PUSHes
    pull_entries: int = 0
    pull_served: int = 0  # answered by the switch
    pull_misses: int = 0  # PULLs of cached-believed keys the switch could not answer whole
    pull_to_ps: int = 0  # entries the PS answered
    collect_entries: int = 0  # COLLECT_REPLY entries
    writebacks: int = 0  # WRITEBACK entries
    alone_bound: int = 0
    iterations: int = 0

    def result(self) -> dict[str, Any]:
        n = self.iterations
        gross = self.push_applied + self.pull_served
        server = max(self.server_to_ps, self.server_from_ps)
        offload = max(self.to_ps, self.from_ps)
        per = {
            name: round(getattr(self, name) / n, 2)
            for name in (
                "push_entries", "push_applied", "push_refused", "push_to_ps",
                "pull_entries", "pull_served", "pull_misses", "pull_to_ps",
                "collect_entries", "writebacks", "alone_bound",
            )
        }  # fmt: skip
        return {
            **per,
            "saved_gross": round(gross / n, 2),
            "saved_net": round((gross - self.collect_entries) / n, 2),
            "to_ps": round(self.to_ps / n, 1),
            "from_ps": round(self.from_ps / n, 1),
            "server_to_ps": round(self.server_to_ps / n, 1),
            "bytes_saved": round((self.server_to_ps - self.to_ps) / n, 1),
            "speedup": round(server / offload, 4),
        }


def jain(values: Sequence[float]) -> float:
    """Jain's fairness index: (sum x)^2 / (n sum x^2), 1 when all are equal."""
    squares = sum(v * v for v in values)
    return sum(values) ** 2 / (len(values) * squares) if squares else 1.0


def warmup_demand(wl: Workload, workers: int, warmup: int) -> JobDemand:
    """A job's update counts over `warmup` iterations read far away in its stream, as the
    experiment's warm-up counts them."""
    warm = StreamOffset(wl, WARMUP_STREAM_OFFSET)
    freqs: Counter[int] = Counter()
    for t in range(1, warmup + 1):
        for w in range(workers):
            freqs.update(warm.pull_keys(w, t).tolist())
    return JobDemand(freqs, warmup)


def layout(config: SharingConfig, demands: Sequence[JobDemand]) -> list[dict[int, int]]:
    """Per job, its hot-key table ({key: absolute slot}). Its PS collects the slots its table
    names (as the model counts: one COLLECT_REPLY entry per hot key); under first-come it
    cannot tell which of them its job won, so it collects them all."""
    jobs = dict(enumerate(demands))
    if config.policy == "first-come":
        sets = {
            j: choose(d.freqs, budget=config.slots, min_updates=d.iterations)
            for j, d in jobs.items()
        }
        tables = []
        for j in jobs:
            keys = sets[j].keys
            if config.mapping == "hashed":
                rng = np.random.default_rng([config.seed, j, 0x5107])
                offsets = rng.permutation(config.slots)[: len(keys)].tolist()
            else:
                offsets = list(range(len(keys)))
            tables.append(dict(zip(keys, offsets)))
        return tables
    split: dict[int, HotSet] = (
        equal_split(jobs, config.slots)
        if config.policy == "equal"
        else split_slots(jobs, config.slots)
    )
    tables, base = [], 0
    for j in jobs:
        tables.append({k: base + i for i, k in enumerate(split[j].keys)})
        base += len(split[j].keys)
    return tables


def _groups(keys: list[int], believed: set[int]) -> list[tuple[bool, list[int]]]:
    """A worker's packets (hosts/worker.py `_groups`, one shard): keys in `believed` in
    packets of their own, MAX_ENTRIES to a packet, in key order."""
    out = []
    for flag in (True, False):
        mine = [k for k in keys if (k in believed) == flag]
        out += [(flag, mine[i : i + MAX_ENTRIES]) for i in range(0, len(mine), MAX_ENTRIES)]
    return out


def _wire(entries: int) -> int:
    return PACKET_OVERHEAD + entries * ENTRY_LEN


@dataclass
class _Switch:
    """The shared slots: who holds each one, and whose entry each cache slot holds."""

    owner: dict[int, tuple[int, int]] = field(default_factory=dict)  # slot -> (job, iteration)
    cache: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # slot -> (job, key, t)


class _Run:
    def __init__(self, config: SharingConfig) -> None:
        self.config = config
        self.loads = [config.workload(j) for j in range(len(config.jobs))]
        demands = [warmup_demand(wl, config.workers, config.warmup) for wl in self.loads]
        self.tables = layout(config, demands)
        self.switch = _Switch()
        # the worker's beliefs (hosts/worker.py), seeded with the configured hot set
        self.hot = [[set(t) for _ in range(config.workers)] for t in self.tables]
        self.cached = [[set(t) for _ in range(config.workers)] for t in self.tables]
        self.tally = [JobTally() for _ in self.loads]
        self.draws: dict[tuple[int, int], list[list[int]]] = {}
        self.applied: dict[tuple[int, int], set[int]] = {}  # (job, t) -> keys summed
        self.cold_part: dict[tuple[int, int], set[int]] = {}  # table keys with a PS part
        for j, table in enumerate(self.tables):  # the PSs' initial write-backs, in job order
            for key, slot in table.items():
                self.switch.cache[slot] = (j, key, 1)

    def measured(self, t: int) -> bool:
        return t > self.config.settle

    def start(self, j: int, t: int, rng: np.random.Generator) -> list[tuple[float, int, list[int]]]:
        """Job j's iteration t begins: its workers pull; returns its PUSH packets
        (time, worker, keys)."""
        cfg, tally, table = self.config, self.tally[j], self.tables[j]
        draws = [self.loads[j].pull_keys(w, t).tolist() for w in range(cfg.workers)]
        self.draws[j, t] = draws
        on = self.measured(t)
        packets = []
        for w, keys in enumerate(draws):
            cached, hot = self.cached[j][w], self.hot[j][w]
            n_packets, server = packet_bytes(len(keys))
            for pulls in _groups(keys, cached):
                flag, batch = pulls
                truth = [k in table and self.switch.cache.get(table[k]) == (j, k, t) for k in batch]
                if flag and all(truth):
                    if on:
                        tally.pull_served += len(batch)
                    continue
                if on:  # to the PS, answered there; its mask says which keys are cached
                    tally.to_ps += _wire(len(batch))
                    tally.from_ps += _wire(len(batch))
                    tally.pull_misses += flag
                    tally.pull_to_ps += len(batch)
                if flag or any(truth):
                    for k, yes in zip(batch, truth):
                        if yes:
                            cached.add(k)
                            hot.add(k)
                        else:
                            cached.discard(k)
            if on:
                tally.pull_entries += len(keys)
                tally.push_entries += len(keys)
                tally.server_to_ps += 2 * server + PACKET_OVERHEAD
                tally.server_from_ps += server + (n_packets + 1) * PACKET_OVERHEAD
                tally.to_ps += PACKET_OVERHEAD  # DONE
                tally.from_ps += PACKET_OVERHEAD  # DONE_ACK (its evicted keys: barrier())
            times = rng.random(len(keys))
            packets += [
                (float(times[i]), w, batch) for i, (_, batch) in enumerate(_groups(keys, hot))
            ]
        return packets

    def push(self, j: int, t: int, w: int, batch: list[int]) -> None:
        table, owner, tally = self.tables[j], self.switch.owner, self.tally[j]
        applied = self.applied.setdefault((j, t), set())
        cold = self.cold_part.setdefault((j, t), set())
        left = 0
        for k in batch:
            slot = table.get(k)
            if slot is not None and owner.setdefault(slot, (j, t)) == (j, t):
                applied.add(k)
                self.hot[j][w].add(k)
                continue
            left += 1
            self.hot[j][w].discard(k)
            self.cached[j][w].discard(k)
            if slot is not None:
                cold.add(k)
                tally.push_refused += self.measured(t)
        if self.measured(t):
            tally.push_applied += len(batch) - left
            if left:  # the unapplied entries go on to the PS, which acks the packet
                tally.to_ps += _wire(left)
                tally.push_to_ps += left
                tally.from_ps += PACKET_OVERHEAD

    def barrier(self, j: int, t: int) -> None:
        """Job j's PS collects t: releases its slots, refreshes or writes back the cache."""
        table, sw, tally, on = self.tables[j], self.switch, self.tally[j], self.measured(t)
        applied = self.applied.pop((j, t), set())
        cold = self.cold_part.pop((j, t), set())
        writebacks, evicted = 0, []
        for k, slot in table.items():
            held = k in applied
            if held:
                del sw.owner[slot]
            if sw.cache.get(slot) == (j, k, t) and k not in cold:
                sw.cache[slot] = (j, k, t + 1)  # the COLLECT refresh
            elif held:
                sw.cache[slot] = (j, k, t + 1)
                writebacks += 1
            elif sw.cache.get(slot) == (j, k, t):
                evicted.append(k)  # cached for t, a cold part in t: DONE_ACK names it
        for w in range(self.config.workers):
            self.hot[j][w].difference_update(evicted)
            self.cached[j][w].difference_update(evicted)
        counts: Counter[int] = Counter()
        for keys in self.draws.pop((j, t)):
            counts.update(keys)
        if on:
            collect = packet_bytes(len(table))[1]
            tally.to_ps += collect  # COLLECT_REPLY
            tally.from_ps += collect + packet_bytes(writebacks)[1]
            tally.from_ps += self.config.workers * len(evicted) * ENTRY_LEN
            tally.collect_entries += len(table)
            tally.writebacks += writebacks
            tally.alone_bound += 2 * sum(sorted(counts.values(), reverse=True)[: self.config.slots])
            tally.iterations += 1
        self.counts[j, t] = counts

    def run(self) -> dict[str, Any]:
        cfg = self.config
        n_jobs = len(cfg.jobs)
        self.counts: dict[tuple[int, int], Counter[int]] = {}
        events: list[tuple[float, int, int, int, int, list[int]]] = []
        for j in range(n_jobs):  # (time, kind, job, iteration, worker, keys); barrier first
            phase = 0.0 if cfg.aligned else j / n_jobs
            for t in range(1, cfg.iterations + 1):
                events.append((t + phase, 1, j, t, 0, []))
                events.append((t + 1 + phase, 0, j, t, 0, []))
        heapq.heapify(events)
        while events:
            at, kind, j, t, w, keys = heapq.heappop(events)
            if kind == 0:
                self.barrier(j, t)
            elif kind == 1:
                rng = np.random.default_rng([cfg.seed, j, t])
                for offset, worker, batch in self.start(j, t, rng):
                    heapq.heappush(events, (at + offset, 2, j, t, worker, batch))
            else:
                self.push(j, t, w, keys)
        jobs = [tally.result() for tally in self.tally]
        oracle = 0
        if cfg.aligned:
            for t in range(cfg.settle + 1, cfg.iterations + 1):
                pooled = [n for j in range(n_jobs) for n in self.counts[j, t].values()]
                oracle += 2 * sum(sorted(pooled, reverse=True)[: cfg.slots])
        speedups = [job["speedup"] for job in jobs]
        n = cfg.iterations - cfg.settle
        return {
            "policy": cfg.policy,
            "mapping": cfg.mapping if cfg.policy == "first-come" else None,
            "aligned": cfg.aligned,
            "slots": cfg.slots,
            "skews": [job.skew for job in cfg.jobs],
            "jobs": jobs,
            "saved_gross": round(sum(job["saved_gross"] for job in jobs), 2),
            "saved_net": round(sum(job["saved_net"] for job in jobs), 2),
            "bytes_saved": round(sum(job["bytes_saved"] for job in jobs), 1),
            "oracle": round(oracle / n, 2) if cfg.aligned else None,
            "speedup_sum": round(sum(speedups), 4),
            "jain": round(jain(speedups), 4),
        }


def simulate(config: SharingConfig) -> dict[str, Any]:
    """One run (module doc): per job its tallies and speed-up, and the totals."""
    return _Run(config).run()


def alone(config: SharingConfig) -> list[dict[str, Any]]:
    """Each job with all S slots to itself (its own run): what sharing costs it."""
    return [
        simulate(replace(config, jobs=(job,), policy="equal", aligned=True))["jobs"][0]
        for job in config.jobs
    ]


def grid(
    slots: Sequence[int] = GRID_SLOTS,
    skews: Sequence[float] = GRID_SKEWS,
    seeds: Sequence[int] = (1,),
    iterations: int = 40,
) -> list[dict[str, Any]]:
    """Every policy (first-come in both mappings, aligned and not) at every slot count."""
    rows = []
    for seed in seeds:
        jobs = tuple(SharingJob(skew, seed * 100 + j) for j, skew in enumerate(skews))
        for s in slots:
            base = SharingConfig(jobs, s, iterations=iterations, seed=seed)
            rows.append({"policy": "alone", "slots": s, "seed": seed, "jobs": alone(base)})
            variants: list[Mapping[str, Any]] = [
                {"policy": "equal"}, {"policy": "savings"},
                *({"mapping": m, "aligned": a} for m in MAPPINGS for a in (True, False)),
            ]  # fmt: skip
            for v in variants:
                rows.append({**simulate(replace(base, **v)), "seed": seed})
    return rows


def _name(row: Mapping[str, Any]) -> str:
    if row.get("mapping") is None:
        return str(row["policy"])
    return f"first-come {row['mapping']} {'aligned' if row['aligned'] else 'misaligned'}"


def table(rows: Sequence[Mapping[str, Any]]) -> str:
    """A Markdown table of the grid, each cell the mean over its seeds: per job the PS-link
    speed-up, their sum, Jain's index, the PS-link bytes toward the PS saved per iteration
    (all jobs), and first-come's refused push entries and whole PULLs missed per iteration."""
    cells: dict[tuple[int, str], list[Mapping[str, Any]]] = {}
    for row in rows:
        cells.setdefault((row["slots"], _name(row)), []).append(row)
    n_jobs = len(rows[0]["jobs"])
    head = ["S", "policy", *(f"job {j} speed-up" for j in range(n_jobs))]
    head += ["sum", "Jain", "bytes saved/iter", "refused/iter", "PULL misses/iter"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (slots, name), group in cells.items():
        per_job = [[r["jobs"][j] for r in group] for j in range(n_jobs)]
        speeds = [float(np.mean([job["speedup"] for job in jobs])) for jobs in per_job]

        def summed(field: str, group: Sequence[Mapping[str, Any]] = group) -> float:
            return float(np.mean([sum(job[field] for job in r["jobs"]) for r in group]))

        bytes_saved, refused, misses = (
            summed(f) for f in ("bytes_saved", "push_refused", "pull_misses")
        )
        out = [str(slots), name, *(f"{x:.3f}" for x in speeds), f"{sum(speeds):.3f}"]
        out += [f"{jain(speeds):.4f}", f"{bytes_saved:.0f}", f"{refused:.1f}", f"{misses:.1f}"]
        lines.append("| " + " | ".join(out) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--slots", default=",".join(map(str, GRID_SLOTS)))
    p.add_argument("--skews", default=",".join(map(str, GRID_SKEWS)), help="one per job")
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--iterations", type=int, default=40)
    p.add_argument("--out", type=Path, help="the rows as JSON")
    args = p.parse_args(argv)
    try:
        rows = grid(
            [int(s) for s in args.slots.split(",")],
            [float(s) for s in args.skews.split(",")],
            [int(s) for s in args.seeds.split(",")],
            args.iterations,
        )
    except ValueError as e:
        p.error(str(e))
    print(table(rows))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
