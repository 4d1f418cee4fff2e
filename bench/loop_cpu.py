"""What a step of the online hot-set loop costs in CPU, part by part, on the run's workload.

`make run HOTSET=dynamic` runs the loop in a thread of the runner, on the same cores as the
agents and the switch (experiment/hotset.py), so its CPU is what it can cost them. This
replays the run's workload (Zipf 1.1 over 100,000 keys, 4 workers x 256 draws per iteration)
into a PS `.live` frequency file, as the PS counts it (a hot key's `collected` once per
iteration in which any worker pushed it, a cold key's updates each), and steps the loop
(controller/online/'s defaults, which the run uses) every `--every` iterations, with an
in-memory hot set in place of the switch: 100 slots, starting with the 100 most likely keys
(the run's warm-up picks 88-108 from its counts). Each
part is the loop thread's CPU time (time.thread_time):
- read: PSFrequencySource.read, the `.live` counters that moved since the last step;
- estimate: ChangeRateEstimator.update, rates and the change test over every known key;
- choose: the candidates and Hysteresis.choose;
- step: the whole OnlineController.step (the three and the step's report).
The switch's Write is not in it (bench/online_step.py measures that).

    .venv/bin/python -m bench.loop_cpu --out bench/results/loop_cpu.json

The machine is shared: compare numbers from one run, not across runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from experiment.config import HOTSET_EVERY


class Timed:
    """`inner` with the CPU time of some of its methods added to `spent[label]`."""

    def __init__(self, inner: Any, spent: dict[str, float], **labels: str) -> None:
        self._inner, self._spent, self._labels = inner, spent, labels

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        label = self._labels.get(name)
        if label is None:
            return attr

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.thread_time()
            try:
                return attr(*args, **kwargs)
            finally:
                self._spent[label] += time.thread_time() - start

        return timed


def replay(drift: str | None, seed: int, iterations: int, every: int) -> dict[str, object]:
    """Step the loop over one replayed run; per-step CPU by part (ms) and the table's size."""
    from bench.hotset_sim import SimTarget
    from contract.freqfile import LiveFrequency
    from controller.online.estimators import ChangeRateEstimator
    from controller.online.loop import OnlineController
    from controller.online.policy import Changes, Hysteresis
    from controller.online.sources import PSFrequencySource
    from experiment.hotset import change_window
    from hosts.workloads import DriftSpec, ZipfWorkload

    workers, budget = 4, 100
    workload = ZipfWorkload(100_000, 1.1, 256, seed=seed, drift=DriftSpec.parse(drift))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "shard0.live"
        live = LiveFrequency(path, 100_000, {"job": 1, "shard": 0, "workers": workers})
        target = SimTarget(set(workload.hottest(budget, 1).tolist()))
        spent: dict[str, float] = defaultdict(float)
        estimator = ChangeRateEstimator(window=change_window(every))
        policy = Hysteresis(budget)
        loop = OnlineController(
            target,
            Timed(PSFrequencySource([path], collected=True), spent, read="read"),
            Timed(estimator, spent, update="estimate", keys_at_least="choose"),
            Timed(policy, spent, choose="choose"),
        )
        per_step: dict[str, list[float]] = defaultdict(list)
        for t in range(1, iterations + 1):
            live.begin(t)
            drawn = np.concatenate([workload.pull_keys(w, t) for w in range(workers)])
            hot = np.fromiter((k in target.keys for k in drawn.tolist()), bool, len(drawn))
            np.add.at(live.cold, drawn[~hot], 1)
            np.add.at(live.collected, np.unique(drawn[hot]), 1)  # once per iteration
            live.done(t)
            if t % every:
                continue
            spent.clear()
            start = time.thread_time()
            report = loop.step()
            per_step["step"].append(time.thread_time() - start)
            target.land(Changes(report.added, report.removed))  # in force from t+1
            for part in ("read", "estimate", "choose"):
                per_step[part].append(spent[part])
    ms = {
        part: {
            "mean": round(statistics.fmean(v) * 1e3, 3),
            "median": round(statistics.median(v) * 1e3, 3),
        }
        for part, v in per_step.items()
    }
    moved = sum(len(r.added) + len(r.removed) for r in loop.history)  # as the run counts
    return {"cpu_ms": ms, "rows": len(estimator.rates), "keys_moved": moved}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--drift",
        action="append",
        help="a DRIFT, or none; repeat for more (default: none, then every=10,fraction=0.2)",
    )
    p.add_argument("--seeds", default="4,5")
    p.add_argument("--iterations", type=int, default=100)
    p.add_argument(
        "--every",
        type=int,
        default=HOTSET_EVERY["ps"],
        help="iterations between steps (default: make run's)",
    )
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    drifts = [None if d == "none" else d for d in args.drift or ("none", "every=10,fraction=0.2")]
    runs = []
    for drift in drifts:
        for seed in (int(s) for s in args.seeds.split(",")):
            run = {"drift": drift, "seed": seed} | replay(drift, seed, args.iterations, args.every)
            mean = {part: v["mean"] for part, v in run["cpu_ms"].items()}
            print(
                f"drift {drift or 'none'} seed {seed}: step {mean['step']:.2f} ms CPU "
                f"(read {mean['read']:.2f}, estimate {mean['estimate']:.2f}, "
                f"choose {mean['choose']:.2f}), {run['rows']} keys known",
                flush=True,
            )
            runs.append(run)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        config = vars(args) | {"out": str(args.out), "drift": drifts}
        args.out.write_text(json.dumps({"config": config, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
