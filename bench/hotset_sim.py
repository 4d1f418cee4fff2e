"""The online hot-set loop against a drifting workload, without a network: for tuning.

Iteration by iteration it draws the run's workload (hosts/workloads.py, the seeded stream
the workers read), counts what the hot set in force covers, and every `every` iterations
gives the loop (controller/online/: RateEstimator, Hysteresis, OnlineController) what a
PS frequency file would tell it (the cold keys' updates, the hot keys' `collected`
presence), applying the loop's changes `lag` iterations later (a step takes time). The
initial set is the warm-up's: the most updated keys of `warmup` undrifted iterations read
far away in the stream, at least one update per iteration, at most `hot_slots`; their
number is the run's `budget`.

Coverage as in summary.json's `offload_hot_set` block: per iteration, the share of its updates
on the hot set; the hindsight oracle (the best `budget` keys of that iteration's own draws) and the
expected oracle (the `budget` most likely keys of that iteration, ZipfWorkload.hottest).

Policies: `static` (the warm-up's set, never changed), `dynamic` (the online loop, with its
defaults: rates as the mean since a key's last change, ChangeRateEstimator), `decay` (the
same loop with the exponential-decay estimator it used before, RateEstimator, at the
settings it was tuned with: DECAY, margin DECAY_MARGIN) and `informed`: a loop that knows
the distribution, so each step sets the hot set to the expected oracle's keys of the last
iteration it counted, at the same pace and lag as the online loop, with no limit on the keys
a step moves. It bounds what a loop stepping at that pace can do; the online loop falls short
of it by estimating rates from counts, and by its policy's caution about those estimates
(margin, noise test, at most MAX_CHANGES per step). `bayes` sits between them: it steps like
`informed`, but sets the keys of highest posterior rate under a filter that knows the
drift's law (each rank's probability, the first map, how often a head rank swaps) and
learns which key holds a rank from the counts alone (LawAwareFilter). It is about the best
a loop that learns keys from counts can do, and so says how much of the gap to `informed`
no such loop can close.
A run is one SimConfig: the workload (SimWorkload), the loop (SimLoop: the policy, when it
steps, its lag and its settings) and the run's shape (iterations, warm-up, hot slots):
`every`, `lag`, `phase`, `warmup` and `hot_slots` here are its fields.
`simulate(config, trace=True)` adds the coverage of each iteration to the result.

    .venv/bin/python -m bench.hotset_sim --grid --out bench/results/hotset_sim.json
    .venv/bin/python -m bench.hotset_sim --sweep --out bench/results/hotset_drift.json

`--sweep` runs the policies over drift rates (the head's turnover per iteration,
fraction/every) with `lag` 1, the real runner's (the PS's file for iteration t is read,
and the step's Write lands, while t+1 runs), at every step phase (`phase`, sweep(): one
at the default pace of a step every iteration), and draws coverage / expected oracle
against the turnover beside the JSON (`.png`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from controller.online.estimators import (
    CHANGE_THRESHOLD,
    DECAY,
    FIRST_FULL,
    ChangeRateEstimator,
    RateEstimator,
)
from controller.online.loop import OnlineController
from controller.online.observation import Observation, updates_from_presence
from controller.online.policy import CONFIDENCE, MARGIN, MAX_CHANGES, MIN_RATE, Changes, Hysteresis
from experiment.config import HOTSET_EVERY, HotSetSource
from experiment.hotset import change_window, epoch_offset_sums
from hosts.workloads import DriftSpec, StreamOffset, Workload, ZipfWorkload

POLICIES = ("static", "dynamic", "decay", "informed", "bayes")
LABELS = {
    "static": "static",
    "dynamic": "dynamic (mean since a key's last change)",
    "decay": "dynamic, exponential decay (RateEstimator)",
    "informed": "informed (knows the distribution)",
    "bayes": "bayes (knows the drift's law, finds keys by counts)",
}
BAYES_TRACKED = 4096  # ranks whose keys the bayes filter follows from the start
DECAY_MARGIN = 1.0  # the margin the decay estimator was tuned with (experiment/hotset.py)
# (every, fraction) of the sweep: head turnover 0.5% to 6% of the 256 head ranks per iteration
SWEEP_DRIFTS = ((40, 0.2), (20, 0.1), (20, 0.2), (10, 0.1), (10, 0.2), (5, 0.2), (5, 0.3))
SWEEP_LAG = 1


class LawAwareFilter:
    """The `bayes` policy's estimator: per key, the posterior over where it sits, given
    everything the drift's law says and the key's counts. It knows each rank's draw
    probability, the rank -> key map of iteration 1, and the chance per iteration that a
    head rank swaps with a tail key (the drift's fraction / every, not when epochs start),
    and updates every key's posterior with its draws (0..workers) each iteration. States: a
    head rank (0..head-1), the key's own tail rank of iteration 1, or some other tail rank
    (where a head key goes when it leaves). Keys are filtered independently (a rank's two
    candidates are not made to exclude each other), so it is close to, not exactly, the best
    a loop that learns keys from counts can do; it is generous in knowing the rates and the
    first map, and in counting the hot keys' draws (the loops see their presence)."""

    def __init__(self, wl: ZipfWorkload, spec: DriftSpec | None, workers: int) -> None:
        self.head = spec.head if spec is not None else 0
        self.hazard = spec.swaps_per_epoch / spec.head / spec.every if spec is not None else 0.0
        self.workers, self.tail = workers, wl.key_space - self.head
        self.q = wl.draw_probability(wl.key_space)
        self.q_away = float(self.q[self.head :].mean())
        # the head states' log-likelihood terms are the same for every key: taken once
        self.log_q_head = np.log(self.q[: self.head])
        self.log_miss_head = np.log1p(-self.q[: self.head])
        # per state, the chance a key not yet seen drew nothing (its own rate taken as 0)
        self.silent = (1 - np.concatenate([self.q[: self.head], [0.0, self.q_away]])) ** workers
        ranked = wl.hottest(wl.key_space, 1)
        self.rank0 = np.empty(wl.key_space, np.int64)
        self.rank0[ranked] = np.arange(wl.key_space)
        n_states = self.head + 2
        tracked = min(max(BAYES_TRACKED, self.head), wl.key_space)
        self.keys = ranked[:tracked].copy()
        self.row = {int(k): i for i, k in enumerate(self.keys.tolist())}
        self.post = np.zeros((tracked, n_states))
        first = np.arange(tracked)
        self.post[first, np.minimum(first, self.head)] = 1.0  # tail ranks: the own state
        self.q_own = self._own_rate(self.keys)
        # a key not yet seen: started in its own tail rank (rate ~0) and drew nothing since
        self.unseen = np.zeros(n_states)
        self.unseen[self.head] = 1.0

    def _own_rate(self, keys: np.ndarray) -> np.ndarray:
        ranks = self.rank0[keys]
        return np.where(ranks >= self.head, self.q[ranks], self.q_away)

    def _rates(self, q_own: np.ndarray) -> np.ndarray:
        """Per row and state, the draw probability (rows, head + 2)."""
        n = len(q_own)
        return np.concatenate(
            [np.broadcast_to(self.q[: self.head], (n, self.head)), q_own[:, None],
             np.full((n, 1), self.q_away)], axis=1,
        )  # fmt: skip

    def _drift(self, post: np.ndarray) -> np.ndarray:
        h, head, enter = self.hazard, self.head, self.hazard / self.tail if self.tail else 0.0
        out = np.empty_like(post)
        out[:, :head] = post[:, :head] * (1 - h) + post[:, head:].sum(1, keepdims=True) * enter
        out[:, head:] = post[:, head:] * (1 - enter * head)
        out[:, head + 1] += post[:, :head].sum(1) * h
        return out

    def observe(self, counts: Counter[int]) -> None:
        """One iteration: the law moves every posterior, then each key's draws weigh it."""
        if self.hazard:
            self.post = self._drift(self.post)
            self.unseen = self._drift(self.unseen[None])[0]
        new = np.array([k for k in counts if k not in self.row], dtype=np.int64)
        if new.size:
            first = len(self.row)
            self.row.update((int(k), first + i) for i, k in enumerate(new.tolist()))
            self.keys = np.concatenate([self.keys, new])
            self.post = np.vstack([self.post, np.repeat(self.unseen[None], new.size, 0)])
            self.q_own = np.concatenate([self.q_own, self._own_rate(new)])
        drawn = np.zeros(len(self.keys))
        drawn[[self.row[k] for k in counts]] = list(counts.values())
        missed = self.workers - drawn
        loglik = np.empty_like(self.post)
        loglik[:, : self.head] = (
            drawn[:, None] * self.log_q_head + missed[:, None] * self.log_miss_head
        )
        for state, q in ((self.head, self.q_own), (self.head + 1, self.q_away)):
            loglik[:, state] = drawn * np.log(q) + missed * np.log1p(-q)
        self.post *= np.exp(loglik)
        self.post /= self.post.sum(axis=1, keepdims=True)
        self.unseen *= self.silent
        self.unseen /= self.unseen.sum()

    def best(self, n: int) -> set[int]:
        """The n keys of highest posterior mean rate."""
        mean = (self.post * self._rates(self.q_own)).sum(axis=1)
        return set(self.keys[np.argsort(-mean, kind="stable")[:n]].tolist())


class SimTarget:
    """The hot set as the loop records it (`record`: what current() returns, changed by
    apply(), as SwitchTarget's) and as the switch has it (`keys`: in force, changed by
    land() once the step's Write lands, `lag` iterations later)."""

    def __init__(self, keys: set[int]) -> None:
        self.keys, self.record = set(keys), set(keys)

    def current(self) -> set[int]:
        return set(self.record)

    def apply(self, changes: Changes) -> None:
        self.record = (self.record - set(changes.remove)) | set(changes.add)

    def land(self, changes: Changes) -> None:
        self.keys = (self.keys - set(changes.remove)) | set(changes.add)


@dataclass(frozen=True)
class SimWorkload:
    """The workers' stream, drawn as make run's workers draw it (hosts/workloads.py)."""

    drift: str | None  # a DriftSpec (--drift), or None: the distribution never moves
    seed: int
    workers: int = 4
    draws: int = 256  # keys each worker draws per iteration
    keys: int = 100_000  # the key space
    skew: float = 1.1  # the Zipf exponent


@dataclass(frozen=True)
class SimLoop:
    """The loop under test: its policy (POLICIES), when it steps and when its changes are in
    force, and the settings of its estimator and change policy (controller/online/)."""

    policy: str = "dynamic"
    every: int = HOTSET_EVERY[HotSetSource.PS]  # iterations between steps
    phase: int = 0  # a step follows each iteration t with t % every == phase
    lag: int = 0  # a step's changes are in force from `lag` iterations after the next one
    threshold: float = CHANGE_THRESHOLD  # ChangeRateEstimator's
    decay: float = DECAY  # RateEstimator's (policy `decay`)
    first_full: bool = FIRST_FULL  # RateEstimator's
    margin: float | None = None  # None: MARGIN, DECAY_MARGIN with policy `decay`
    max_changes: int = MAX_CHANGES
    min_rate: float = MIN_RATE
    confidence: float = CONFIDENCE

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"policy {self.policy!r}: one of {', '.join(POLICIES)}")
        if self.lag < 0:
            raise ValueError(f"lag {self.lag} must be >= 0")
        if not 0 <= self.phase < self.every:
            raise ValueError(f"phase {self.phase} must be in [0, every={self.every})")


@dataclass(frozen=True)
class SimConfig:
    """One simulated run (module doc): the workload, the loop and the run's shape."""

    workload: SimWorkload
    loop: SimLoop = field(default_factory=SimLoop)
    iterations: int = 100
    warmup: int = 5  # undrifted iterations whose most updated keys are the initial set
    hot_slots: int = 256  # the initial set's most keys


class SimSource:
    """What the PS's frequency file would tell the loop since its last read: the cold keys'
    updates and the hot keys' `collected` presence (iterations a worker pulled them in)."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.cold: Counter[int] = Counter()
        self.collected: Counter[int] = Counter()
        self.since = 0  # iterations counted since the last read

    def count(self, counts: Counter[int], hot: set[int]) -> None:
        """One iteration's draws, with `hot` the set in force."""
        for k, n in counts.items():
            if k in hot:
                self.collected[k] += 1
            else:
                self.cold[k] += n
        self.since += 1

    def drop(self) -> None:
        self.cold, self.collected, self.since = Counter(), Counter(), 0

    def read(self) -> Observation:
        span = self.since
        counts = {k: float(n) for k, n in self.cold.items()}
        presence = {k: float(n) for k, n in self.collected.items()}
        if presence:
            ks = list(presence)
            est = updates_from_presence(np.array([presence[k] for k in ks]), span, self.workers)
            for k, e in zip(ks, est.tolist()):
                counts[k] = counts.get(k, 0.0) + e
        self.drop()
        return Observation(counts, None, span, True, presence, self.workers)


def drawn(stream: Workload, workers: int, iteration: int) -> Counter[int]:
    """Every worker's draws of one iteration, pooled: key -> workers that drew it."""
    counts: Counter[int] = Counter()
    for w in range(workers):
        counts.update(stream.pull_keys(w, iteration).tolist())
    return counts


def warmup_set(config: SimConfig) -> list[int]:
    """The warm-up's hot set: the most updated keys of `warmup` undrifted iterations read
    far away in the stream, at least one update per iteration, at most `hot_slots`."""
    work = config.workload
    warm = StreamOffset(ZipfWorkload(work.keys, work.skew, work.draws, seed=work.seed), 1_000_000)
    seen: Counter[int] = Counter()
    for t in range(1, config.warmup + 1):
        seen.update(drawn(warm, work.workers, t))
    return [k for k, n in seen.most_common(config.hot_slots) if n >= config.warmup]


def online_loop(
    settings: SimLoop, target: SimTarget, source: SimSource, budget: int
) -> tuple[OnlineController, ChangeRateEstimator | RateEstimator]:
    """The online loop of `dynamic` and `decay` (the others build it and never step it)."""
    estimator: ChangeRateEstimator | RateEstimator
    if settings.policy == "decay":
        estimator = RateEstimator(settings.decay, first_full=settings.first_full)
        margin = DECAY_MARGIN if settings.margin is None else settings.margin
    else:
        estimator = ChangeRateEstimator(settings.threshold, window=change_window(settings.every))
        margin = MARGIN if settings.margin is None else settings.margin
    policy = Hysteresis(
        budget, margin, settings.max_changes, settings.min_rate, settings.confidence
    )
    return OnlineController(target, source, estimator, policy), estimator


def simulate(config: SimConfig, *, trace: bool = False) -> dict[str, Any]:
    """One run (module doc). With `trace`, also per iteration the coverage, the expected
    oracle's share and the keys in force (`coverage_per_iteration`,
    `expected_oracle_per_iteration`, `hot_per_iteration`) and, for the
    online loops, per step what it leaves out of the expected oracle once its changes are in
    force (`steps`, missing_shares())."""
    work, settings, iterations = config.workload, config.loop, config.iterations
    spec = DriftSpec.parse(work.drift)
    wl = ZipfWorkload(work.keys, work.skew, work.draws, seed=work.seed, drift=spec)
    initial = warmup_set(config)
    budget = len(initial)
    target = SimTarget(set(initial))
    source = SimSource(work.workers)
    loop, estimator = online_loop(settings, target, source, budget)
    bayes = LawAwareFilter(wl, spec, work.workers) if settings.policy == "bayes" else None
    pending: list[tuple[int, Changes]] = []
    cov: list[float] = []
    hind: list[float] = []
    expd: list[float] = []
    sizes: list[int] = []  # keys in force per iteration
    steps: list[dict[str, Any]] = []
    expected_rate = work.workers * wl.draw_probability(work.keys) if trace else None
    moved = 0
    for t in range(1, iterations + 1):
        while pending and pending[0][0] <= t:
            target.land(pending.pop(0)[1])
        counts = drawn(wl, work.workers, t)
        total = sum(counts.values())
        hot = target.keys
        sizes.append(len(hot))
        cov.append(sum(n for k, n in counts.items() if k in hot) / total)
        hind.append(sum(sorted(counts.values(), reverse=True)[:budget]) / total)
        expd.append(sum(counts.get(k, 0) for k in wl.hottest(budget, t).tolist()) / total)
        source.count(counts, hot)
        if bayes is not None:
            bayes.observe(counts)
        if settings.policy == "static" or t % settings.every != settings.phase:
            continue
        before = target.current()
        if settings.policy in ("informed", "bayes"):
            source.drop()  # they read no counts: drop them, or they grow
            want = bayes.best(budget) if bayes is not None else set(wl.hottest(budget, t).tolist())
            ch = Changes(sorted(want - before), sorted(before - want))
            target.apply(ch)
        else:
            r = loop.step()  # the record changes now, the switch's set when it lands
            ch = Changes(r.added, r.removed)
            in_force = t + 1 + settings.lag
            if expected_rate is not None and in_force <= iterations:
                kept = (before - set(ch.remove)) | set(ch.add)
                ranked = wl.hottest(work.keys, in_force)
                shares = missing_shares(
                    kept, ranked, expected_rate, budget, estimator.rate, settings.min_rate
                )
                steps.append({"iteration": t, "in_force": in_force, **shares})
        moved += len(ch.add) + len(ch.remove)
        assert set(ch.remove) <= before
        if settings.lag:
            pending.append((t + 1 + settings.lag, ch))
        else:
            target.land(ch)
    c, h, e = float(np.mean(cov)), float(np.mean(hind)), float(np.mean(expd))
    per_iteration = (
        {
            "coverage_per_iteration": cov,
            "expected_oracle_per_iteration": expd,
            "hot_per_iteration": sizes,
            "steps": steps,
        }
        if trace
        else {}
    )
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


def missing_shares(
    kept: set[int],
    ranked: np.ndarray,
    expected_rate: np.ndarray,
    budget: int,
    rate: Callable[[int], float],
    min_rate: float,
) -> dict[str, float]:
    """What a hot set leaves out of the expected oracle (the `budget` most likely keys,
    `ranked` hottest first, each expected to get `expected_rate` updates per iteration), as
    shares of the oracle's expected updates, by what the loop's estimator made of the keys
    it left out: `unseen` (no rate: never counted, or forgotten), `below_min` (rated below
    the policy's minimum rate), `held_back` (rated above it, but the margin, the noise test
    or the step's limit kept them out); and `outside`, what the set's keys outside the
    oracle are expected to get instead. The set's expected loss is the three minus
    `outside`."""
    total = float(expected_rate[:budget].sum())
    shares = {"unseen": 0.0, "below_min": 0.0, "held_back": 0.0}
    oracle = ranked[:budget].tolist()
    for key, expected in zip(oracle, expected_rate[:budget].tolist()):
        if key in kept:
            continue
        r = rate(key)
        kind = "unseen" if r <= 0 else "below_min" if r < min_rate else "held_back"
        shares[kind] += expected / total
    rank_of = np.empty(len(ranked), np.intp)
    rank_of[ranked] = np.arange(len(ranked))
    outside = sorted(kept - set(oracle))
    shares["outside"] = float(expected_rate[rank_of[outside]].sum()) / total if outside else 0.0
    return shares


def epoch_profile(
    drift: str,
    seeds: list[int],
    iterations: int = 100,
    lag: int = SWEEP_LAG,
    every: int = HOTSET_EVERY[HotSetSource.PS],
) -> dict:
    """Coverage over the expected oracle by iteration since the drift's last epoch start,
    for the informed and the online loop at each step phase (seeds pooled: the sum of
    coverage over the sum of the expected oracle at each offset), and the online loop's
    missing_shares() by the offset at which each step's changes come in force. The first
    epoch is left out: the warm-up's set is right for it. This is where an online loop loses
    against one that knows the distribution, and on which keys."""
    spec = DriftSpec.parse(drift)
    if spec is None or not spec.fraction:
        raise ValueError(f"drift {drift!r}: the profile needs a drift that moves keys")
    period = spec.every
    if iterations <= period:
        raise ValueError(f"{iterations} iterations: the profile needs more than every={period}")
    rows = []
    kinds = ("unseen", "below_min", "held_back", "outside")
    for policy in ("informed", "dynamic"):
        for phase in range(every):
            cov, exp = np.zeros(period), np.zeros(period)
            missing, n_steps = np.zeros((len(kinds), period)), np.zeros(period)
            for seed in seeds:
                loop = SimLoop(policy=policy, every=every, phase=phase, lag=lag)
                run = simulate(SimConfig(SimWorkload(drift, seed), loop, iterations), trace=True)
                got, best = epoch_offset_sums(
                    run["coverage_per_iteration"], run["expected_oracle_per_iteration"], period
                )
                cov, exp = cov + got, exp + best
                for step in run["steps"]:
                    if step["in_force"] > period:
                        at = (step["in_force"] - 1) % period
                        missing[:, at] += [step[k] for k in kinds]
                        n_steps[at] += 1
            row: dict[str, Any] = {
                "policy": policy,
                "phase": phase,
                # None where no iteration was seen (a run shorter than two epochs)
                "ratio_by_offset": [
                    round(float(c / e), 4) if e else None for c, e in zip(cov, exp)
                ],
                "ratio": round(float(cov.sum() / exp.sum()), 4),
            }
            if n_steps.any():
                with np.errstate(invalid="ignore"):
                    by = missing / n_steps
                row["missing_by_offset"] = {
                    k: [None if np.isnan(v) else round(float(v), 4) for v in by[i]]
                    for i, k in enumerate(kinds)
                }
            rows.append(row)
    return {"drift": drift, "seeds": seeds, "lag": lag, "every": every, "rows": rows}


def plot_epoch_profile(path: Path, profile: dict) -> None:
    """Coverage / expected oracle by iteration since an epoch start, per loop and step
    phase; below, what the online loop's set leaves out of the expected oracle (by kind)
    at the offsets its steps come in force, pooled over phases."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = profile["rows"]
    period = len(rows[0]["ratio_by_offset"])
    x = np.arange(period)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.5, 6), sharex=True)
    for row in rows:
        color = "gray" if row["policy"] == "informed" else "tab:blue"
        ratios = [np.nan if v is None else v for v in row["ratio_by_offset"]]
        top.plot(
            x, ratios, color=color, ls="-" if row["phase"] == 0 else "--", marker="o", ms=3,
            label=f"{LABELS[row['policy']]}, steps after iterations = {row['phase']} "
            f"mod {profile['every']} (mean {row['ratio']:.3f})",
        )  # fmt: skip
    top.axhline(0.9, color="black", ls=":", lw=1)
    top.set_ylabel("coverage / expected oracle")
    top.set_ylim(0.5, 1.02)
    top.grid(alpha=0.3)
    top.legend(fontsize=7, loc="lower right")
    top.set_title(f"After an epoch start ({profile['drift']}; simulated, lag {profile['lag']})",
                  fontsize=10)  # fmt: skip
    online = [r for r in rows if "missing_by_offset" in r]
    kinds = ("unseen", "below_min", "held_back")
    colors = ("tab:red", "tab:orange", "tab:purple")
    base = np.zeros(period)

    def pooled(kind: str) -> np.ndarray:
        """The phases' mean at each offset (a phase's steps are in force at some only)."""
        vals = np.array(
            [[np.nan if v is None else v for v in r["missing_by_offset"][kind]] for r in online]
        )
        seen = (~np.isnan(vals)).sum(axis=0)
        total = np.nansum(vals, axis=0)
        return np.divide(total, seen, out=np.zeros(period), where=seen > 0)

    for kind, color in zip(kinds, colors):
        vals = pooled(kind)
        bottom.bar(x, vals, bottom=base, color=color, label=f"oracle keys left out: {kind}")
        base += vals
    bottom.plot(x, pooled("outside"), color="black", marker="_", ms=12, ls="none",
                label="what the set's keys outside the oracle get instead")  # fmt: skip
    bottom.set_xlabel("iteration since the epoch start (0: the first at the new head)")
    bottom.set_ylabel("share of the expected oracle")
    bottom.grid(alpha=0.3)
    bottom.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def sweep(
    seeds: list[int],
    lag: int = SWEEP_LAG,
    iterations: int = 100,
    every: int = HOTSET_EVERY[HotSetSource.PS],
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
                loop = SimLoop(policy=policy, every=every, phase=phase, lag=lag)
                res = simulate(SimConfig(SimWorkload(drift, seed), loop, iterations))
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
        "bayes": ("tab:green", "-."),
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
    phases = len({r["phase"] for r in rows})  # a step every iteration has one
    ax.set_title(
        f"Hot-set coverage under drift (simulated, lag {lag}, "
        f"{len({r['seed'] for r in rows})} seeds"
        + (f", {phases} step phases)" if phases > 1 else ")"),
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def settings_grid(
    seeds: list[int],
    drifts: list[str | None],
    full: bool,
    every: int = HOTSET_EVERY[HotSetSource.PS],
) -> list[dict]:
    """Static per drift and seed, then the dynamic loop (mean over seeds) at each setting of
    the grid (`full`) or at the defaults; printed as they come, the static rows last."""
    grid: dict[str, tuple[float, ...]] = {  # SimLoop's fields
        "threshold": (5.0, 7.0, 9.0),
        "margin": (0.3, 0.6, 1.0),
        "min_rate": (0.5, 1.0),
        "lag": (0, 1),
    }
    rows: list[dict[str, Any]] = []
    combos: list[dict[str, Any]] = (
        [dict(zip(grid, v)) for v in itertools.product(*grid.values())] if full else [{}]
    )
    static = SimLoop(policy="static", every=every)
    for drift in drifts:
        for s in seeds:
            run = simulate(SimConfig(SimWorkload(drift, s), static))
            rows.append({"drift": drift, "seed": s, "mode": "static", **run})
    for combo in combos:
        loop = SimLoop(every=every, **combo)
        for drift in drifts:
            res = [simulate(SimConfig(SimWorkload(drift, s), loop)) for s in seeds]
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
    mode.add_argument(
        "--epochs",
        metavar="DRIFT",
        help="coverage by iteration since an epoch start, and what the loop leaves out "
        "(epoch_profile(); and a .png)",
    )
    p.add_argument("--seeds", default="3,4,5")
    p.add_argument(
        "--drifts",
        default="none,every=10,fraction=0.2;every=5,fraction=0.3",
        help="without --sweep",
    )
    p.add_argument("--iterations", type=int, default=100, help="per run, with --sweep/--epochs")
    p.add_argument(
        "--every",
        type=int,
        default=HOTSET_EVERY[HotSetSource.PS],
        help="iterations between the loops' steps (default: make run's)",
    )
    p.add_argument(
        "--lag",
        type=int,
        default=SWEEP_LAG,
        help="iterations after the next one that a step's changes are in force from "
        "(with --sweep/--epochs; SWEEP_LAG)",
    )
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.every < 1 or args.lag < 0:
        p.error(f"--every {args.every} must be >= 1 and --lag {args.lag} >= 0")
    if args.epochs:
        try:
            profile = epoch_profile(args.epochs, seeds, args.iterations, args.lag, args.every)
        except ValueError as e:  # a bad drift (WorkloadError is one too)
            p.error(str(e))
        for row in profile["rows"]:
            ratios = " ".join("-" if v is None else f"{v:.3f}" for v in row["ratio_by_offset"])
            print(f"{row['policy']:8s} phase {row['phase']}: {ratios} | {row['ratio']:.3f}")
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(profile, indent=1) + "\n")
            plot_epoch_profile(args.out.with_suffix(".png"), profile)
        return 0
    if args.sweep:
        rows = sweep(seeds, args.lag, args.iterations, args.every)
    else:
        drifts = args.drifts.replace("none,", "none;").split(";")
        drift_list = [None if d == "none" else d for d in drifts]
        rows = settings_grid(seeds, drift_list, args.grid, args.every)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
        if args.sweep:
            plot_sweep(args.out.with_suffix(".png"), rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
