"""The trace workload: replays a CSV of accesses.

Format: one row per access, `iteration,worker,key[,value]`. `iteration` counts from 1,
`worker` from 0, `key` is an integer < key space, `value` is a real number (the contribution,
converted to fixed point with contract.constants.to_fixed). Without a value column (or with
an empty value) the value is drawn from the seeded stream of that (worker, iteration), in row
order. A first row whose first field is not a number is a header; blank lines and lines
starting with '#' are skipped. Rows of one (worker, iteration) that repeat a key are summed.
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from contract.constants import INT32_MAX, INT32_MIN, to_fixed
from hosts.workloads.base import RunOption, Step, Workload, WorkloadName, register
from hosts.workloads.drift import DriftSpec
from hosts.workloads.seeded import VALUES_STREAM, WorkloadError, seeded_rng


@register
class TraceWorkload(Workload):
    """Replays a CSV trace (format in the module doc)."""

    name = WorkloadName.TRACE
    about = "a trace file"
    finite_stream = True  # the warm-up profiles its first iterations, the runs replay the rest
    run_options = (
        RunOption(
            "--trace",
            "TRACE",
            "trace CSV for --workload trace (format: hosts/workloads/trace.py)",
            metavar="CSV",
            needed=True,
        ),
    )

    def __init__(
        self,
        rows: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]],
        key_space: int,
        seed: int = 1,
        source: str = "",
    ) -> None:
        self._rows, self.key_space, self.seed, self.source = rows, key_space, seed, source
        self.iterations = max((t for _, t in rows), default=0)
        self.workers = max((w + 1 for w, _ in rows), default=0)

    @classmethod
    def add_arguments(cls, group: argparse._ArgumentGroup) -> None:
        group.add_argument("--trace", help="trace: CSV iteration,worker,key[,value]")

    @classmethod
    def from_args(cls, args: argparse.Namespace, drift: DriftSpec | None) -> TraceWorkload:
        if not args.trace:
            raise WorkloadError("--workload trace needs --trace FILE")
        return cls.from_csv(args.trace, args.keys, args.seed, args.value_range)

    @classmethod
    def config_words(
        cls, config: Mapping[str, Any], defaults: Mapping[str, Any]
    ) -> tuple[str, str]:
        args = list(config.get("extra_workload_args") or [])
        trace = args[args.index("--trace") + 1] if "--trace" in args[:-1] else None
        shown = Path(trace).name if trace else "?"
        return f"trace workload ({shown}, {config['keys']} keys)", f"trace {shown}"

    def check_run(self, run: Mapping[str, Any]) -> list[str]:
        """The warm-up reads the trace's first WARMUP iterations and the measured phases the
        ones after them, so the trace needs both; workers beyond the run's are left out."""
        warmup, iterations, workers = run["warmup"], run["iterations"], run["workers"]
        if self.iterations < warmup + iterations:
            raise WorkloadError(
                f"TRACE={self.source} has {self.iterations} iterations; the warm-up ({warmup})"
                f" and ITERATIONS={iterations} need {warmup + iterations}, since "
                "the hot set is learnt from iterations that are then not measured"
            )
        if self.workers > workers:
            return [
                f"TRACE={self.source} has {self.workers} workers; "
                f"only the first WORKERS={workers} run"
            ]
        return []

    @classmethod
    def from_csv(
        cls,
        path: str | Path,
        key_space: int | None = None,
        seed: int = 1,
        value_range: float = 0.01,
    ) -> TraceWorkload:
        vmax = to_fixed(value_range)
        groups: dict[tuple[int, int], list[tuple[int, float | None]]] = defaultdict(list)
        try:
            with open(path, newline="") as f:
                for lineno, row in enumerate(csv.reader(f), 1):
                    if not row or not row[0].strip() or row[0].lstrip().startswith("#"):
                        continue
                    if lineno == 1 and not row[0].strip().isdigit():
                        continue  # header
                    if len(row) not in (3, 4):
                        raise WorkloadError(
                            f"{path}:{lineno}: expected iteration,worker,key[,value]"
                        )
                    try:
                        t, w, k = int(row[0]), int(row[1]), int(row[2])
                        v = float(row[3]) if len(row) == 4 and row[3].strip() else None
                    except ValueError as exc:
                        raise WorkloadError(f"{path}:{lineno}: {exc}") from None
                    if t < 1 or w < 0 or k < 0 or (key_space is not None and k >= key_space):
                        raise WorkloadError(
                            f"{path}:{lineno}: iteration >= 1, worker >= 0, "
                            f"0 <= key < key space ({key_space}) required"
                        )
                    groups[(w, t)].append((k, v))
        except OSError as exc:
            raise WorkloadError(f"cannot read trace {path}: {exc.strerror}") from None
        space = key_space or 1 + max((k for g in groups.values() for k, _ in g), default=0)
        rows = {}
        for (w, t), items in groups.items():
            draws = seeded_rng(seed, VALUES_STREAM, w, t).integers(
                -vmax, vmax, size=len(items), endpoint=True
            )
            sums: dict[int, int] = defaultdict(int)
            for (k, v), d in zip(items, draws):
                sums[k] += int(d) if v is None else to_fixed(v)
            keys = np.array(sorted(sums), dtype=np.uint64)
            vals = np.array([sums[int(k)] for k in keys], dtype=np.int64)
            if vals.size and (vals.min() < INT32_MIN or vals.max() > INT32_MAX):
                raise WorkloadError(
                    f"{path}: summed values of worker {w} iteration {t} overflow int32"
                )
            rows[(w, t)] = (keys, vals.astype(np.int32))
        return cls(rows, space, seed, str(path))

    def pull_keys(self, worker: int, iteration: int) -> np.ndarray:
        return self._rows.get((worker, iteration), (np.zeros(0, np.uint64),))[0]

    def step(self, worker: int, iteration: int, keys: np.ndarray, pulled: np.ndarray) -> Step:
        k, v = self._rows.get((worker, iteration), (np.zeros(0, np.uint64), np.zeros(0, np.int32)))
        return Step(k, v)

    def describe(self) -> dict[str, Any]:
        return {
            "workload": "trace",
            "trace": self.source,
            "keys": self.key_space,
            "seed": self.seed,
            "iterations": self.iterations,
            "workers": self.workers,
        }
