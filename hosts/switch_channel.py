"""The parameter server's conversation with the switch (docs/design.md section 3): COLLECT
and WRITEBACK for one PS shard.

COLLECTs, invalidating COLLECTs and WRITEBACKs share one ReliableChannel (hosts/reliable.py, the
engine the worker uses too): at most `collect_window` packets in flight, an RTT-based timeout,
fast retransmit when a later packet is answered first (the switch answers in order). A COLLECT is
asked until answered (or, only if `collect_retries` is set, given up after that many: the
switch's sums for those slots are then lost); a WRITEBACK is sent once (its loss only costs
cache hits). The ParameterServer owns one SwitchChannel and decides when to start each step of
its barrier; this module only sends, resends and reads the replies, sharing the PS's socket
(through `send`), request log (`row`) and counters.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

from contract.codec import Message
from contract.constants import FLAG_INVALIDATE, MAX_ENTRIES, Op
from hosts.agent import Address, RttEstimator
from hosts.reliable import ReliableChannel, Request, Window

if TYPE_CHECKING:
    from hosts.ps import PSConfig

# row(arrival, start, reply, op name, message or None, result, peer): one request-log row.
RowWriter = Callable[[float, float, "float | None", str, "Message | None", str, Address], None]
# (keys, values, mask, flags) of one packet: COLLECT keys are the expected keys, values the
# slot offsets and mask the slots to refresh (or invalidate, with FLAG_INVALIDATE).
_Item = tuple[list[int], list[int], int, int]
_OPS = {"collect": Op.COLLECT, "invalidate": Op.COLLECT, "writeback": Op.WRITEBACK}


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
        self._row, self.counters = row, counters
        # retries per kind; an INVALIDATE is never given up: a refresh left standing could be
        # served to a pull (the deadline bounds the run instead)
        self._retries = {"collect": config.collect_retries, "invalidate": None, "writeback": 0}
        self._net: ReliableChannel[None] = ReliableChannel(
            send,
            counters,
            RttEstimator(config.rto, config.rto_max),
            Window(config.collect_window),
            on_lost=self._lost,
        )
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
        self._warned_lost = False

    # --- what the PS asks ---

    def timeout(self, limit: float) -> float:
        """Seconds until a packet in flight is due, at most `limit`."""
        return self._net.wake_in(limit)

    def collecting(self) -> bool:
        """Whether COLLECTs are still queued or unanswered."""
        return self._net.busy("collect")

    def invalidating(self) -> bool:
        """Whether invalidating COLLECTs are still queued or unanswered."""
        return self._net.busy("invalidate")

    def writeback_queued(self) -> bool:
        """Whether WRITEBACKs are still waiting for room in the window."""
        return self._net.queued("writeback")

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
        self._start("collect", iteration, items)

    def start_invalidate(self, iteration: int, slots: list[tuple[int, int]]) -> None:
        """Untag the cache of these (offset, key) pairs: refreshed, but the key also had
        contributions elsewhere in `iteration` (it moved slot), so the refreshed value is wrong."""
        step = MAX_ENTRIES
        items = []
        for i in range(0, len(slots), step):
            chunk = slots[i : i + step]
            ask = (1 << len(chunk)) - 1
            items.append(([k for _, k in chunk], [o for o, _ in chunk], ask, FLAG_INVALIDATE))
        self._start("invalidate", iteration, items)

    def start_writeback(self, iteration: int, keys: list[int], values: list[int]) -> None:
        """WRITEBACK these keys' values tagged `iteration`, MAX_ENTRIES per packet."""
        step = MAX_ENTRIES
        items = [
            (keys[i : i + step], values[i : i + step], 0, 0) for i in range(0, len(keys), step)
        ]
        self._start("writeback", iteration, items)

    def tick(self) -> None:
        """Resend or give up what is due and send what the window has room for."""
        self._net.pump()

    # --- replies ---

    def on_collect_reply(
        self, m: Message, collecting: bool
    ) -> tuple[str, list[tuple[int, int, int]], list[tuple[int, int]]]:
        """Read a COLLECT_REPLY (`collecting`: the PS's barrier is collecting, or
        invalidating); return the result for the log, (key, sum, offset) of this shard's
        collected entries and the (offset, key) pairs whose cache the switch refreshed."""
        kind = "invalidate" if m.flags & FLAG_INVALIDATE else "collect"
        collected: list[tuple[int, int, int]] = []
        refreshed: list[tuple[int, int]] = []
        if self._net.spurious(m):
            return "late_reply", collected, refreshed
        r = self._net.lookup(m.seq)
        if r is None or r.kind != kind or m.iteration != r.msg.iteration or not collecting:
            return "late_reply", collected, refreshed
        keys, offsets, ask = r.msg.keys, r.msg.values, r.msg.mask
        if m.count != len(offsets):
            return "bad_reply", collected, refreshed  # left in flight: asked again
        # The switch answers in order: an unanswered COLLECT sent (last) before this one was
        # first sent is lost, or its reply is; the engine asks again now.
        self._net.answered(r, m, ordered=True)
        self._row(r.wall, r.wall, time.time(), "COLLECT", m, "collected", self.cfg.switch)
        if kind == "invalidate":
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
        r = self._net.lookup(m.seq)
        if r is not None and r.kind == "writeback" and not self._net.spurious(m):
            self._net.answered(r, m, ordered=True)
            self._row(r.wall, r.wall, time.time(), "WRITEBACK", m, "cached", self.cfg.switch)
        return rejected

    # --- machinery ---

    def _start(self, kind: str, iteration: int, items: list[_Item]) -> None:
        """Give up `kind`'s packets of the previous iteration, queue these and send."""
        self._net.cancel(kind)
        cfg, op, reqs = self.cfg, _OPS[kind], []
        for keys, values, mask, flags in items:
            m = Message(op, flags, cfg.job_id, cfg.shard, self._seq, iteration, mask)
            m = m._replace(keys=tuple(keys), values=tuple(values))
            reqs.append(Request(m, cfg.switch, kind, retries=self._retries[kind]))
            self._seq += 1
        self._net.submit(reqs)
        self._net.pump()

    def _lost(self, r: Request[None]) -> None:
        """A packet given up: out of retries, or outdated by the next iteration's."""
        cfg = self.cfg
        if r.kind == "collect":
            for i, (key, offset) in enumerate(zip(r.msg.keys, r.msg.values)):
                if r.msg.mask >> i & 1:
                    self.unsure.append((offset, key))
                    self.slot_cache.pop(offset, None)
                    self.cached.pop(key, None)
        self._row(r.wall, r.wall, None, r.msg.op.name, None, "unanswered", cfg.switch)
        if r.msg.op == Op.COLLECT and not self._warned_lost:
            self._warned_lost = True
            print(
                f"PS shard {cfg.shard}: COLLECT to {cfg.switch[0]}:{cfg.switch[1]} "
                f"unanswered after {r.tries} retries; iteration {r.msg.iteration} may miss "
                "switch sums (is the switch there?)",
                file=sys.stderr,
            )
