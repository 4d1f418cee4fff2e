"""The PS's key frequency files: their format, their writers and their one reader.

Frequency file (one per PS shard, written at the end of a run, and with the PS's
`--freq-every N` also every N iterations while it runs, replaced whole), e.g.::

    # hotagg-freq v1 job=1 shard=0/2 workers=4 iterations=20 keys=3 updates=146 cold=141 collected=5
    key,updates,cold,collected
    7,80,80,0
    42,65,60,5
    9,1,1,0

- The first line is a comment with the run's totals: `keys` = rows below, `updates` = sum of
  the `updates` column, `cold`/`collected` likewise.
- `cold` = entries the PS received in PUSH packets for this key (one per worker and iteration
  that pushed it without the switch aggregating it); `collected` = iterations whose switch
  aggregate for the key the PS collected (one per iteration, however many workers it summed);
  `updates` = cold + collected, i.e. the times the PS applied something to the key.
- Only keys with updates > 0 appear; rows are sorted by updates descending, then key ascending,
  so the first N rows are the N hottest keys of the shard. Shards hold disjoint keys.
- A path ending in `.npz` gets the same content in binary: arrays `keys`, `cold`, `collected`
  (rows in key order) and `meta` (the first line's fields, as JSON). The online loop's files
  are these: rewritten every 2 iterations, the CSV cost the PS ~23 ms and the loop ~17 ms
  of CPU each time (17,000 keys), which on 2 cores slowed every iteration; .npz ~1 ms.
- A path ending in `.live` is not written at all: it holds the PS's counters themselves,
  mapped into memory by the PS and by whoever reads them (LiveFrequency), so the online
  loop reads them while the PS runs and the PS rewrites nothing. Layout (little-endian
  int64 words): magic, key space, `begin`, `done`, the meta JSON's length; the meta JSON
  from byte 40; from byte 4096 the `cold` counters of every key, then the `collected`
  ones. The PS sets `begin` to t before it adds iteration t's counts and `done` to t after,
  and a reader copies the counters between reading `done` and `begin` and tries again if
  they differ, so what it reads is the counts of iterations <= done (`iterations`), as
  rewritten files are. Most readers read them once, after the run, like any other file.
  `frequency_meta` of a .live file reads the header only: no totals (`keys`, `updates`...).

Standard library and numpy only: the PS writes these files (hosts/ps_frequency.py) and the
controller's online loop, the experiment and its plots read them, without importing hosts/.
"""

from __future__ import annotations

import io
import json
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

FREQ_MAGIC = "# hotagg-freq v1"
FREQ_COLUMNS = ("key", "updates", "cold", "collected")


@dataclass
class Frequency:
    meta: dict[str, str]
    keys: np.ndarray
    updates: np.ndarray
    cold: np.ndarray
    collected: np.ndarray


def write_frequency(
    path: str | Path, cold: np.ndarray, collected: np.ndarray, meta: dict[str, Any]
) -> None:
    """Write the frequency file from per-key counters indexed by key (see the module doc;
    `.npz`: binary)."""
    updates = cold + collected
    keys = np.flatnonzero(updates)
    fields = {**meta, **_totals(keys, updates, cold, collected)}
    # written whole, then renamed: a reader (the controller's online loop) never sees half
    tmp = Path(f"{path}.tmp")
    with open(tmp, "wb") as f:
        if _binary(path):
            as_json = np.array(json.dumps({k: str(v) for k, v in fields.items()}))
            np.savez(f, keys=keys, cold=cold[keys], collected=collected[keys], meta=as_json)
        else:
            keys = keys[np.lexsort((keys, -updates[keys]))]  # updates desc, then key asc
            head = " ".join(f"{k}={v}" for k, v in fields.items())
            f.write(f"{FREQ_MAGIC} {head}\n{','.join(FREQ_COLUMNS)}\n".encode())
            f.write(csv_rows(np.stack([keys, updates[keys], cold[keys], collected[keys]], 1)))
    tmp.replace(path)


def _totals(
    keys: np.ndarray, updates: np.ndarray, cold: np.ndarray, collected: np.ndarray
) -> dict[str, int]:
    """The first line's totals over a file's rows (columns indexed by key or by row)."""
    return {
        "keys": len(keys),
        "updates": int(updates.sum()),
        "cold": int(cold.sum()),
        "collected": int(collected.sum()),
    }


def _binary(path: str | Path) -> bool:
    return str(path).endswith(".npz")


def _csv_fields(first: str) -> dict[str, str] | None:
    """The fields of a CSV frequency file's first line (None if it is not one)."""
    if not first.startswith(FREQ_MAGIC):
        return None
    return dict(item.split("=", 1) for item in first[len(FREQ_MAGIC) :].split())


def csv_rows(table: np.ndarray) -> bytes:
    """np.savetxt(table, fmt="%d", delimiter=",")'s bytes for a table of integers >= 0,
    formatted with numpy instead of one Python format per row (~5x faster than savetxt, and
    numpy's loops let the PS's packet thread run meanwhile): the PS rewrites its frequency
    file, tens of thousands of rows, every --freq-every iterations."""
    table = np.asarray(table)
    if table.ndim != 2 or not table.size:
        return b""
    if table.dtype.kind not in "iu" or (table < 0).any() or table.max() >= 2**63:
        return "".join(",".join(map(str, row)) + "\n" for row in table.tolist()).encode()
    values = table.astype(np.int64)
    top = int(values.max())
    width = len(str(top))  # digit positions, the widest value's
    pow10 = 10 ** np.arange(width - 1, -1, -1, dtype=np.int64)
    if top < 2**40:  # float division is exact here (and far faster than int64's)
        digits = (np.floor(values[:, :, None] / pow10.astype(np.float64)) % 10).astype(np.int64)
    else:
        digits = (values[:, :, None] // pow10) % 10
    n, cols = values.shape
    chars = np.empty((n, cols, width + 1), np.uint8)  # the digits, then the separator
    chars[:, :, :-1] = digits + ord("0")
    chars[:, :, -1] = ord(",")
    chars[:, -1, -1] = ord("\n")
    # a value keeps its digits from its leading one (a zero keeps its last digit)
    lead = np.where(values > 0, np.argmax(digits > 0, axis=2), width - 1)
    keep = np.ones((n, cols, width + 1), bool)
    keep[:, :, :-1] = np.arange(width) >= lead[:, :, None]
    return chars[keep].tobytes()


LIVE_SUFFIX = ".live"
LIVE_MAGIC = int.from_bytes(b"hotaggL1", "little")
LIVE_HEADER = 4096  # bytes before the counters: the fields and the meta JSON
_MAGIC, _KEYS, _BEGIN, _DONE, _META_LEN = range(5)
_FIELDS_BYTES = 40
LIVE_READ_TRIES = 20  # copies a reader makes while the PS keeps adding (each ~1 ms)
T = TypeVar("T")


def is_live(path: str | Path) -> bool:
    return str(path).endswith(LIVE_SUFFIX)


class LiveFrequency:
    """The PS's per-key `cold` and `collected` counters, kept in a `.live` file that the PS
    maps into memory (module doc): counting an update is the same store as before, and the
    controller's online loop reads the counters whenever it likes, so nothing is rewritten.
    The .npz rewrites it replaces cost the PS ~5 ms of CPU every 2 iterations, in a thread
    that held the interpreter lock its packet loop waits for."""

    def __init__(self, path: str | Path, key_space: int, meta: dict[str, Any]) -> None:
        text = json.dumps({k: str(v) for k, v in meta.items()}).encode()
        if _FIELDS_BYTES + len(text) > LIVE_HEADER:
            raise ValueError(f"{path}: frequency meta too long ({len(text)} bytes)")
        tmp = Path(f"{path}.tmp")
        with open(tmp, "wb") as f:
            f.truncate(LIVE_HEADER + 16 * key_space)  # zeros, sparse until counted
        data = np.memmap(tmp, dtype=np.uint8, mode="r+")
        self._fields = data[:_FIELDS_BYTES].view("<i8")
        self._fields[:] = [LIVE_MAGIC, key_space, 0, 0, len(text)]
        data[_FIELDS_BYTES : _FIELDS_BYTES + len(text)] = np.frombuffer(text, np.uint8)
        tmp.replace(path)  # whole before it appears; the mapping follows the file
        counts = data[LIVE_HEADER:].view("<i8").reshape(2, key_space)
        self.cold, self.collected = counts[0], counts[1]

    def begin(self, iteration: int) -> None:
        """Iteration `iteration`'s counts are being added (readers of the counters wait)."""
        self._fields[_BEGIN] = iteration

    def done(self, iteration: int) -> None:
        """The counters hold every iteration up to `iteration`."""
        self._fields[_DONE] = iteration


def _live_fields(path: str | Path, data: np.ndarray) -> tuple[np.ndarray, dict[str, str]]:
    """A .live file's header fields and meta (ValueError if it is not one)."""
    if len(data) < LIVE_HEADER:
        raise ValueError(f"{path}: not a hotagg live frequency file (too short)")
    fields = np.frombuffer(data[:_FIELDS_BYTES].tobytes(), "<i8")
    n, length = int(fields[_KEYS]), int(fields[_META_LEN])
    if fields[_MAGIC] != LIVE_MAGIC or n < 0 or not 0 <= length <= LIVE_HEADER - _FIELDS_BYTES:
        raise ValueError(f"{path}: not a hotagg live frequency file")
    meta = json.loads(bytes(data[_FIELDS_BYTES : _FIELDS_BYTES + length]))
    return fields, meta


def _live_meta(path: str | Path) -> dict[str, str]:
    """A .live file's meta, with `iterations` = its `done`: the header only (a poll)."""
    with open(path, "rb") as f:
        fields, meta = _live_fields(path, np.frombuffer(f.read(LIVE_HEADER), np.uint8))
    return {**meta, "iterations": str(int(fields[_DONE]))}


def _live_map(path: str | Path) -> tuple[dict[str, str], np.ndarray, np.ndarray]:
    """A .live file mapped: its meta, its header words (the PS changes them: read them
    again each time) and its (2, keys) counters."""
    data = np.memmap(path, dtype=np.uint8, mode="r")
    fields, meta = _live_fields(path, data)
    n = int(fields[_KEYS])
    if len(data) < LIVE_HEADER + 16 * n:
        raise ValueError(f"{path}: a live frequency file of {n} keys cut short")
    words = data[:_FIELDS_BYTES].view("<i8")
    return meta, words, data[LIVE_HEADER : LIVE_HEADER + 16 * n].view("<i8").reshape(2, n)


def _consistent(words: np.ndarray, read: Callable[[], T]) -> tuple[int, T]:
    """read() of a mapped .live file's counters, and the `done` it is consistent with: no
    iteration's counts began while it read. After LIVE_READ_TRIES tries, the last read, a
    few counts of the next iteration in it; the loop estimates rates from it, no value
    depends on it."""
    for _ in range(LIVE_READ_TRIES):
        done = int(words[_DONE])
        got = read()
        if int(words[_BEGIN]) == done:
            break
        time.sleep(0.001)
    return done, got


def _live_counters(path: str | Path) -> tuple[dict[str, str], np.ndarray]:
    """A .live file's meta, with `iterations` = its `done`, and a copy of its (2, keys)
    counters consistent with it (module doc). The PS's stores are plain numpy stores: x86
    keeps them in order for the reader, a weakly ordered CPU (aarch64) may not, and a copy
    may then mix in a few counts of the next iteration. That is noise in a rate estimate,
    never a wrong value: the counts only choose keys."""
    meta, words, counts = _live_map(path)
    done, copy = _consistent(words, lambda: np.array(counts))
    return {**meta, "iterations": str(done)}, copy


class LiveReader:
    """A .live file's counts since the previous read, for a reader that asks again and again
    (the online loop, every step): the file stays mapped, and only the keys whose counters
    moved are copied, found by comparing the counters with the last values seen (~0.3 ms over
    100,000 keys, against ~2 ms for a copy of the whole file and its difference, most of it
    page faults on fresh 1.6 MB arrays). A file replaced by a new one (a new run) is mapped
    again and counted from zero. Consistency as _live_counters."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._inode: int | None = None
        self._meta: dict[str, str] = {}
        self._words = np.zeros(_FIELDS_BYTES // 8, np.int64)
        self._counts = np.zeros((2, 0), np.int64)
        self._seen = np.zeros((2, 0), np.int64)
        self._done = 0

    def _map(self) -> None:
        inode = os.stat(self.path).st_ino
        if inode == self._inode:
            return
        self._meta, self._words, self._counts = _live_map(self.path)
        self._inode = inode
        self._seen, self._done = np.zeros_like(self._counts), 0

    def _moved(self) -> tuple[np.ndarray, np.ndarray]:
        """The keys whose counters differ from the last values seen, and their counters."""
        keys = np.flatnonzero(
            (self._counts[0] != self._seen[0]) | (self._counts[1] != self._seen[1])
        )
        return keys, self._counts[:, keys]

    def since(self) -> tuple[dict[str, str], int, np.ndarray, np.ndarray]:
        """(the meta, with `iterations` = the file's `done`; `done` at the previous read; the
        keys counted since, ascending; their (cold, collected) counts since, shape (2, k))."""
        self._map()
        done, (keys, now) = _consistent(self._words, self._moved)
        counts = np.maximum(now - self._seen[:, keys], 0)
        self._seen[:, keys] = now
        previous, self._done = self._done, done
        return {**self._meta, "iterations": str(done)}, previous, keys, counts


def frequency_meta(path: str | Path) -> dict[str, str] | None:
    """A frequency file's first-line fields (None before the file exists): cheap, for a
    loop that polls until a PS has reached an iteration."""
    try:
        if is_live(path):
            return _live_meta(path)
        if _binary(path):
            with np.load(path) as z:
                return json.loads(str(z["meta"]))
        with open(path) as f:
            first = f.readline()
    except FileNotFoundError:
        return None
    return _csv_fields(first)  # None: not a whole file (only those are renamed into place)


def read_frequency(path: str | Path) -> Frequency:
    if is_live(path):
        meta, counts = _live_counters(path)
        keys = np.flatnonzero(counts[0] + counts[1])
        cold, collected = counts[0][keys], counts[1][keys]
        updates = cold + collected
        totals = _totals(keys, updates, cold, collected)
        meta.update((k, str(v)) for k, v in totals.items())  # as written files say
        return Frequency(meta, keys, updates, cold, collected)
    if _binary(path):
        with np.load(path) as z:
            keys, cold, collected = (z[n].astype(np.int64) for n in ("keys", "cold", "collected"))
            return Frequency(json.loads(str(z["meta"])), keys, cold + collected, cold, collected)
    with open(path) as f:
        return parse_frequency(f.read(), str(path))


def parse_frequency(text: str, source: str = "<frequency>") -> Frequency:
    """A CSV frequency file's content (read_frequency's CSV reader)."""
    first, _, rest = text.partition("\n")
    meta = _csv_fields(first)
    if meta is None:
        raise ValueError(f"{source}: not a hotagg frequency file (first line {first!r})")
    header, _, rows = rest.partition("\n")
    if header.strip() != ",".join(FREQ_COLUMNS):
        raise ValueError(f"{source}: expected the header {','.join(FREQ_COLUMNS)}")
    table = np.zeros((0, 4), np.int64)
    if rows.strip():
        table = np.loadtxt(io.StringIO(rows), dtype=np.int64, delimiter=",", ndmin=2)
    return Frequency(meta, table[:, 0], table[:, 1], table[:, 2], table[:, 3])


def read_frequencies(path: str | Path) -> list[Frequency]:
    """A frequency file's table, or, for a CSV holding several shards' files one after
    another (`cat freq*.csv`), one table per file, each from its first line on."""
    if is_live(path) or _binary(path):
        return [read_frequency(path)]
    with open(path) as f:
        text = f.read()
    files = re.split(f"(?m)^(?={re.escape(FREQ_MAGIC)})", text)
    return [parse_frequency(part, str(path)) for part in files if part or len(files) == 1]


def top_keys(paths: Sequence[str | Path], n: int) -> list[int]:
    """The n most updated keys over several shards' frequency files (ties: lower key first)."""
    tables = [read_frequency(p) for p in paths]
    keys = np.concatenate([t.keys for t in tables])
    updates = np.concatenate([t.updates for t in tables])
    order = np.lexsort((keys, -updates))
    return [int(k) for k in keys[order[:n]]]
