"""Benchmarks that write JSON (`make bench`); nothing here asserts on time."""

from __future__ import annotations

import csv
import json
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


def emit(result: Any, out: Path | None) -> None:
    """Print `result` as JSON, and write it to `out` too when one is given."""
    text = json.dumps(result, indent=2)
    print(text)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")


def emit_or_fail(
    name: str,
    compute: Callable[[], Any],
    out: Path | None,
    errors: tuple[type[Exception], ...] = (OSError, KeyError, ValueError),
) -> int:
    """A bench command's end: its result as JSON (emit), or one line on stderr and exit
    code 2 when the runs it was given cannot be read."""
    try:
        result = compute()
    except errors as e:
        print(f"{name}: {e}", file=sys.stderr)
        return 2
    emit(result, out)
    return 0


def worker_rows(run: Path, phase: str = "offload") -> Iterator[dict[str, str]]:
    """Every row of a run's workers' logs in one phase (hosts/worker.py LOG_COLUMNS)."""
    workers = json.loads((run / "config.json").read_text())["workers"]
    for w in range(workers):
        with open(run / phase / f"w{w}.csv", newline="") as f:
            yield from csv.DictReader(f)


def iteration_cells(run: Path, phase: str = "offload") -> dict[int, dict[str, list[float]]]:
    """Per iteration, from every worker's log (the agents' clock): `start` and `end` of
    each worker's iteration, `pull` and `push` (each request's reply), `push_sent` (each
    push's send), and one 1.0 in `ps_pulls` or `ps_pushes` per request the PS answered."""
    cells: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in worker_rows(run, phase):
        cell, kind = cells[int(row["iteration"])], row["kind"]
        if kind == "iteration":
            cell["start"].append(float(row["sent"]))
            cell["end"].append(float(row["reply"]))
        elif kind in ("pull", "push"):
            cell[kind].append(float(row["reply"]))
            if kind == "push":
                cell["push_sent"].append(float(row["sent"]))
            if row["from_switch"] != "1":
                cell["ps_pulls" if kind == "pull" else "ps_pushes"].append(1.0)
    return cells
