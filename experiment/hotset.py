"""HOTSET=dynamic and the hot set's coverage (issue 10 item 5).

Dynamic mode: during the offload phase the runner runs the controller's online loop
(controller/online.py, the library behind `hotagg-ctl hotkeys auto`) in a thread of its own
process, on its P4Runtime session with the aggregating switch. The loop reads the hot-key
tables' hit counters and the PS shards' frequency files, which the PS rewrites every
`every` iterations (`hosts.ps --freq-every`), and re-selects once per rewrite, so its pace
follows the iterations, not the machine's speed. The budget is the job's slot count (the
warm-up's set picks it and the initial keys, as in static mode), so both modes have the same
slots and differ only in which keys hold them. It stops when the workers are done (before
the phase's counters are read) or when the phase fails; the thread is a daemon, so it never
outlives the run.

Nothing else changes for the agents (docs/design.md section 4): the workers' and the PS's
`--hot-keys` is only the initial set; workers learn later moves from PUSH_ACK and
PULL_REPLY masks, the PS from the sums it collects (every offset, whichever key is there).

Coverage (summary.json `hotset`, README "Hot set: static or dynamic"), per measured
iteration t of the offload phase:
- `coverage[t]`: the share of t's updates (push entries) that the switch summed: the set
  bits of the PUSH_ACK masks in the workers' logs over the entries they pushed in t. It is
  what the hot set in force achieved, including its misses while keys move.
- `oracle_coverage[t]`: the share the best `budget` keys of iteration t would have had:
  their updates in t over all of t's updates, counted from the workload itself (the same
  seeded stream the workers read). The switch holds at most one key per slot and
  iteration, so coverage[t] <= oracle_coverage[t].
- `coverage_mean`, `oracle_coverage_mean`: their means over the iterations;
  `coverage_ratio` = coverage_mean / oracle_coverage_mean.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from controller.online import (
    CombinedSource,
    Hysteresis,
    OnlineController,
    PSFrequencySource,
    RateEstimator,
    StepReport,
    SwitchHitsSource,
    SwitchTarget,
)
from experiment.runner import ExperimentError, PhaseResult, RunConfig, say
from hosts.stats import FREQ_MAGIC, write_json

MODES = ("static", "dynamic")
DEFAULT_EVERY = 2  # iterations between re-selections (the PS's --freq-every)
POLL_S = 0.02  # how often the loop looks at the PS's frequency files
STOP_WAIT_S = 30.0  # a step in flight (P4Runtime reads and writes) gets this long to end
# The loop's policy (controller/online.py): hits count a hot key's pull and push, hence 0.5;
# a candidate must beat the weakest member by 20%; at most 16 keys enter per re-selection.
HITS_WEIGHT, DECAY, MARGIN, MAX_CHANGES, MIN_RATE = 0.5, 0.5, 0.2, 16, 1.0


def freq_iterations(path: Path) -> int | None:
    """The `iterations=` of a PS frequency file's first line (None before it exists)."""
    try:
        with open(path) as f:
            first = f.readline()
    except FileNotFoundError:
        return None
    if not first.startswith(FREQ_MAGIC):
        return None  # only whole files are renamed into place; this is not one
    for item in first[len(FREQ_MAGIC) :].split():
        name, _, value = item.partition("=")
        if name == "iterations":
            return int(value)
    return None


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
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hotset-online", daemon=True)

    def start(self) -> OnlineLoop:
        self._thread.start()
        return self

    def _reached(self) -> int | None:
        done = [freq_iterations(p) for p in self.freq_paths]
        return None if None in done else min(d for d in done if d is not None)

    def _run(self) -> None:
        next_at = self.every
        try:
            while not self._stop.wait(POLL_S):
                done = self._reached()
                if done is None or done < next_at:
                    continue
                self.controller.step()
                next_at = done + self.every
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


def online_loop_factory(
    exp: Any, switch: str, budget: int, every: int
) -> Callable[[Path], OnlineLoop]:
    """What run_phase calls once the workers go: the loop on `switch`'s session, with its
    files in the phase's directory. The job is read from the switch now, before the phase,
    so starting the loop costs the workers nothing."""
    from controller.hot_keys import HotKeys
    from controller.jobs import Jobs
    from experiment.runner import JOB_ID

    client = exp.clients[switch]
    hot_keys = HotKeys(client, exp.p4info)
    job = Jobs(client, exp.p4info).get(JOB_ID)
    shards = len(exp.topology.parameter_servers)

    def start(pdir: Path) -> OnlineLoop:
        freq = [pdir / f"freq{i}.csv" for i in range(shards)]
        lines = open(pdir / "hotset.log", "w")  # noqa: SIM115 (closed by OnlineLoop.stop)

        def log(line: str) -> None:
            lines.write(line + "\n")
            lines.flush()

        hits = SwitchHitsSource(hot_keys, JOB_ID, HITS_WEIGHT)
        controller = OnlineController(
            SwitchTarget(hot_keys, job),
            CombinedSource([hits, PSFrequencySource(freq)]),
            RateEstimator(DECAY),
            Hysteresis(budget, MARGIN, MAX_CHANGES, MIN_RATE),
            log,
        )
        return OnlineLoop(controller, freq, every, pdir / "hotset.json", lines).start()

    return start


# --- coverage, after the run ---


def achieved_per_iteration(phase: PhaseResult, workers: int) -> dict[int, tuple[int, int]]:
    """iteration -> (entries the switch summed, entries pushed), from the workers' logs."""
    from experiment.report import worker_rows

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


def summarize(
    cfg: RunConfig,
    config: dict,
    phase: PhaseResult,
    budget: int,
    steps: Sequence[StepReport] = (),
) -> dict:
    """summary.json's `hotset` block (module doc)."""
    from experiment.model import workload_of
    from experiment.runner import measured_stream_offset
    from hosts.workloads import StreamOffset

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
    moves = [
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
        "mode": cfg.hotset,
        "drift": cfg.drift,
        "budget": budget,
        "every": cfg.hotset_every if cfg.hotset == "dynamic" else None,
        "coverage": coverage,
        "oracle_coverage": oracle_coverage,
        "updates": updates,  # per iteration, from the workload
        "summed": in_switch,  # per iteration, summed in the switch (the workers' logs)
        "coverage_mean": round(c_mean, 6),
        "oracle_coverage_mean": round(o_mean, 6),
        "coverage_ratio": round(c_mean / o_mean, 6) if o_mean else None,
        "moves": moves,
        "reselections": len(moves),
        "keys_moved": sum(m["added"] + m["removed"] for m in moves),
    }


def table_line(hotset: dict) -> str:
    """The comparison table's one coverage line."""
    drift = f", drift {hotset['drift']}" if hotset.get("drift") else ""
    ratio = hotset.get("coverage_ratio")
    text = (
        f"  hot set ({hotset['mode']}{drift}): coverage {100 * hotset['coverage_mean']:.1f}% "
        f"of updates, oracle top-{hotset['budget']} {100 * hotset['oracle_coverage_mean']:.1f}%"
        + (f" ({100 * ratio:.0f}% of it)" if ratio is not None else "")
    )
    if hotset["mode"] == "dynamic":
        text += f"; {hotset['keys_moved']} keys moved in {hotset['reselections']} re-selections"
    return text


def report_steps(steps: Sequence[StepReport]) -> None:
    added = sum(len(s.added) for s in steps)
    removed = sum(len(s.removed) for s in steps)
    say(
        f"online hot set: {len(steps)} re-selections, +{added} -{removed} keys (offload/hotset.log)"
    )
