"""What a phase leaves: its PhaseResult, and readers of its agents' logs (the workers'
w<i>.csv and the PS shards' ps<i>.csv, hosts/worker.py and hosts/ps.py LOG_COLUMNS)."""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class PhaseResult:
    name: str
    dir: Path
    seconds: float
    worker_summaries: list[dict]
    ps_summaries: list[dict]
    switch_stats: dict[str, dict[str, int]]  # switch -> stat name -> packets
    fidelity: dict[str, Any] = field(default_factory=dict)  # experiment.fidelity.verdict
    hotset_steps: list[Any] = field(default_factory=list)  # the online loop's StepReports


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def logs(phase: PhaseResult, prefix: str, n: int, column: str) -> list[dict[str, str]]:
    """The rows of `<prefix>0.csv` .. `<prefix>{n-1}.csv`, each tagged with its file's index."""
    rows = []
    for i in range(n):
        for r in read_csv(phase.dir / f"{prefix}{i}.csv"):
            r[column] = str(i)
            rows.append(r)
    return rows


def worker_rows(phase: PhaseResult, workers: int) -> list[dict[str, str]]:
    return logs(phase, "w", workers, "worker")


def ps_rows(phase: PhaseResult, shards: int) -> list[dict[str, str]]:
    return logs(phase, "ps", shards, "shard")
