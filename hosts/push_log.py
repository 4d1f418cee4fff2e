"""What a worker pushed, raw: the keys and int32 values of each iteration's update, once per
update (a resent PUSH is the same update), for the conservation check
(experiment/conservation.py: every pushed update is applied exactly once).

The file (`w<id>.pushes.npz`, numpy's uncompressed .npz) holds:
- `format` (PUSH_LOG_FORMAT), `job_id`, `worker_id`;
- `iterations_planned`: the worker's --iterations; `complete`: it pushed and finished all;
- `iterations` (int32) and `counts` (int64): per recorded update, its iteration and entries;
- `keys` (uint64) and `values` (int32): every update's entries, in iteration order.

It is written once, when the worker ends (finished or not), to a temporary name first, so a
reader finds either the whole file or none.
"""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

PUSH_LOG_FORMAT = 1
PUSH_LOG_SUFFIX = ".pushes.npz"


class PushLogError(ValueError):
    """A push log that is missing, cut short or not one (the message names the file)."""


class PushLog:
    """A worker's pushes, kept in memory and written at the end; `path` None records
    nothing."""

    def __init__(
        self, path: str | Path | None, job_id: int, worker_id: int, iterations: int
    ) -> None:
        self.path = None if path is None else Path(path)
        self.job_id, self.worker_id, self.iterations_planned = job_id, worker_id, iterations
        self._iterations: list[int] = []
        self._keys: list[np.ndarray] = []
        self._values: list[np.ndarray] = []
        self._written = False

    def record(self, iteration: int, keys: np.ndarray, values: np.ndarray) -> None:
        """Iteration `iteration`'s update, as the worker is about to push it (copied: the
        caller's arrays may be the workload's and change later)."""
        if self.path is None:
            return
        self._iterations.append(iteration)
        self._keys.append(np.array(keys, dtype=np.uint64))
        self._values.append(np.array(values, dtype=np.int32))

    def close(self, complete: bool) -> None:
        """Write the file (once: a later call does nothing)."""
        if self.path is None or self._written:
            return
        self._written = True
        empty_keys, empty_values = np.zeros(0, np.uint64), np.zeros(0, np.int32)
        arrays = {
            "format": np.int64(PUSH_LOG_FORMAT),
            "job_id": np.int64(self.job_id),
            "worker_id": np.int64(self.worker_id),
            "iterations_planned": np.int64(self.iterations_planned),
            "complete": np.bool_(complete),
            "iterations": np.array(self._iterations, dtype=np.int32),
            "counts": np.array([len(k) for k in self._keys], dtype=np.int64),
            "keys": np.concatenate(self._keys) if self._keys else empty_keys,
            "values": np.concatenate(self._values) if self._values else empty_values,
        }
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, self.path)


@dataclass(frozen=True)
class Pushes:
    """One worker's push log, read back."""

    path: Path
    job_id: int
    worker_id: int
    iterations_planned: int
    complete: bool
    iterations: np.ndarray  # per update: its iteration
    counts: np.ndarray  # per update: its entries
    keys: np.ndarray  # every entry's key (uint64)
    values: np.ndarray  # every entry's value (int32)

    @property
    def entry_iterations(self) -> np.ndarray:
        """Each entry's iteration."""
        return np.repeat(self.iterations, self.counts)

    def shortfall(self) -> str | None:
        """Why the log does not hold the worker's whole run, or None if it does."""
        done = len(np.unique(self.iterations))
        if self.complete and done == self.iterations_planned:
            return None
        return (
            f"{self.path.name} holds {done} of {self.iterations_planned} iterations (the worker "
            "did not finish)"
        )


def push_log_path(directory: Path, worker: int) -> Path:
    """Worker `worker`'s push log in its phase's folder."""
    return directory / f"w{worker}{PUSH_LOG_SUFFIX}"


def load_pushes(path: Path) -> Pushes:
    """A push log; PushLogError if it is missing, cut short or inconsistent."""
    if not path.exists():
        raise PushLogError(f"{path.name} is missing")
    try:
        with np.load(path, allow_pickle=False) as data:
            fields = {name: data[name] for name in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise PushLogError(f"{path.name} cannot be read ({exc})") from None
    need = {"format", "job_id", "worker_id", "iterations_planned", "complete", "iterations"}
    need |= {"counts", "keys", "values"}
    if missing := sorted(need - fields.keys()):
        raise PushLogError(f"{path.name} lacks {', '.join(missing)}")
    if int(fields["format"]) != PUSH_LOG_FORMAT:
        raise PushLogError(
            f"{path.name} is format {int(fields['format'])}; this hotagg reads {PUSH_LOG_FORMAT}"
        )
    counts, keys, values = fields["counts"], fields["keys"], fields["values"]
    if (
        len(counts) != len(fields["iterations"])
        or int(counts.sum()) != len(keys)
        or (len(keys) != len(values))
    ):
        raise PushLogError(
            f"{path.name}: {len(keys)} keys, {len(values)} values and counts summing to "
            f"{int(counts.sum())} disagree"
        )
    return Pushes(
        path,
        int(fields["job_id"]),
        int(fields["worker_id"]),
        int(fields["iterations_planned"]),
        bool(fields["complete"]),
        fields["iterations"].astype(np.int64),
        counts.astype(np.int64),
        keys.astype(np.uint64),
        values.astype(np.int32),
    )
