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

Policies: `static` (the warm-up's set, never changed), `dynamic` (the online loop, with its
defaults: rates as the mean since a key's last change, ChangeRateEstimator), `decay` (the
same loop with the exponential-decay estimator it used before, RateEstimator, at the
settings it was tuned with: DECAY, margin DECAY_MARGIN) and `informed`: a loop that knows
the distribution, so each step sets the hot set to the expected oracle's keys of the last
iteration it counted, at the same pace and lag as the online loop, with no limit on the keys
a step moves. It bounds what a loop stepping at that pace can do; the online loop falls short
of it by estimating rates from counts, and by its policy's caution about those estimates
(margin, noise test, at most MAX_CHANGES per step).
`trace=True` adds the coverage of each iteration to the result.

    .venv/bin/python -m bench.hotset_sim --grid --out bench/results/hotset_sim.json
    .venv/bin/python -m bench.hotset_sim --sweep --out bench/results/hotset_drift.json

`--sweep` runs the policies over drift rates (the head's turnover per iteration,
fraction/every) with `lag` 1, the real runner's (the PS's file for iteration t is read,
and the step's Write lands, while t+1 runs), at both step phases (a step after even or after
odd iterations: `phase`, sweep()), and draws coverage / expected oracle against the turnover
beside the JSON (`.png`).
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
    CHANGE_THRESHOLD,
    CONFIDENCE,
    DECAY,
    FIRST_FULL,
    MARGIN,
    MAX_CHANGES,
    MIN_RATE,
    ChangeRateEstimator,
    Changes,
    Hysteresis,
    Observation,
    OnlineController,
    RateEstimator,
    updates_from_presence,
)
from hosts.workloads import DriftSpec, StreamOffset, ZipfWorkload

POLICIES = ("static", "dynamic", "decay", "informed")
LABELS = {
    "static": "static",
    "dynamic": "dynamic (mean since a key's last change)",
    "decay": "dynamic, exponential decay (before)",
    "informed": "informed (knows the distribution)",
}
DECAY_MARGIN = 1.0  # the margin the decay estimator was tuned with (experiment/hotset.py)
# (every, fraction) of the sweep: head turnover 0.5% to 6% of the 256 head ranks per iteration
SWEEP_DRIFTS = ((40, 0.2), (20, 0.1), (20, 0.2), (10, 0.1), (10, 0.2), (5, 0.2), (5, 0.3))
SWEEP_LAG = 1


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
    phase: int = 0,
    decay: float = DECAY,
    threshold: float = CHANGE_THRESHOLD,
    margin: float | None = None,
    max_changes: int = MAX_CHANGES,
    min_rate: float = MIN_RATE,
    confidence: float = CONFIDENCE,
    policy: str = "dynamic",
    first_full: bool = FIRST_FULL,
    warmup: int = 5,
    hot_slots: int = 256,
    trace: bool = False,
) -> dict:
    if policy not in POLICIES:
        raise ValueError(f"policy {policy!r}: one of {', '.join(POLICIES)}")
    if not 0 <= lag < every:  # a step would choose from a set that misses pending changes
        raise ValueError(f"lag {lag} must be in [0, every={every})")
    if not 0 <= phase < every:
        raise ValueError(f"phase {phase} must be in [0, every={every})")
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
            presence = {k: float(n) for k, n in state["collected"].items()}
            if presence:
                ks = list(presence)
                est = updates_from_presence(np.array([presence[k] for k in ks]), span, workers)
                for k, e in zip(ks, est.tolist()):
                    counts[k] = counts.get(k, 0.0) + e
            state["cold"], state["collected"], state["since"] = Counter(), Counter(), 0
            return Observation(counts, None, span, True, presence, workers)

    if policy == "decay":
        estimator: ChangeRateEstimator | RateEstimator = RateEstimator(decay, first_full=first_full)
        margin = DECAY_MARGIN if margin is None else margin
    else:
        estimator = ChangeRateEstimator(threshold)
        margin = MARGIN if margin is None else margin
    loop = OnlineController(
        target,
        Source(),
        estimator,
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
        if policy != "static" and t % every == phase:
            before = target.current()
            if policy == "informed":  # reads no counts: drop them, or they grow all run
                state["cold"], state["collected"], state["since"] = Counter(), Counter(), 0
                want = set(wl.hottest(budget, t).tolist())
                ch = Changes(sorted(want - before), sorted(before - want))
            else:
                held, target.apply = target.apply, lambda ch: None  # choose now, apply later
                r = loop.step()
                target.apply = held
                ch = Changes(r.added, r.removed)
            moved += len(ch.add) + len(ch.remove)
            assert set(ch.remove) <= before
            if lag:
                pending.append((t + 1 + lag, ch))
            else:
                target.apply(ch)
    c, h, e = float(np.mean(cov)), float(np.mean(hind)), float(np.mean(expd))
    per_iteration = {"coverage_per_iteration": cov} if trace else {}
    return {
        **per_iteration,
        "coverage": round(c, 4),
        "oracle": round(h, 4),
        "expected_oracle": round(e, 4),
        "ratio": round(c / h, 4),
        "ratio_expected": round(c / e, 4),
        "budget": budget,
        "keys_moved": moved,
    }


def sweep(
    seeds: list[int], lag: int = SWEEP_LAG, iterations: int = 100, every: int = 2
) -> list[dict]:
    """Every policy at every drift of SWEEP_DRIFTS (and none), one row per run: the drift,
    its turnover, the policy, seed, lag and step phase, and simulate()'s result. The loops
    run at every step phase (0..every-1): a drift's epochs start after multiples of its
    `every`, so with an even one a loop stepping after even iterations never reads an epoch
    start inside a step and one stepping after odd iterations always does, and a real
    workload's changes do not wait for the loop."""
    rows: list[dict] = []
    drifts: list[tuple[str | None, float]] = [(None, 0.0)]
    drifts += [(f"every={e},fraction={f}", f / e) for e, f in SWEEP_DRIFTS]
    for drift, turnover in drifts:
        for policy in POLICIES:
            phases = range(every) if policy != "static" else range(1)
            start = len(rows)
            for seed, phase in itertools.product(seeds, phases):
                res = simulate(
                    drift, seed, iterations, every=every, lag=lag, phase=phase, policy=policy
                )
                rows.append(
                    {
                        "drift": drift,
                        "turnover": turnover,
                        "policy": policy,
                        "seed": seed,
                        "lag": lag,
                        "phase": phase,
                        **res,
                    }
                )
            ratios = [r["ratio_expected"] for r in rows[start:]]
            print(
                f"drift {drift or 'none'}: {policy} {np.mean(ratios):.3f} of the expected oracle",
                file=sys.stderr,
                flush=True,
            )
    return rows


def plot_sweep(path: Path, rows: list[dict]) -> None:
    """Coverage / expected oracle against the head's turnover per iteration, per policy
    (mean of the runs at that turnover, seeds, step phases and drifts of equal turnover; bars
    from the lowest to the highest)."""
    import matplotlib

    matplotlib.use("Agg")  # no display on a test VM or in CI
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    styles = {
        "informed": ("gray", "--"),
        "dynamic": ("tab:blue", "-"),
        "decay": ("tab:cyan", ":"),
        "static": ("tab:red", "-"),
    }
    for policy in POLICIES:
        runs = [r for r in rows if r["policy"] == policy]
        xs = sorted({r["turnover"] for r in runs})
        ratios_at = [[r["ratio_expected"] for r in runs if r["turnover"] == x] for x in xs]
        mean = np.array([np.mean(v) for v in ratios_at])
        err = np.array(
            [
                [m - min(v) for m, v in zip(mean, ratios_at)],
                [max(v) - m for m, v in zip(mean, ratios_at)],
            ]
        )
        color, ls = styles[policy]
        ax.errorbar(
            100 * np.array(xs),
            mean,
            yerr=err,
            color=color,
            ls=ls,
            marker="o",
            ms=4,
            capsize=3,
            label=LABELS[policy],
        )
    ax.axhline(0.9, color="black", ls=":", lw=1, label="goal: 90% of the expected oracle")
    ax.set_xlabel("head turnover per iteration (% of the head ranks: fraction / every)")
    ax.set_ylabel("coverage / expected oracle")
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left", fontsize=8)
    lag = rows[0]["lag"] if rows else SWEEP_LAG
    ax.set_title(
        f"Hot-set coverage under drift (simulated, lag {lag}, "
        f"{len({r['seed'] for r in rows})} seeds, both step phases)",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def settings_grid(seeds: list[int], drifts: list[str | None], full: bool) -> list[dict]:
    """Static per drift and seed, then the dynamic loop (mean over seeds) at each setting of
    the grid (`full`) or at the defaults; printed as they come, the static rows last."""
    grid = {
        "threshold": [5.0, 7.0, 9.0],
        "margin": [0.3, 0.6, 1.0],
        "min_rate": [0.5, 1.0],
        "lag": [0, 1],
    }
    rows = []
    combos = [dict(zip(grid, v)) for v in itertools.product(*grid.values())] if full else [{}]
    for drift in drifts:
        for s in seeds:
            static = simulate(drift, s, policy="static")
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
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--grid", action="store_true", help="the dynamic loop over a settings grid")
    mode.add_argument(
        "--sweep", action="store_true", help="the policies over SWEEP_DRIFTS (and a .png)"
    )
    p.add_argument("--seeds", default="3,4,5")
    p.add_argument(
        "--drifts",
        default="none,every=10,fraction=0.2;every=5,fraction=0.3",
        help="without --sweep",
    )
    p.add_argument("--iterations", type=int, default=100, help="per run, with --sweep")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.sweep:
        rows = sweep(seeds, iterations=args.iterations)
    else:
        drifts = args.drifts.replace("none,", "none;").split(";")
        rows = settings_grid(seeds, [None if d == "none" else d for d in drifts], args.grid)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
        if args.sweep:
            plot_sweep(args.out.with_suffix(".png"), rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
