"""Benchmarks that write JSON (`make bench`); nothing here asserts on time."""

from __future__ import annotations

import csv
import json
import sys
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
