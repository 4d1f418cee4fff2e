"""The parameter server's conversation with the switch (docs/design.md section 3): COLLECT
and WRITEBACK for one PS shard.

Each kind of control packet has a _Channel: a queue and at most `collect_window` packets in
flight. A COLLECT is asked again after an RTT-based timeout, or at once when a later COLLECT is
answered first (the switch answers in order), until answered (or, only if `collect_retries` is
set, given up after that many: the switch's sums for those slots are then lost); a WRITEBACK
is sent once (its loss only costs cache hits). The ParameterServer owns one SwitchChannel and
decides when to start each step of its barrier; this module only sends, resends and reads the
replies, sharing the PS's socket (through `send`), request log (`row`) and counters.
"""

from __future__ import annotations

import sys
import time
from collections import Counter, deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from contract.codec import Message, encode
from contract.constants import FLAG_INVALIDATE, FLAG_RETRANSMIT, MAX_ENTRIES, Op
from hosts.agent import Address, RttEstimator

if TYPE_CHECKING:
    from hosts.ps import PSConfig

# row(arrival, start, reply, op name, message or None, result, peer): one request-log row.
RowWriter = Callable[[float, float, "float | None", str, "Message | None", str, Address], None]


class _Channel:
    """One kind of control packet to the switch: a queue and the packets in flight, each
    seq -> [item, sent (wall clock), due, tries, first sent, last sent] (perf_counter but
    the wall clock `sent`, which is for the log)."""

    __slots__ = ("inflight", "iteration", "name", "op", "queue", "retries")

    def __init__(self, op: Op, retries: int | None, name: str = "") -> None:
        self.op, self.name, self.retries = op, name or op.name.lower(), retries
        self.iteration = 0
        self.queue: deque[tuple] = deque()
        self.inflight: dict[int, list] = {}

    def timed(self) -> bool:
        """Whether packets in flight need their timeouts watched: to be asked again, or to
        free the window for queued ones. Otherwise (all WRITEBACKs sent) an unanswered one
        is only counted when the next iteration's WRITEBACKs start."""
        retried = self.retries is None or self.retries > 0
        return bool(self.inflight) and (retried or bool(self.queue))


class SwitchChannel:
    """COLLECT and WRITEBACK between one PS shard and its switch. `cached` maps each key to
    the iteration its WRITEBACK was acked for (the keys the switch's cache holds)."""

    def __init__(
        self,
        config: PSConfig,
        send: Callable[[bytes, Address], None],
        row: RowWriter,
        counters: Counter[str],
    ) -> None:
        self.cfg = config
        self._send, self._row, self.counters = send, row, counters
        self.collect = _Channel(Op.COLLECT, config.collect_retries)
        # Never given up: a refresh left standing could be served to a pull (the deadline
        # bounds the run instead).
        self.invalidate = _Channel(Op.COLLECT, None, "invalidate")
        self.writeback = _Channel(Op.WRITEBACK, 0)
        self.cached: dict[int, int] = {}
        # What this PS believes the switch cache holds: offset -> (key, iteration), from
        # refreshes and acked WRITEBACKs (the switch checks both before it refreshes), and
        # key -> offset where its sums were last collected.
        self.slot_cache: dict[int, tuple[int, int]] = {}
        self.offset_of: dict[int, int] = {}
        # (offset, key) whose refresh was asked in a COLLECT given up (--collect-retries):
        # the switch may have refreshed them, so the PS invalidates them
        self.unsure: list[tuple[int, int]] = []
        self._seq = 1
        self._rtt = RttEstimator(config.rto, config.rto_max)  # COLLECT/WRITEBACK timeouts
        self._warned_lost = False

    # --- what the PS asks ---

    def timeout(self, limit: float) -> float:
        """Seconds until the earliest watched packet in flight is due, at most `limit`."""
        timeout = limit
        for ch in (self.collect, self.invalidate, self.writeback):
            if ch.timed():
                due = min(c[2] for c in ch.inflight.values())
                timeout = min(timeout, max(0.0, due - time.perf_counter()))
        return timeout

    def collecting(self) -> bool:
        """Whether COLLECTs are still queued or unanswered."""
        return bool(self.collect.queue or self.collect.inflight)

    def invalidating(self) -> bool:
        """Whether invalidating COLLECTs are still queued or unanswered."""
        return bool(self.invalidate.queue or self.invalidate.inflight)

    def writeback_queued(self) -> bool:
        """Whether WRITEBACKs are still waiting for room in the window."""
        return bool(self.writeback.queue)

    def start_collect(self, iteration: int, refresh: dict[int, int]) -> None:
        """COLLECT all of the job's slots for `iteration`, MAX_ENTRIES offsets per packet,
        asking the switch to refresh the cache of each offset in `refresh` (offset -> the key
        this PS believes it caches for `iteration`, with no cold part in it)."""
        slots, step = self.cfg.hot_slots, MAX_ENTRIES
        items = []
        for i in range(0, slots, step):
            offsets = list(range(i, min(i + step, slots)))
            keys = [refresh.get(o, 0) for o in offsets]
            ask = sum(1 << j for j, o in enumerate(offsets) if o in refresh)
            items.append((keys, offsets, ask, 0))
        self._start(self.collect, iteration, items)

    def start_invalidate(self, iteration: int, slots: list[tuple[int, int]]) -> None:
        """Untag the cache of these (offset, key) pairs: refreshed, but the key also had
        contributions elsewhere in `iteration` (it moved slot), so the refreshed value is wrong."""
        step = MAX_ENTRIES
        items = []
        for i in range(0, len(slots), step):
            chunk = slots[i : i + step]
            ask = (1 << len(chunk)) - 1
            items.append(([k for _, k in chunk], [o for o, _ in chunk], ask, FLAG_INVALIDATE))
        self._start(self.invalidate, iteration, items)

    def start_writeback(self, iteration: int, keys: list[int], values: list[int]) -> None:
        """WRITEBACK these keys' values tagged `iteration`, MAX_ENTRIES per packet."""
        step = MAX_ENTRIES
        items = [
            (keys[i : i + step], values[i : i + step], 0, 0) for i in range(0, len(keys), step)
        ]
        self._start(self.writeback, iteration, items)

    def tick(self) -> None:
        """Resend or give up what is due and send what the window has room for."""
        for ch in (self.collect, self.invalidate, self.writeback):
            if ch.queue or ch.timed():
                self._tick(ch)

    # --- replies ---

    def on_collect_reply(
        self, m: Message, collecting: bool
    ) -> tuple[str, list[tuple[int, int, int]], list[tuple[int, int]]]:
        """Read a COLLECT_REPLY (`collecting`: the PS's barrier is collecting, or
        invalidating); return the result for the log, (key, sum, offset) of this shard's
        collected entries and the (offset, key) pairs whose cache the switch refreshed."""
        ch = self.invalidate if m.flags & FLAG_INVALIDATE else self.collect
        collected: list[tuple[int, int, int]] = []
        refreshed: list[tuple[int, int]] = []
        c = ch.inflight.get(m.seq)
        if c is None or m.iteration != ch.iteration or not collecting:
            return "late_reply", collected, refreshed
        keys, offsets, ask, _flags = c[0]
        if m.count != len(offsets):
            return "bad_reply", collected, refreshed  # left in flight: asked again
        del ch.inflight[m.seq]
        now = time.perf_counter()
        if c[3] == 0:
            self._rtt.sample(now - c[4])
        # The switch answers COLLECTs in order: an unanswered one sent (last) before this
        # one was first sent is lost, or its reply is; ask again now.
        for seq, d in list(ch.inflight.items()):
            if seq < m.seq and d[5] <= c[4]:
                self._resend(ch, seq, d, now)
                self.counters[f"{ch.name}_fast_retransmits"] += 1
        self._row(c[1], c[1], time.time(), "COLLECT", m, "collected", self.cfg.switch)
        if ch is self.invalidate:
            return "invalidate_reply", collected, refreshed
        space, n, shard, nxt = (
            self.cfg.key_space,
            self.cfg.n_shards,
            self.cfg.shard,
            m.iteration + 1,
        )
        for i, (key, value) in enumerate(zip(m.keys, m.values)):
            if ask >> i & 1:
                if m.cached >> i & 1:
                    self.slot_cache[offsets[i]] = (keys[i], nxt)
                    self.cached[keys[i]] = nxt
                    refreshed.append((offsets[i], keys[i]))
                else:
                    self.slot_cache.pop(offsets[i], None)
                    self.counters["refresh_refused"] += 1
            if not m.mask >> i & 1:
                continue
            if key >= space:
                self.counters["collect_bad_key"] += 1
            elif key % n != shard:
                self.counters["collect_other_shard"] += 1  # another shard's PS takes it
            else:
                collected.append((key, value, offsets[i]))
                self.offset_of[key] = offsets[i]
        self.counters["refreshed"] += len(refreshed)
        return "collect_reply", collected, refreshed

    def on_writeback_ack(self, m: Message) -> list[int]:
        """Read a WRITEBACK_ACK; return the keys the switch no longer holds (mask bit clear),
        which the PS should stop writing back."""
        rejected: list[int] = []
        for i, key in enumerate(m.keys):
            if m.mask >> i & 1:
                self.counters["writeback_cached"] += 1
                if self.cached.get(key, -1) > m.iteration:
                    continue  # a late ack: a refresh already moved this key further
                self.cached[key] = m.iteration
                offset = self.offset_of.get(key)
                if offset is not None:
                    self.slot_cache[offset] = (key, m.iteration)
            else:
                rejected.append(key)
                self.cached.pop(key, None)
                self.counters["writeback_rejected"] += 1
        c = self.writeback.inflight.pop(m.seq, None)
        if c is not None:
            self._rtt.sample(time.perf_counter() - c[4])
            self._row(c[1], c[1], time.time(), "WRITEBACK", m, "cached", self.cfg.switch)
        return rejected

    # --- machinery ---

    def _start(self, ch: _Channel, iteration: int, items: list[tuple]) -> None:
        for c in ch.inflight.values():  # the previous iteration's unanswered packets
            self._lost(ch, c)
        if ch.queue:  # never sent, now outdated
            self.counters[f"{ch.name}_dropped"] += len(ch.queue)
        ch.inflight.clear()
        ch.iteration, ch.queue = iteration, deque(items)
        self._tick(ch)

    def _lost(self, ch: _Channel, c: list) -> None:
        cfg = self.cfg
        self.counters[f"{ch.name}_unanswered"] += 1
        if ch is self.collect:
            keys, offsets, ask, _flags = c[0]
            for i, (key, offset) in enumerate(zip(keys, offsets)):
                if ask >> i & 1:
                    self.unsure.append((offset, key))
                    self.slot_cache.pop(offset, None)
                    self.cached.pop(key, None)
        self._row(c[1], c[1], None, ch.op.name, None, "unanswered", cfg.switch)
        if ch.op == Op.COLLECT and not self._warned_lost:
            self._warned_lost = True
            print(
                f"PS shard {cfg.shard}: COLLECT to {cfg.switch[0]}:{cfg.switch[1]} "
                f"unanswered after {ch.retries} retries; iteration {ch.iteration} may miss "
                "switch sums (is the switch there?)",
                file=sys.stderr,
            )

    def _packet(self, ch: _Channel, seq: int, item: tuple, flags: int = 0) -> bytes:
        job, shard = self.cfg.job_id, self.cfg.shard
        keys, values, mask, item_flags = item
        flags |= item_flags
        return encode(ch.op, job, shard, seq, ch.iteration, keys, values, flags=flags, mask=mask)

    def _tick(self, ch: _Channel) -> None:
        cfg, now = self.cfg, time.perf_counter()
        for seq, c in list(ch.inflight.items()):
            if c[2] > now:
                continue
            if ch.retries is not None and c[3] >= ch.retries:
                del ch.inflight[seq]
                self._lost(ch, c)
                continue
            self._resend(ch, seq, c, now)
        while ch.queue and len(ch.inflight) < cfg.collect_window:
            item, seq = ch.queue.popleft(), self._seq
            self._seq += 1
            ch.inflight[seq] = [item, time.time(), now + self._rtt.timeout(), 0, now, now]
            self._send(self._packet(ch, seq, item), cfg.switch)
            self.counters[f"{ch.name}_sent"] += 1

    def _resend(self, ch: _Channel, seq: int, c: list, now: float) -> None:
        c[3] += 1
        c[2], c[5] = now + self._rtt.timeout(c[3]), now
        self._send(self._packet(ch, seq, c[0], FLAG_RETRANSMIT), self.cfg.switch)
        self.counters[f"{ch.name}_retransmits"] += 1
