"""The online hot-set loop against a drifting workload, without a network: for tuning.

Iteration by iteration it draws the run's workload (hosts/workloads.py, the seeded stream
the workers read), counts what the hot set in force covers, and every `every` iterations
gives the loop (controller/online.py: RateEstimator, Hysteresis, OnlineController) what a
PS frequency file would tell it (the cold keys' updates, the hot keys' `collected`
presence), applying the loop's changes `lag` iterations later (a step takes time). The
initial set is the warm-up's: the most updated keys of `warmup` undrifted iterations read
far away in the stream, at least one update per iteration, at most `budget`.

Coverage as in summary.json's `hotset` block: per iteration, the share of its updates on the
hot set; the hindsight oracle (the best `budget` keys of that iteration's own draws) and the
expected oracle (the `budget` most likely keys of that iteration, ZipfWorkload.hottest).

    .venv/bin/python -m bench.hotset_sim --grid --out bench/results/hotset_sim.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np

from controller.online import (
    CONFIDENCE,
    DECAY,
    FIRST_FULL,
    MARGIN,
    MAX_CHANGES,
    MIN_RATE,
    Changes,
    Hysteresis,
    Observation,
    OnlineController,
    RateEstimator,
    updates_from_presence,
)
from hosts.workloads import DriftSpec, StreamOffset, ZipfWorkload


class SimTarget:
    def __init__(self, keys: set[int]) -> None:
        self.keys = set(keys)

    def current(self) -> set[int]:
        return set(self.keys)

    def apply(self, changes: Changes) -> None:
        self.keys = (self.keys - set(changes.remove)) | set(changes.add)


def simulate(
    drift: str | None,
    seed: int,
    iterations: int = 100,
    workers: int = 4,
    draws: int = 256,
    keys: int = 100_000,
    skew: float = 1.1,
    every: int = 2,
    lag: int = 0,
    decay: float = DECAY,
    margin: float = MARGIN,
    max_changes: int = MAX_CHANGES,
    min_rate: float = MIN_RATE,
    confidence: float = CONFIDENCE,
    dynamic: bool = True,
    first_full: bool = FIRST_FULL,
    warmup: int = 5,
    hot_slots: int = 256,
) -> dict[str, float]:
    spec = DriftSpec.parse(drift)
    wl = ZipfWorkload(keys, skew, draws, seed=seed, drift=spec)
    warm = StreamOffset(ZipfWorkload(keys, skew, draws, seed=seed), 1_000_000)
    seen: Counter[int] = Counter()
    for t in range(1, warmup + 1):
        for w in range(workers):
            seen.update(warm.pull_keys(w, t).tolist())
    initial = [k for k, n in seen.most_common(hot_slots) if n >= warmup]
    budget = len(initial)
    target = SimTarget(set(initial))
    state = {"cold": Counter(), "collected": Counter(), "since": 0}

    class Source:
        def read(self) -> Observation:
            span = state["since"]
            counts = {k: float(n) for k, n in state["cold"].items()}
            if state["collected"]:
                ks = list(state["collected"])
                est = updates_from_presence(
                    np.array([state["collected"][k] for k in ks], float), span, workers
                )
                for k, e in zip(ks, est.tolist()):
                    counts[k] = counts.get(k, 0.0) + e
            state["cold"], state["collected"], state["since"] = Counter(), Counter(), 0
            return Observation(counts, None, span, True)

    loop = OnlineController(
        target,
        Source(),
        RateEstimator(decay, first_full=first_full),
        Hysteresis(budget, margin, max_changes, min_rate, confidence),
    )
    pending: list[tuple[int, Changes]] = []
    cov, hind, expd = [], [], []
    moved = 0
    for t in range(1, iterations + 1):
        while pending and pending[0][0] <= t:
            target.apply(pending.pop(0)[1])
        counts: Counter[int] = Counter()
        for w in range(workers):
            counts.update(wl.pull_keys(w, t).tolist())
        total = sum(counts.values())
        hot = target.keys
        cov.append(sum(n for k, n in counts.items() if k in hot) / total)
        hind.append(sum(sorted(counts.values(), reverse=True)[:budget]) / total)
        expd.append(sum(counts.get(k, 0) for k in wl.hottest(budget, t).tolist()) / total)
        for k, n in counts.items():
            if k in hot:
                state["collected"][k] += 1
            else:
                state["cold"][k] += n
        state["since"] += 1
        if dynamic and t % every == 0:
            held, target.apply = target.apply, lambda ch: None  # choose now, apply later
            before = target.current()
            r = loop.step()
            target.apply = held
            ch = Changes(r.added, r.removed)
            moved += len(r.added) + len(r.removed)
            assert set(r.removed) <= before
            if lag:
                pending.append((t + 1 + lag, ch))
            else:
                target.apply(ch)
    c, h, e = float(np.mean(cov)), float(np.mean(hind)), float(np.mean(expd))
    return {
        "coverage": round(c, 4),
        "oracle": round(h, 4),
        "expected_oracle": round(e, 4),
        "ratio": round(c / h, 4),
        "ratio_expected": round(c / e, 4),
        "budget": budget,
        "keys_moved": moved,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--grid", action="store_true")
    p.add_argument("--seeds", default="3,4,5")
    p.add_argument("--drifts", default="none,every=10,fraction=0.2;every=5,fraction=0.3")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    drifts = [None if d == "none" else d for d in args.drifts.replace("none,", "none;").split(";")]
    grid = {
        "decay": [0.3, 0.5],
        "margin": [0.1, 0.2, 0.5],
        "min_rate": [0.5, 1.0],
        "lag": [0, 2],
    }
    rows = []
    combos = [dict(zip(grid, v)) for v in itertools.product(*grid.values())] if args.grid else [{}]
    for drift in drifts:
        for s in seeds:
            static = simulate(drift, s, dynamic=False)
            rows.append({"drift": drift, "seed": s, "mode": "static", **static})
    for combo in combos:
        for drift in drifts:
            res = [simulate(drift, s, **combo) for s in seeds]
            row = {"drift": drift, "mode": "dynamic", **combo}
            for name in ("coverage", "ratio", "ratio_expected", "keys_moved"):
                row[name] = round(float(np.mean([r[name] for r in res])), 4)
            rows.append(row)
            print(json.dumps(row), flush=True)
    for r in rows:
        if r["mode"] == "static":
            print(json.dumps(r))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
