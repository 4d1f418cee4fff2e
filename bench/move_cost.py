"""Where a dynamic run's extra iteration time goes, iteration by iteration, written as JSON.

A static and a dynamic run of one seed draw the same keys in every iteration
(`make run HOTSET=static` and `HOTSET=dynamic`, same `SEED`, `DRIFT` and the rest), so
their iterations can be compared one by one. Each iteration of the pair is put in a class
by where it stands to the dynamic run's re-selections that moved keys
(`offload/hotset.json`: a step reads the PS's counts up to iteration t and its Write lands
while t+1 runs):
- `landing`: t+1 of a step that moved keys, the iteration its Write lands in;
- `after`: t+2, the first iteration the new hot set is in force all through;
- `quiet`: every other iteration (steps that moved nothing included).

Per class: the mean difference, dynamic minus static, of the job's iteration time (first
worker's start to last worker's end) and its parts (pulls: to the last pull's reply; pushes:
to the last push's reply; barrier: to the last DONE_ACK), and of the requests the PS
answered and the WRITEBACKs it sent in the iteration's barrier, and the median difference
of the times (a run the host disturbed moves the means of all three classes). So a cost
that comes with the moves shows in `landing` and `after` against `quiet`, and one the loop
pays all the time (its CPU, its reads) in `quiet`.

    .venv/bin/python -m bench.move_cost runs/<static> runs/<dynamic> [more pairs ...] \\
        --out bench/results/move_cost.json

Pairs are checked to be one seed and configuration apart only in the hot-set mode.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench import emit_or_fail, iteration_cells

CLASSES = ("landing", "after", "quiet")
PARTS = (
    "iteration_ms",
    "pulls_ms",
    "pushes_ms",
    "barrier_ms",
    "ps_pulls",
    "ps_pushes",
    "writebacks",
)
TIMES = PARTS[:4]
# config.json fields that may differ within a pair: the mode, each run's own ids, ports
# and paths, and what a run measured (initial_rto_ms from the warm-up's round trip, the
# bandwidth BW=auto chose)
RUN_FIELDS = {
    "hotset",
    "run_id",
    "runs_dir",
    "intf_prefix",
    "grpc_ports",
    "grpc_base_port",
    "topo",
    "keep",
    "initial_rto_ms",
    "bw_auto",
    "link_bandwidth_mbps",
}


class PairError(ValueError):
    """Two runs that cannot be compared iteration by iteration."""


def iterations(run: Path) -> dict[int, dict[str, float]]:
    """Per iteration of the run's offload phase: its parts (PARTS) from the agents' logs."""
    phase = run / "offload"
    times = iteration_cells(run)
    writebacks: dict[int, int] = defaultdict(int)
    for ps in sorted(phase.glob("ps*.csv")):
        with open(ps, newline="") as f:
            for row in csv.DictReader(f):
                # tagged t+1, sent in t's barrier; one never answered has no iteration in
                # the log (the PS gave up on it), so it cannot be placed
                if row["op"] == "WRITEBACK" and row["iteration"]:
                    writebacks[int(row["iteration"]) - 1] += 1
    out = {}
    for t, cell in times.items():
        if not cell["start"] or not cell["end"]:
            continue
        start, end = min(cell["start"]), max(cell["end"])
        pulled = max(cell["pull"], default=start)
        pushed = max(cell["push"], default=pulled)
        out[t] = {
            "iteration_ms": 1e3 * (end - start),
            "pulls_ms": 1e3 * (pulled - start),
            "pushes_ms": 1e3 * (pushed - pulled),
            "barrier_ms": 1e3 * (end - pushed),
            "ps_pulls": len(cell["ps_pulls"]),
            "ps_pushes": len(cell["ps_pushes"]),
            "writebacks": writebacks.get(t, 0),
        }
    return out


def classes(run: Path) -> dict[int, str]:
    """iteration -> `landing` or `after` for the iterations after steps that moved keys."""
    steps = json.loads((run / "offload" / "hotset.json").read_text())["steps"]
    out: dict[int, str] = {}
    for step in steps:
        if step["iteration"] is not None and (step["added"] or step["removed"]):
            out[step["iteration"] + 1] = "landing"
            out.setdefault(step["iteration"] + 2, "after")
    return out


def check_pair(static: Path, dynamic: Path) -> tuple[dict, dict]:
    a, b = (json.loads((r / "config.json").read_text()) for r in (static, dynamic))
    if a.get("hotset") != "static" or b.get("hotset") != "dynamic":
        raise PairError(f"{static} must be a static run and {dynamic} a dynamic one")
    differ = sorted(k for k in set(a) | set(b) if k not in RUN_FIELDS and a.get(k) != b.get(k))
    if differ:
        raise PairError(f"{static} and {dynamic} differ in {', '.join(differ)}")
    if not (dynamic / "offload" / "hotset.json").exists():
        raise PairError(f"{dynamic} has no offload/hotset.json")
    return a, b


def compare(pairs: list[tuple[Path, Path]]) -> dict[str, Any]:
    diffs: dict[str, dict[str, list[float]]] = {c: defaultdict(list) for c in CLASSES}
    runs = []
    for static, dynamic in pairs:
        cfg, _ = check_pair(static, dynamic)
        a, b, cls = iterations(static), iterations(dynamic), classes(dynamic)
        common = sorted(set(a) & set(b))
        for t in common:
            for part in PARTS:
                diffs[cls.get(t, "quiet")][part].append(b[t][part] - a[t][part])
        runs.append(
            {
                "static": str(static),
                "dynamic": str(dynamic),
                "seed": cfg.get("seed"),
                "drift": cfg.get("drift"),
                "iteration_ms_median": {
                    "static": round(statistics.median(a[t]["iteration_ms"] for t in common), 3),
                    "dynamic": round(statistics.median(b[t]["iteration_ms"] for t in common), 3),
                },
                "iterations": {
                    c: sum(1 for t in common if cls.get(t, "quiet") == c) for c in CLASSES
                },
            }
        )
    by_class = {
        c: {"iterations": len(d["iteration_ms"])}
        | {f"{p}_diff_mean": round(statistics.fmean(d[p]), 3) for p in PARTS if d[p]}
        | {f"{p}_diff_median": round(statistics.median(d[p]), 3) for p in TIMES if d[p]}
        for c, d in diffs.items()
    }
    total = sum(len(d["iteration_ms"]) for d in diffs.values())
    share = {c: round(sum(diffs[c]["iteration_ms"]) / total, 3) if total else None for c in CLASSES}
    return {"runs": runs, "by_class": by_class, "iteration_ms_diff_per_iteration": share}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", type=Path, help="run directories: static, dynamic, ...")
    p.add_argument("--out", type=Path, help="write the JSON here too")
    args = p.parse_args(argv)
    if len(args.runs) % 2:
        p.error("give the runs in pairs: static, dynamic, static, dynamic, ...")
    pairs = list(zip(args.runs[::2], args.runs[1::2]))
    return emit_or_fail("move_cost", lambda: compare(pairs), args.out)


if __name__ == "__main__":
    sys.exit(main())
