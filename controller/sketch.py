"""The switch's cold-key sketch (p4src/include/sketch.p4), for the controller's online loop.

The data plane counts, per (job_id, key), the entries of fresh PUSHes that miss the hot-key
tables, in a count-min sketch of 2 rows. The controller sees it two ways, both standard
P4Runtime that BMv2 and the embedded target serve:
- `read_sketch()`: the rows' indirect counters (cumulative since the pipeline was set);
  `SketchCounts.since(older)` gives the counts of an interval and `estimate(job, key)` the
  count-min estimate (>= the key's true count, equal when no other key shares its cells);
- `candidates()`: the digests of keys whose estimate reached the threshold, one per key and
  epoch (a Bloom filter in the switch), each list acknowledged as it is taken.
`configure(epoch, threshold)` turns it on (threshold 0 turns it off) and starts an epoch;
`start_epoch(n)` moves on to a new one, which resets the in-switch counts and reports
lazily. The counters are never reset: the caller keeps the previous read.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from p4.v1 import p4runtime_pb2

from contract import names
from contract.constants import SKETCH_WIDTH
from contract.sketch import indexes
from controller.client import SwitchClient
from controller.errors import BadInput, EntryExists
from controller.online.observation import Observation
from controller.p4info import P4Info, decode
from p4rt import wire

TABLE = names.TABLE_SKETCH_CONFIG
SET_SKETCH = names.ACTION_SET_SKETCH
U32 = (1 << 32) - 1
# Digest list defaults: at most 64 reports per list, sent within 10 ms; an unacknowledged
# report is held back for 1 s (PI's ack cache) before the same one may come again.
MAX_LIST_SIZE = 64
MAX_TIMEOUT_NS = 10_000_000
ACK_TIMEOUT_NS = 1_000_000_000


@dataclass(frozen=True)
class Candidate:
    """One digest: `key` of job `job_id` reached `estimate` >= threshold in `epoch`."""

    job_id: int
    key: int
    epoch: int
    estimate: int


@dataclass(frozen=True)
class SketchCounts:
    """Packet counts of each row's cells (rows[r][i])."""

    rows: tuple[tuple[int, ...], ...]

    def since(self, older: SketchCounts) -> SketchCounts:
        """The counts of the interval between `older` and this read."""
        return SketchCounts(
            tuple(tuple(a - b for a, b in zip(new, old)) for new, old in zip(self.rows, older.rows))
        )

    def estimate(self, job_id: int, key: int) -> int:
        """Count-min estimate of (job_id, key): >= its true count."""
        return min(row[i] for row, i in zip(self.rows, indexes(job_id, key)))


class Sketch:
    """The cold-key sketch of one switch."""

    def __init__(self, client: SwitchClient, p4info: P4Info) -> None:
        self.client = client
        self.p4info = p4info
        digest = p4info.find("digests", names.DIGEST_SKETCH)
        if digest is None:
            raise BadInput(f"the P4Info has no digest {names.DIGEST_SKETCH}")
        self.digest_id = digest.preamble.id

    def configure(
        self,
        epoch: int,
        threshold: int,
        max_list_size: int = MAX_LIST_SIZE,
        max_timeout_ns: int = MAX_TIMEOUT_NS,
        ack_timeout_ns: int = ACK_TIMEOUT_NS,
    ) -> None:
        """Configure the digest (insert, or modify if it is configured) and set epoch and
        threshold. Threshold 0 turns the sketch off; above 2^31 - 1 it counts without
        reporting."""
        entry = p4runtime_pb2.DigestEntry(digest_id=self.digest_id)
        entry.config.max_list_size = max_list_size
        entry.config.max_timeout_ns = max_timeout_ns
        entry.config.ack_timeout_ns = ack_timeout_ns
        update = p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT)
        update.entity.digest_entry.CopyFrom(entry)
        try:
            self.client.write([update])
        except EntryExists:
            update.type = p4runtime_pb2.Update.MODIFY
            self.client.write([update])
        self.set(epoch, threshold)

    def set(self, epoch: int, threshold: int) -> None:
        """Epoch and threshold (the sketch_config default action)."""
        for what, v in (("epoch", epoch), ("threshold", threshold)):
            if not 0 <= v <= U32:
                raise BadInput(f"sketch {what} {v} is not in [0, 2^32 - 1]")
        params = {"epoch": epoch, "threshold": threshold}
        self.client.write_entries("modify", [self.p4info.default_entry(TABLE, SET_SKETCH, params)])

    def start_epoch(self, epoch: int, threshold: int) -> None:
        """A new epoch: counts and reports in the switch start again from zero."""
        self.set(epoch, threshold)

    def read_sketch(self) -> SketchCounts:
        """Every cell of both rows' counters (one Read)."""
        requests = []
        for name in names.SKETCH_ROW_COUNTERS:
            request = p4runtime_pb2.Entity()
            request.counter_entry.counter_id = self.p4info.counter_id(name)
            requests.append(request)
        row_of = {self.p4info.counter_id(n): r for r, n in enumerate(names.SKETCH_ROW_COUNTERS)}
        rows = [[0] * SKETCH_WIDTH for _ in names.SKETCH_ROW_COUNTERS]
        for reply in self.client.read_raw(requests):
            for counter_id, index, _, packets in wire.counter_entries(reply):
                rows[row_of[counter_id]][index] = packets
        return SketchCounts(tuple(tuple(r) for r in rows))

    def read_cells(self, cells: Iterable[tuple[int, int]]) -> dict[tuple[int, int], int]:
        """The packet counts of some cells, (row, index) -> count, in one Read: what a
        loop that follows a few candidates needs (both rows are 8192 CounterEntry
        messages)."""
        ids = [self.p4info.counter_id(n) for n in names.SKETCH_ROW_COUNTERS]
        row_of = {cid: r for r, cid in enumerate(ids)}
        requests = [wire.counter_entity(ids[row], index) for row, index in sorted(set(cells))]
        if not requests:
            return {}
        return {
            (row_of[counter_id], index): packets
            for reply in self.client.read_raw(requests)
            for counter_id, index, _, packets in wire.counter_entries(reply)
        }

    def candidates(self, timeout: float = 0.0) -> list[Candidate]:
        """The reports received so far (waiting up to `timeout` s for a first list); every
        list is acknowledged."""
        out: list[Candidate] = []
        deadline = time.monotonic() + timeout
        while True:
            wait = 0.0 if out else max(0.0, deadline - time.monotonic())
            lst = self.client.digest_list(timeout=wait)
            if lst is None:
                return out
            if lst.digest_id != self.digest_id:
                continue
            for data in lst.data:
                out.append(Candidate(*(decode(m.bitstring) for m in data.struct.members)))
            self.client.ack_digest(lst.digest_id, lst.list_id)


class SketchSource:
    """A `controller.online.observation.RateSource` over the sketch, as NetCache uses its own: the
    switch reports the keys that reach the threshold (digests), and the loop follows those
    keys' cells. Each read:
    - takes the reports that came in: a key newly reported counts its report's estimate
      (>= threshold) for this interval;
    - reads the cells of the keys it follows (`Sketch.read_cells`, one Read) and counts
      each the minimum over the two rows of its cells' growth since the previous read (the
      count-min estimate of the interval);
    - stops following a key with no cold update in the interval (it became hot, the
      hit counters count it then, or it cooled; the switch reports it again if it comes
      back), so a read costs the candidates of the last few steps, not every key seen;
    - starts the next epoch, so that keys are reported again.
    Incomplete (only reported keys are counted), so the loop leaves the oracle out. With
    the hot-key tables' hits (`SwitchHitsSource`) it counts every update in the switch and
    nothing from the PS (`hotagg-ctl hotkeys auto --sketch`, `make run
    HOTSET_SOURCE=switch`). The estimate over-counts a key by what other keys add to its
    cells."""

    def __init__(self, sketch: Sketch, job_id: int, threshold: int, epoch: int = 1) -> None:
        if threshold < 1:
            raise BadInput(f"sketch threshold {threshold} must be >= 1 (0 turns it off)")
        self.sketch, self.job_id, self.threshold = sketch, job_id, threshold
        self.epoch = epoch
        self._cells: dict[int, tuple[int, int]] = {}  # followed key -> its cell in each row
        self._last: dict[tuple[int, int], int] = {}  # (row, index) -> count at the last read
        sketch.configure(epoch, threshold)

    @property
    def known(self) -> set[int]:
        """The keys followed."""
        return set(self._cells)

    def forget(self, keys: set[int]) -> None:
        for key in keys:
            self._cells.pop(key, None)

    def read(self) -> Observation:
        reported: dict[int, int] = {}
        for c in self.sketch.candidates():
            if c.job_id == self.job_id and c.key not in self._cells:
                reported[c.key] = max(reported.get(c.key, 0), c.estimate)
        for key in reported:
            self._cells[key] = indexes(self.job_id, key)
        now = self.sketch.read_cells(
            (row, index) for pair in self._cells.values() for row, index in enumerate(pair)
        )
        self.epoch = (self.epoch + 1) & U32 or 1
        self.sketch.start_epoch(self.epoch, self.threshold)
        counts: dict[int, float] = {}
        for key, pair in list(self._cells.items()):
            cells = list(enumerate(pair))
            if key in reported or not all(c in self._last for c in cells):
                n = reported.get(key, 0)  # no earlier read of its cells: the report's count
            else:
                n = min(now[c] - self._last[c] for c in cells)
            if n > 0:
                counts[key] = float(n)
            else:
                del self._cells[key]
        self._last = now
        return Observation(counts)
