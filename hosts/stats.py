"""Files the agents write: request logs, the hot-keys file, parameters and summaries (the key
frequency files are contract/freqfile.py's).

Hot-keys file (written by `make run` for the offload phase from what the controller
installed; read by the PS and the workers so the cache is filled before iteration 1)::

    key,offset
    7,0
    42,1

`offset` is the key's slot offset in the job (it may be empty when unknown).

Parameters are saved as a 1-D little-endian int64 `.npy` over the whole key space (fixed point,
real = value / 65536); a shard leaves the keys of other shards at 0, so the element-wise sum of
all shards' files is the full model. `params_sha256` hashes exactly those bytes.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np


class CsvLog:
    """Append-only CSV with a header row; a no-op when `path` is None (logging disabled)."""

    def __init__(self, path: str | Path | None, columns: Sequence[str]) -> None:
        self._file: io.TextIOBase | None = None
        self._writer: Any = None
        if path is not None:
            self._file = open(path, "w", newline="", buffering=1 << 16)  # noqa: SIM115
            self._writer = csv.writer(self._file)
            self._writer.writerow(columns)

    @property
    def enabled(self) -> bool:
        return self._writer is not None

    def write(self, row: Iterable[Any]) -> None:
        if self._writer is not None:
            self._writer.writerow(row)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
            self._writer = None


def params_sha256(params: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(params, dtype="<i8").tobytes()).hexdigest()


def save_params(path: str | Path, params: np.ndarray) -> str:
    """Save the parameters (.npy, little-endian int64) and return their sha256."""
    arr = np.ascontiguousarray(params, dtype="<i8")
    with open(path, "wb") as f:
        np.save(f, arr)
    return params_sha256(arr)


def load_params(paths: Sequence[str | Path]) -> np.ndarray:
    """Load one or more shards' parameter files and combine them (element-wise sum)."""
    arrays = [np.load(p) for p in paths]
    if len({a.shape for a in arrays}) != 1:
        raise ValueError("parameter files have different key spaces")
    return np.asarray(np.sum(arrays, axis=0, dtype=np.int64))


def finite(data: Any) -> Any:
    """`data` with every NaN or infinity replaced by None, so that it is strict JSON (which
    has neither; Python's json would write NaN, which other readers refuse)."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [finite(v) for v in data]
    return data


def dumps_strict(data: Any, **kwargs: Any) -> str:
    """json.dumps of `data` as strict JSON (see finite)."""
    return json.dumps(finite(data), allow_nan=False, **kwargs)


def write_json(path: str | Path, data: dict[str, Any]) -> None:
    with open(path, "w") as f:
        f.write(dumps_strict(data, indent=2, sort_keys=True) + "\n")


def load_hot_keys(path: str | Path) -> dict[int, int | None]:
    """Read a hot-keys file (format above) into {key: slot offset or None}."""
    out: dict[int, int | None] = {}
    try:
        with open(path, newline="") as f:
            for lineno, row in enumerate(csv.reader(f), 1):
                if not row or row[0].startswith("#") or row[0].strip() == "key":
                    continue
                try:
                    key = int(row[0])
                    offset = int(row[1]) if len(row) > 1 and row[1].strip() else None
                except ValueError:
                    raise ValueError(f"{path}:{lineno}: expected 'key,offset', got {row}") from None
                if key < 0 or (offset is not None and offset < 0):
                    raise ValueError(f"{path}:{lineno}: negative key or offset in {row}")
                out[key] = offset
    except OSError as e:
        raise ValueError(f"cannot read hot-keys file {path}: {e.strerror}") from None
    return out


def write_hot_keys(path: str | Path, offsets: dict[int, int | None]) -> None:
    with open(path, "w", newline="") as f:
        f.write("key,offset\n")
        for key, offset in offsets.items():
            f.write(f"{key},{'' if offset is None else offset}\n")
