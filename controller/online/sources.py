"""The loop's rate sources (observation.RateSource). All give counts of *updates*, i.e. worker
push entries, since their previous read.

- `SwitchHitsSource`: the direct counters of the hot-key tables (`lookupN.hits`, readable
  over P4Runtime on both targets). A hit counts every lookup of a hot key, a worker's PULL
  entry as well as its PUSH entry (and the PS's WRITEBACKs), so an update is about
  `weight` = 0.5 hits (a WRITEBACK adds 0.5 per iteration: members look slightly better
  than they are). Counters restart when a key is re-installed; a smaller reading than the
  last is taken as a fresh counter. One Read RPC for the 8 tables (`read_hits`).
- `PSFrequencySource`: the PS's frequency files (contract/freqfile.py): a `.live` file, which
  holds the PS's counters themselves while it runs, or one a PS started with
  `--freq-every N` rewrites (atomically) every N iterations. Their `cold` column counts the
  entries each key got at the PS (all of a cold key's updates, and a hot key's that the
  switch did not sum); their `iterations` header tells which iteration the counts reach.
  With `collected=True` it also counts the hot keys' updates, estimated from the
  `collected` column (the iterations whose switch sum the PS collected) and the file's
  `workers` (`updates_from_presence`): the files then count every update, no switch read.
  It passes the `collected` counts on too (`Observation.presence`): `ChangeRateEstimator`
  models a hot key's steps as samples of that presence rather than as updates.
- `CombinedSource`: the sum of several (switch hits + PS files: every update counted once).
- `controller.sketch.SketchSource`: the in-switch sketch's reports (digests) and counters
  (p4src/include/sketch.p4, docs/design.md section 6). It sees candidates, not every key
  (`complete=False`), so the loop then leaves the oracle column out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
from p4.v1 import p4runtime_pb2

from contract.constants import MAX_ENTRIES
from contract.freqfile import LiveReader, is_live, read_frequency
from contract.names import hot_keys_table
from controller.errors import BadInput
from controller.hot_keys import HotKeys
from controller.online.observation import Observation, RateSource, updates_from_presence
from p4rt import wire

_NONE = np.zeros(0, np.int64)
# A frequency file's counts since the last read: iterations done, and at the last read; the
# file's workers; the keys counted since, and their cold and collected counts (float64).
_Delta = tuple[int, int, int, np.ndarray, np.ndarray, np.ndarray]


def read_hits(hot_keys: HotKeys, job_id: int) -> dict[int, int]:
    """A job's hot-key hits summed over the 8 lookup instances' direct counters, in one Read
    RPC for all 8 tables (HotKeys.list(counters=True) sends one per table)."""
    p4info = hot_keys.p4info
    entities = [
        p4runtime_pb2.Entity(table_entry=p4info.wildcard(hot_keys_table(i), counters=True))
        for i in range(MAX_ENTRIES)
    ]
    # the match field ids of each table (the 8 instances may number them alike or not)
    ids = {
        p4info.table_id(hot_keys_table(i)): (
            p4info.match_field_id(hot_keys_table(i), "job_id"),
            p4info.match_field_id(hot_keys_table(i), "key"),
        )
        for i in range(MAX_ENTRIES)
    }
    hits: dict[int, int] = {}
    for reply in hot_keys.client.read_raw(entities):  # ~700 entries: decoded by hand
        for table_id, match, packets in wire.table_entry_counters(reply):
            job_field, key_field = ids[table_id]
            if int.from_bytes(match.get(job_field, b""), "big") == job_id:
                key = int.from_bytes(match.get(key_field, b""), "big")
                hits[key] = hits.get(key, 0) + packets
    return hits


class SwitchHitsSource:
    """Updates of the hot keys from the hot-key tables' direct counters (module doc)."""

    def __init__(self, hot_keys: HotKeys, job_id: int, weight: float = 0.5) -> None:
        if not weight > 0:
            raise BadInput(f"hit weight {weight} must be > 0")
        self.hot_keys, self.job_id, self.weight = hot_keys, job_id, weight
        self._last: dict[int, int] = {}

    def hits(self) -> dict[int, int]:
        return read_hits(self.hot_keys, self.job_id)

    def read(self) -> Observation:
        now = self.hits()
        counts = {}
        for key, hits in now.items():
            before = self._last.get(key, 0)
            delta = hits - before if hits >= before else hits  # re-installed: a new counter
            if delta:
                counts[key] = self.weight * delta
        self._last = now
        return Observation(counts)


class PSFrequencySource:
    """Updates per key from PS frequency files (one per shard; module doc): the `cold`
    column, and with `collected` also the hot keys' updates estimated from the `collected`
    column (updates_from_presence), so the files alone count every key's updates and the
    loop needs no switch read."""

    def __init__(self, paths: Sequence[str | Path], collected: bool = False) -> None:
        if not paths:
            raise BadInput("no PS frequency file given")
        self.paths, self.collected = [Path(p) for p in paths], collected
        self._last: dict[Path, tuple[int, np.ndarray, np.ndarray]] = {}
        self._live: dict[Path, LiveReader] = {}

    def read(self) -> Observation:
        counts: dict[int, float] = {}
        presence: dict[int, float] | None = {} if self.collected else None
        iterations: list[int] = []
        spans: list[int] = []
        workers = 1
        for path in self.paths:
            if not path.exists():
                continue  # the PS has not written it yet
            try:
                since = self._live_delta(path) if is_live(path) else self._file_delta(path)
            except (OSError, ValueError) as exc:
                raise BadInput(f"PS frequency file {path}: {exc}") from None
            done, prev_done, shard_workers, keys, cold, collected = since
            n = cold
            if presence is not None:
                n = n + updates_from_presence(collected, done - prev_done, shard_workers)
                seen = collected > 0
                presence.update(zip(keys[seen].tolist(), collected[seen].tolist()))
                workers = max(workers, shard_workers)
            moved = n > 0
            for key, c in zip(keys[moved].tolist(), n[moved].tolist()):
                counts[key] = counts.get(key, 0.0) + c
            iterations.append(done)
            spans.append(done - prev_done)
        return Observation(
            counts,
            iteration=max(iterations) if iterations else None,
            iterations=max(spans) if spans else None,
            complete=bool(iterations),
            presence=presence if iterations else None,
            workers=workers,
        )

    def _live_delta(self, path: Path) -> _Delta:
        reader = self._live.get(path)
        if reader is None:
            reader = self._live[path] = LiveReader(path)
        meta, prev_done, keys, counts = reader.since()
        done, workers = int(meta.get("iterations", "0")), int(meta.get("workers", "1"))
        cold, collected = counts.astype(np.float64)
        return done, prev_done, workers, keys, cold, collected

    def _file_delta(self, path: Path) -> _Delta:
        """A rewritten file's (CSV, .npz) counts since the last read."""
        freq = read_frequency(path)
        done = int(freq.meta.get("iterations", "0"))
        workers = int(freq.meta.get("workers", "1"))
        order = np.argsort(freq.keys, kind="stable")
        keys = freq.keys[order]
        cols = np.stack([freq.cold[order], freq.collected[order]], axis=1)
        prev_done, prev_keys, prev_cols = self._last.get(path, (0, _NONE, _NONE))
        if done < prev_done:  # a new run started: a fresh file
            prev_done, prev_keys, prev_cols = 0, _NONE, _NONE
        # The file lists every key ever updated (tens of thousands): difference it with
        # numpy, only the keys updated since the last read become Python objects.
        delta = cols.astype(np.float64)
        if len(prev_keys):
            at = np.minimum(np.searchsorted(prev_keys, keys), len(prev_keys) - 1)
            known = prev_keys[at] == keys
            delta[known] -= prev_cols[at[known]]
        delta = np.maximum(delta, 0.0)
        self._last[path] = (done, keys, cols)
        return done, prev_done, workers, keys, delta[:, 0], delta[:, 1]


class CombinedSource:
    """The sum of several sources' counts (e.g. switch hits and PS files)."""

    def __init__(self, sources: Iterable[RateSource]) -> None:
        self.sources = list(sources)

    def read(self) -> Observation:
        out = Observation({})
        for obs in (s.read() for s in self.sources):
            for key, n in obs.counts.items():
                out.counts[key] = out.counts.get(key, 0.0) + n
            if obs.iteration is not None:
                out.iteration = max(out.iteration or 0, obs.iteration)
            if obs.iterations is not None:
                out.iterations = max(out.iterations or 0, obs.iterations)
            out.complete = out.complete or obs.complete
        return out
