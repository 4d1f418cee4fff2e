"""HOTSET=dynamic and the hot set's coverage (issue 10 item 5).

Dynamic mode: during the offload phase the runner runs the controller's online loop
(controller/online/, the library behind `hotagg-ctl hotkeys auto`) in a thread of its own
process, on its P4Runtime session with the aggregating switch. The loop reads the PS shards'
frequency counters, which each PS keeps in a `.live` file that it maps into memory
(contract/freqfile.py LiveFrequency; the PS rewrites nothing): their cold counts and the hot
keys' collected counts (PSFrequencySource(collected=True)), and re-selects each time every
shard has counted `every` more iterations, so its pace follows the iterations, not the
machine's speed; a step's one P4Runtime call is the Write that moves its keys. The budget is the
job's slot count (the warm-up's set picks it and the initial keys, as in static mode), so
both modes have the same slots and differ only in which keys hold them. It stops when the
workers are done (before the phase's counters are read) or when the phase fails; the thread
is a daemon, so it never outlives the run.

Nothing else changes for the agents (docs/design.md section 4): the workers' and the PS's
`--hot-keys` is only the initial set; workers learn later moves from PUSH_ACK and
PULL_REPLY masks, the PS from the sums it collects (every offset, whichever key is there).

Coverage (summary.json `offload_hot_set`, README "Hot set: static or dynamic"), per measured
iteration t of the offload phase:
- `coverage[t]`: the share of t's updates (push entries) that the switch summed: the set
  bits of the PUSH_ACK masks in the workers' logs over the entries they pushed in t. It is
  what the hot set in force achieved, including its misses while keys move.
- `oracle_coverage[t]`: the share the best `budget` keys of iteration t would have had:
  their updates in t over all of t's updates, counted from the workload itself (the same
  seeded stream the workers read). The switch holds at most one key per slot and
  iteration, so coverage[t] <= oracle_coverage[t].
- `expected_oracle_coverage[t]` (workloads that know their popularity: zipf): the share
  of t's updates on the `budget` most likely keys of iteration t (ZipfWorkload.hottest,
  drift included). This is the best any selection made before t's draws can do on average;
  the hindsight oracle above also profits from t's sampling noise (with ~600 updates per
  iteration, the top `budget` of t's own counts are partly keys that t happened to draw
  twice), so no online loop, nor the true distribution itself, reaches it: at the
  defaults the expected oracle is ~83% of it. The goal's "oracle" is this one.
- `coverage_mean`, `oracle_coverage_mean`, `expected_oracle_coverage_mean`: their means
  over the iterations; `coverage_ratio` = coverage_mean / oracle_coverage_mean and
  `coverage_ratio_expected` = coverage_mean / expected_oracle_coverage_mean.
- `coverage_ratio_by_epoch_offset` (a drift, and the expected oracle): how the hot set
  recovers after the popular head moves. Entry i pools the iterations i after an epoch
  start (epochs start after multiples of the drift's `every`; the first epoch, for which
  the warm-up's set is right, is left out): their coverage over their expected oracle.
  `bench.hotset_sim --epochs` gives the same for the simulated loops.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from contract.freqfile import frequency_meta, is_live
from controller.hot_keys import HotKeys
from controller.jobs import Jobs
from controller.online.estimators import CHANGE_WINDOW, ChangeRateEstimator
from controller.online.loop import HotSetTarget, OnlineController, StepReport
from controller.online.observation import Observation, RateSource
from controller.online.policy import MARGIN, MIN_RATE, Hysteresis
from controller.online.sources import CombinedSource, PSFrequencySource, SwitchHitsSource
from controller.online.switch_target import MirroredTarget, SwitchTarget
from controller.sketch import Sketch, SketchSource
from experiment.config import (
    JOB_ID,
    ExperimentError,
    HotSetMode,
    HotSetSource,
    RunConfig,
    freq_name,
    measured_stream_offset,
    say,
)
from experiment.model import workload_of
from experiment.results import PhaseResult, worker_rows
from experiment.schema import HotSetMove, OffloadHotSet
from hosts.stats import write_json
from hosts.workloads import DriftSpec, StreamOffset

if TYPE_CHECKING:  # the testbed imports Mininet; the coverage below is read without one
    from experiment.testbed import Testbed

# How often the loop looks at the PS's frequency files (a .live file's header: ~25 us, so
# about 1-2% of a core at this rate). A step reads iteration t once the PS has counted it,
# about when the workers start t+1, and its Write counts in t+1 only from when it lands, so
# every ms of polling delay is a ms of t+1 on the old set (docs/hotset.md, "Pacing: when a
# step's Write counts").
POLL_S = 0.002
STOP_WAIT_S = 30.0  # a step in flight (a P4Runtime write) gets this long to end
# The loop's thread runs at the lowest CPU priority: a controller runs on a CPU of its own, not
# on the cores of the switch it steers. Mininet starts each host in a session of its own, and
# with autogroup scheduling (/proc/sys/kernel/sched_autogroup_enabled) a thread's nice value
# only counts within its session: the loop yields to the switch process the runner started
# (on every packet's path, in the runner's session), not to the agents. SCHED_IDLE is not
# used: a thread preempted while it holds the interpreter lock would stall the runner's other
# threads until it ran again. A step takes ~4 ms of CPU (`python -m bench.loop_cpu`).
LOOP_NICE = 19
# The loop's policy is controller/online/'s defaults, which `hotagg-ctl hotkeys auto` shares,
# tuned with `python -m bench.hotset_sim` on this workload (Zipf 1.1 over 100,000 keys, 4
# workers x 256 draws) and scored against the expected oracle. Why each setting is what it is
# (docs/hotset.md; the batches behind each choice are in docs/results/):
# - ChangeRateEstimator (CHANGE_THRESHOLD nats over CHANGE_WINDOW steps): a key's rate is
#   the mean of its counts since its rate last changed. A drifting head changes a key's rate
#   at once and then holds it, so steady keys keep all their counts (the noise test can tell
#   keys near the boundary apart) and a key that enters or leaves is seen within a few steps.
# - Hot keys are counted by their presence per iteration (the segment's share, inverted once),
#   since a member's per-step count is too noisy to invert step by step.
# - MARGIN and CONFIDENCE: a swap needs 1.6x the weakest member's rate and 2 standard errors
#   of both rates (binomial for counted updates when the source knows the workers, a worker
#   pushing a key at most once an iteration; Poisson otherwise; Bernoulli for presence), so
#   that the set does not chase noise when nothing drifts.
# - MAX_CHANGES 32: a heavy drift replaces ~30 of the top ~100 keys in one epoch.
# - MIN_RATE 1.0: the warm-up's rule: a slot is collected every iteration, so a rarer key
#   costs the PS more control traffic than it saves.
# - A step every iteration (config.HOTSET_EVERY) from the PS's files alone (cold counts and
#   the hot keys' `collected` presence, PSFrequencySource(collected=True)): every update is
#   counted once, a step needs no switch read, and its only RPC is its one Write.


def freq_iterations(path: Path) -> int | None:
    """The `iterations=` of a PS frequency file (None before it exists)."""
    meta = frequency_meta(path)
    return int(meta["iterations"]) if meta and "iterations" in meta else None


def slowest(
    paths: Sequence[Path], iterations: Callable[[Path], int | None] = freq_iterations
) -> int | None:
    """The iteration every PS shard's frequency file has reached (None while one is not
    there yet)."""
    done = [iterations(p) for p in paths]
    return None if None in done else min(d for d in done if d is not None)


class OnlineLoop:
    """An OnlineController stepped in a daemon thread each time every PS frequency file
    has reached the next multiple of `every` iterations."""

    def __init__(
        self,
        controller: OnlineController,
        freq_paths: Sequence[Path],
        every: int,
        log_path: Path | None = None,
        log_file: IO[str] | None = None,
    ) -> None:
        self.controller, self.freq_paths, self.every = controller, list(freq_paths), every
        self.log_path, self.log_file = log_path, log_file
        self.error: BaseException | None = None
        self._seen: dict[Path, tuple[tuple[int, int, int], int | None]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hotset-online", daemon=True)

    def start(self) -> OnlineLoop:
        self._thread.start()
        return self

    def _reached(self) -> int | None:
        return slowest(self.freq_paths, self._iterations)

    def _iterations(self, path: Path) -> int | None:
        """freq_iterations(path); of a rewritten file, read again only when the PS renamed a
        new one into place (a stat per poll instead of opening the file: the loop polls
        every POLL_S). A .live file changes in place: its header is read each time."""
        if is_live(path):
            return freq_iterations(path)
        try:
            st = path.stat()
        except FileNotFoundError:
            return None
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        seen = self._seen.get(path)
        if seen is None or seen[0] != stamp:
            seen = self._seen[path] = (stamp, freq_iterations(path))
        return seen[1]

    def _run(self) -> None:
        next_at = self.every
        # Linux schedules threads one by one, so this lowers this thread only (elsewhere a
        # thread id is not a process id: leave it); not permitted: the loop runs as it did.
        if sys.platform == "linux":
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), LOOP_NICE)
        try:
            while not self._stop.wait(POLL_S):
                done = self._reached()
                if done is None or done < next_at:
                    continue
                self.controller.step()
                # the next multiple of `every`: a run steps at the same iterations whatever
                # the machine's timing (from `done + every`, a first look that came at
                # iteration 3 put every later step one iteration off too)
                next_at = (done // self.every + 1) * self.every
        except BaseException as e:  # reported by stop(), in the runner's thread
            self.error = e

    def stop(self, check: bool = True) -> list[StepReport]:
        """Stop the loop (a step in flight finishes first); with `check`, raise
        ExperimentError if it failed or does not stop. Safe to call twice."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(STOP_WAIT_S)
        if self.log_path is not None:
            write_json(self.log_path, {"steps": [r.as_dict() for r in self.controller.history]})
        if self.log_file is not None and not self._thread.is_alive():
            self.log_file.close()
        if check and self._thread.is_alive():
            raise ExperimentError(f"the online hot-set loop did not stop in {STOP_WAIT_S:g} s")
        if check and self.error is not None:
            e, self.error = self.error, None
            raise ExperimentError(f"the online hot-set loop failed: {e}") from e
        return list(self.controller.history)


class IterationSpan:
    """A source whose counts carry the iterations they span. The switch's counters do not
    know iterations; the PS's files, which pace the loop, do: each read is stamped with the
    iterations the slowest shard counted since the previous one, so rates are per iteration
    (as MIN_RATE means) whatever the source."""

    def __init__(self, source: RateSource, freq_paths: Sequence[Path]) -> None:
        self.source, self.freq_paths = source, list(freq_paths)
        self._last = 0

    def read(self) -> Observation:
        obs = self.source.read()
        now = slowest(self.freq_paths)
        if now is not None:
            obs.iteration, obs.iterations = now, max(now - self._last, 1)
            self._last = now
        return obs


def change_window(every: int) -> int:
    """The change test's window in steps of `every` iterations: CHANGE_WINDOW iterations,
    whatever the pace (CHANGE_WINDOW steps of one iteration each; 6 steps of 2)."""
    return max(1, round(CHANGE_WINDOW / every))


def sketch_threshold(every: int) -> int:
    """Updates in a step (`every` iterations) that get a cold key reported: what a key needs
    to replace a member at the minimum rate (MIN_RATE, and the MARGIN over it). With half
    of it (2 of a step's ~2,000 draws) the loop followed ~1,600 keys after two steps, and
    reading their cells took 0.7 s a step on the embedded switch (with protobuf's parse of
    the reply, before p4rt/wire.py decoded it)."""
    return max(1, math.ceil((1.0 + MARGIN) * MIN_RATE * every))


def online_loop_factory(
    bed: Testbed, switch: str, budget: int, every: int, source: str = HotSetSource.PS
) -> Callable[[Path], OnlineLoop]:
    """What run_phase calls once the workers go: the loop on `switch`'s session, with its
    files in the phase's directory. The job is read from the switch now, before the phase,
    so starting the loop costs the workers nothing. `source` "switch" measures with the
    switch alone (hit counters, and the cold-key sketch, which it turns on when the phase
    starts); the PS's files then only pace the loop."""
    if source not in tuple(HotSetSource):
        sources = ", ".join(HotSetSource)
        raise ExperimentError(f"hot set source {source!r}: one of {sources}")
    client = bed.clients[switch]
    hot_keys = HotKeys(client, bed.p4info)
    job = Jobs(client, bed.p4info).get(JOB_ID)
    shards = len(bed.topology.parameter_servers)
    # AGGREGATE=leaves: every leaf gets the same changes as the PS's switch
    mirrors: list[HotSetTarget] = []
    for leaf in bed.remote_leaves:
        leaf_client = bed.clients[leaf]
        leaf_keys = HotKeys(leaf_client, bed.p4info)
        mirrors.append(SwitchTarget(leaf_keys, Jobs(leaf_client, bed.p4info).get(JOB_ID)))

    def start(pdir: Path) -> OnlineLoop:
        freq = [pdir / freq_name(i, dynamic=True) for i in range(shards)]
        lines = open(pdir / "hotset.log", "w")  # noqa: SIM115 (closed by OnlineLoop.stop)

        def log(line: str) -> None:
            lines.write(line + "\n")
            lines.flush()

        rates: RateSource = PSFrequencySource(freq, collected=True)
        if source == HotSetSource.SWITCH:
            sketch = SketchSource(Sketch(client, bed.p4info), JOB_ID, sketch_threshold(every))
            hits = SwitchHitsSource(hot_keys, JOB_ID)
            rates = IterationSpan(CombinedSource([hits, sketch]), freq)
        target = SwitchTarget(hot_keys, job)
        controller = OnlineController(
            MirroredTarget(target, mirrors) if mirrors else target,
            rates,
            # controller/online/'s defaults, tuned as said at the top, over as many iterations
            ChangeRateEstimator(window=change_window(every)),
            Hysteresis(budget),
            log,
        )
        return OnlineLoop(controller, freq, every, pdir / "hotset.json", lines).start()

    return start


# --- coverage, after the run ---


def achieved_per_iteration(phase: PhaseResult, workers: int) -> dict[int, tuple[int, int]]:
    """iteration -> (entries the switch summed, entries pushed), from the workers' logs."""
    out: dict[int, list[int]] = {}
    for r in worker_rows(phase, workers):
        if r["kind"] != "push":
            continue
        cell = out.setdefault(int(r["iteration"]), [0, 0])
        cell[0] += int(r["mask"] or 0).bit_count()
        cell[1] += int(r["entries"])
    return {t: (a, n) for t, (a, n) in out.items()}


def oracle_per_iteration(
    workload: Any, workers: int, iterations: int, budget: int
) -> list[tuple[int, int]]:
    """Per iteration 1..iterations: (updates of its best `budget` keys, all its updates).
    Each worker pushes each key it pulled once (all workloads here), so a key's updates in
    t are the workers that drew it."""
    out = []
    for t in range(1, iterations + 1):
        counts: Counter[int] = Counter()
        for w in range(workers):
            counts.update(np.asarray(workload.pull_keys(w, t), dtype=np.uint64).tolist())
        best = sorted(counts.values(), reverse=True)[:budget]
        out.append((sum(best), sum(counts.values())))
    return out


def expected_oracle_per_iteration(
    workload: Any, workers: int, iterations: int, budget: int
) -> list[int] | None:
    """Per iteration 1..iterations: the updates of its `budget` most likely keys (module
    doc); None when the workload cannot name them (lr, trace)."""
    if not hasattr(workload, "hottest"):
        return None
    out = []
    for t in range(1, iterations + 1):
        best = set(np.asarray(workload.hottest(budget, t), dtype=np.uint64).tolist())
        n = 0
        for w in range(workers):
            keys = np.asarray(workload.pull_keys(w, t), dtype=np.uint64).tolist()
            n += sum(1 for k in keys if k in best)
        out.append(n)
    return out


def epoch_offset_sums(
    coverage: Sequence[float], expected: Sequence[float], every: int
) -> tuple[np.ndarray, np.ndarray]:
    """Coverage and expected oracle (per iteration, the first at index 0) summed by
    iteration since the last epoch start: epochs start after multiples of `every`, and the
    first epoch, for which the warm-up's set is right, is left out. bench.hotset_sim pools
    these over seeds."""
    got, best = np.zeros(every), np.zeros(every)
    for t in range(every + 1, len(coverage) + 1):
        got[(t - 1) % every] += coverage[t - 1]
        best[(t - 1) % every] += expected[t - 1]
    return got, best


def by_epoch_offset(
    coverage: Sequence[float], expected: Sequence[float], every: int
) -> list[float | None] | None:
    """coverage / expected pooled by iteration since the last epoch start (module doc:
    `coverage_ratio_by_epoch_offset`); None when no iteration is past the first epoch."""
    if len(coverage) <= every:
        return None
    got, best = epoch_offset_sums(coverage, expected, every)
    return [round(float(g / b), 6) if b else None for g, b in zip(got, best)]


def summarize(
    cfg: RunConfig,
    config: dict,
    phase: PhaseResult,
    budget: int,
    steps: Sequence[StepReport] = (),
) -> OffloadHotSet:
    """summary.json's `offload_hot_set` block (module doc)."""
    workload = workload_of(config)
    if offset := measured_stream_offset(cfg):
        workload = StreamOffset(workload, offset)
    oracle = oracle_per_iteration(workload, cfg.workers, cfg.iterations, budget)
    achieved = achieved_per_iteration(phase, cfg.workers)
    coverage, oracle_coverage, updates, in_switch = [], [], [], []
    for t, (best, total) in enumerate(oracle, 1):
        summed, pushed = achieved.get(t, (0, 0))
        coverage.append(round(summed / pushed, 6) if pushed else 0.0)
        oracle_coverage.append(round(best / total, 6) if total else 0.0)
        updates.append(total)
        in_switch.append(summed)
    c_mean = float(np.mean(coverage)) if coverage else 0.0
    o_mean = float(np.mean(oracle_coverage)) if oracle_coverage else 0.0
    expected = expected_oracle_per_iteration(workload, cfg.workers, cfg.iterations, budget)
    e_cov = e_mean = None
    if expected is not None:
        e_cov = [round(n / total, 6) if total else 0.0 for n, (_, total) in zip(expected, oracle)]
        e_mean = float(np.mean(e_cov)) if e_cov else 0.0
    drift = DriftSpec.parse(cfg.drift)
    recovery = None
    if e_cov is not None and drift is not None and drift.fraction:
        recovery = by_epoch_offset(coverage, e_cov, drift.every)
    moves: list[HotSetMove] = [
        {
            "step": s.step,
            "iteration": s.iteration,
            "added": len(s.added),
            "removed": len(s.removed),
            "hot": s.hot,
        }
        for s in steps
    ]
    return {
        "mode": str(cfg.hotset),
        "drift": cfg.drift,
        "budget": budget,
        "every": cfg.hotset_every if cfg.hotset == HotSetMode.DYNAMIC else None,
        "source": str(cfg.hotset_source) if cfg.hotset == HotSetMode.DYNAMIC else None,
        "coverage": coverage,
        "oracle_coverage": oracle_coverage,
        "updates": updates,  # per iteration, from the workload
        "summed": in_switch,  # per iteration, summed in the switch (the workers' logs)
        "coverage_mean": round(c_mean, 6),
        "oracle_coverage_mean": round(o_mean, 6),
        "coverage_ratio": round(c_mean / o_mean, 6) if o_mean else None,
        "expected_oracle_coverage": e_cov,
        "expected_oracle_coverage_mean": round(e_mean, 6) if e_mean is not None else None,
        "coverage_ratio_expected": round(c_mean / e_mean, 6) if e_mean else None,
        "coverage_ratio_by_epoch_offset": recovery,
        "moves": moves,
        "reselections": len(moves),
        "keys_moved": sum(m["added"] + m["removed"] for m in moves),
    }


def report_steps(steps: Sequence[StepReport]) -> None:
    added = sum(len(s.added) for s in steps)
    removed = sum(len(s.removed) for s in steps)
    say(
        f"online hot set: {len(steps)} re-selections, +{added} -{removed} keys (offload/hotset.log)"
    )
