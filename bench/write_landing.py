"""When a dynamic run's re-selections take effect: where each step begins and where its
Write lands within the iteration after the one it counted, written as JSON.

A step reads the PS's counts up to iteration t and writes its changes while t+1 runs
(`offload/hotset.json`: `iteration` t, `started` on the agents' clock, `seconds` to the
Write's reply, `write_seconds` the Write's own). A key that enters is summed by the switch
only in pushes sent after the Write lands, so how much of t+1 the new set covers depends on
where in t+1 it lands: the simulator's lag 1 (bench/hotset_sim.py) is a Write that lands
after t+1's pushes, its lag 0 one that lands before them. Per run, over the steps that
moved keys (t+1 from the workers' logs: its first worker's start to its last worker's end):
- `start` and `landed`: the step's start and its Write's reply as fractions of t+1 (0 its
  start, 1 its end; above 1: in t+2 or later), median and 90th percentile;
- `before_pushes`: the share of Writes that landed before t+1's first push was sent (in
  force for all of t+1's pushes), `before_end` before t+1 ended;
- `step_ms`, `write_ms`: the steps' wall-clock time and their Writes', median.

    .venv/bin/python -m bench.write_landing runs/<dynamic> [more runs ...] \\
        --out bench/results/write_landing.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

from bench import emit_or_fail, iteration_cells


class RunError(ValueError):
    """A run this cannot read: not a dynamic run, or one from before steps were timed."""


def iteration_times(run: Path) -> dict[int, tuple[float, float, float]]:
    """Per iteration of the offload phase: (first worker's start, first push sent, last
    worker's end), on the agents' clock."""
    out = {}
    for t, cell in iteration_cells(run).items():
        if cell["start"] and cell["end"]:
            start, end = min(cell["start"]), max(cell["end"])
            out[t] = (start, min(cell["push_sent"], default=end), end)
    return out


def landing(run: Path) -> dict[str, Any]:
    path = run / "offload" / "hotset.json"
    if not path.exists():
        raise RunError(f"{run}: no offload/hotset.json (not a HOTSET=dynamic run)")
    steps = json.loads(path.read_text())["steps"]
    if steps and steps[0].get("started") is None:
        raise RunError(f"{run}: its steps have no start times (a run from before they were kept)")
    times = iteration_times(run)
    start, landed, pushes, ends, step_ms, write_ms = [], [], [], [], [], []
    for step in steps:
        t = step["iteration"]
        if t is None or not (step["added"] or step["removed"]) or t + 1 not in times:
            continue
        begin, first_push, end = times[t + 1]
        span = end - begin
        if span <= 0:
            continue
        done = step["started"] + step["seconds"]
        start.append((step["started"] - begin) / span)
        landed.append((done - begin) / span)
        pushes.append(done < first_push)
        ends.append(done < end)
        step_ms.append(1e3 * step["seconds"])
        write_ms.append(1e3 * step["write_seconds"])
    if not landed:
        return {"run": str(run), "steps": 0}

    def quantiles(values: list[float]) -> dict[str, float]:
        return {
            "median": round(statistics.median(values), 3),
            "p90": round(float(np.percentile(values, 90)), 3),
        }

    return {
        "run": str(run),
        "steps": len(landed),
        "start": quantiles(start),
        "landed": quantiles(landed),
        "before_pushes": round(sum(pushes) / len(pushes), 3),
        "before_end": round(sum(ends) / len(ends), 3),
        "step_ms": round(statistics.median(step_ms), 2),
        "write_ms": round(statistics.median(write_ms), 2),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", type=Path, help="runs/<id> of HOTSET=dynamic runs")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    return emit_or_fail("write_landing", lambda: [landing(r) for r in args.runs], args.out)


if __name__ == "__main__":
    sys.exit(main())
