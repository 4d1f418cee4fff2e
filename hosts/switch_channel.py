"""The parameter server's conversation with the switch (docs/design.md section 3): COLLECT
and WRITEBACK for one PS shard.

COLLECTs, invalidating COLLECTs and WRITEBACKs share one ReliableChannel (hosts/reliable.py, the
engine the worker uses too): at most `collect_window` packets in flight, an RTT-based timeout,
fast retransmit when a later packet is answered first (the switch answers in order). A COLLECT is
asked until answered (or, only if `collect_retries` is set, given up after that many: the
switch's sums for those slots are then lost); a WRITEBACK is sent once (its loss only costs
cache hits). The PS's Barrier (hosts/ps_barrier.py) owns one SwitchChannel and decides when to
start each step; this module only sends, resends and reads the replies, sharing the PS's socket
(through `send`), request log (`row`) and counters.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from contract.codec import Message
from contract.constants import FLAG_CHAIN, FLAG_INVALIDATE, MAX_ENTRIES, Op
from hosts.agent import Address, AgentError, RttEstimator
from hosts.ps_config import PSConfig
from hosts.reliable import ReliableChannel, Request, Window


class RowWriter(Protocol):
    """row(arrival, start, reply, op name, message or None, result, peer[, stale]): one
    request-log row (hosts/ps_log.py); `stale` only for pulls the PS answered."""

    def __call__(
        self,
        arrival: float,
        start: float,
        reply: float | None,
        op: str,
        m: Message | None,
        result: str,
        peer: Address,
        stale: int | None = None,
    ) -> None: ...


# (keys, values, mask, flags) of one packet: COLLECT keys are the expected keys, values the
# slot offsets and mask the slots to refresh (or invalidate, with FLAG_INVALIDATE).
_Item = tuple[list[int], list[int], int, int]
_OPS = {
    "collect": Op.COLLECT,
    "invalidate": Op.COLLECT,
    "writeback": Op.WRITEBACK,
    "probe": Op.COLLECT,  # an empty COLLECT: the root's flush count (section 7)
    # an empty COLLECT of t + 1: every copy of t is read, the switch may reuse them (section 8)
    "release": Op.COLLECT,
    "chain": Op.WRITEBACK,  # FLAG_CHAIN: down the remote leaves (section 7)
}


@dataclass
class CollectReply:
    """What a COLLECT_REPLY said: `result` for the log; this shard's collected (key, sum,
    offset) entries; the (offset, key) slots the switch refreshed to the next iteration, and
    the offsets whose refresh it refused (the slot does not cache what the PS believed)."""

    result: str
    flush_count: int | None = None  # a probe's answer: partial PUSHes the root absorbed
    collected: list[tuple[int, int, int]] = field(default_factory=list)
    refreshed: list[tuple[int, int]] = field(default_factory=list)
    refused: list[int] = field(default_factory=list)


class SwitchChannel:
    """COLLECT and WRITEBACK between one PS shard and its switch. It reports what the switch
    answered; what the PS makes of it (hosts/switch_cache.py) is the PS's."""

    def __init__(
        self,
        config: PSConfig,
        send: Callable[[bytes, Address], None],
        row: RowWriter,
        counters: Counter[str],
        refresh_lost: Callable[[int, int], None],
    ) -> None:
        """`refresh_lost(offset, key)`: a COLLECT that asked to refresh that slot was given
        up, so the switch may or may not have refreshed it."""
        self.cfg = config
        self._refresh_lost = refresh_lost
        self._row, self.counters = row, counters
        # retries per kind; an INVALIDATE is never given up: a refresh left standing could be
        # served to a pull (the deadline bounds the run instead)
        # a probe and the chain are asked until answered: the barrier waits for them
        self._retries = {
            "collect": config.collect_retries,
            "invalidate": None,
            "writeback": 0,
            "probe": None,
            "chain": None,
            "release": None,
        }
        self._net: ReliableChannel[None] = ReliableChannel(
            send,
            counters,
            RttEstimator(config.rto, config.rto_max),
            # full from the start: its bursts come while the workers wait at the barrier
            Window(config.collect_window, initial=config.collect_window),
            on_lost=self._lost,
        )
        self._seq = 1
        self._warned_lost = False

    # --- what the PS asks ---

    def describe(self) -> dict:
        """The congestion window, for the summary."""
        return self._net.window.describe()

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

    def probing(self) -> bool:
        """Whether a flush-count probe is unanswered."""
        return self._net.busy("probe")

    def releasing(self) -> bool:
        """Whether an empty COLLECT that releases read copies is unanswered."""
        return self._net.busy("release")

    def chaining(self) -> bool:
        """Whether chained WRITEBACKs are queued or unanswered."""
        return self._net.busy("chain")

    def start_probe(self, iteration: int) -> None:
        """Ask the root how many partial PUSHes of `iteration` it absorbed (an empty COLLECT;
        its reply's `aux`)."""
        self._start("probe", iteration, [([], [], 0, 0)])

    def start_release(self, iteration: int) -> None:
        """Tell the switch every copy of iterations < `iteration` is read (an empty COLLECT
        of `iteration`, docs/design.md section 8). A newer one supersedes it; while it is
        lost, the switch refuses pushes that would reuse those copies, which is exact."""
        self._start("release", iteration, [([], [], 0, 0)])

    def start_chain(
        self, iteration: int, keys: list[int], values: list[int], first: Address
    ) -> None:
        """WRITEBACK these keys' values tagged `iteration` down the chain of remote leaves,
        starting at `first`; the last leaf acks each packet."""
        step = MAX_ENTRIES
        items = [
            (keys[i : i + step], values[i : i + step], 0, FLAG_CHAIN)
            for i in range(0, len(keys), step)
        ]
        self._start("chain", iteration, items, first)

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

    def on_collect_reply(self, m: Message, collecting: bool) -> CollectReply:
        """Read a COLLECT_REPLY (`collecting`: the PS's barrier is collecting, or
        invalidating)."""
        kind = "invalidate" if m.flags & FLAG_INVALIDATE else "collect"
        out = CollectReply("late_reply")
        if self._net.spurious(m):
            return out
        r = self._net.lookup(m.seq)
        if r is not None and r.kind in ("probe", "release"):
            if m.iteration != r.msg.iteration or m.count:
                return out
            self._net.answered(r, m, ordered=True)
            if r.kind == "release":
                self._row(r.wall, r.wall, time.time(), "COLLECT", m, "released", r.dest)
                return CollectReply("release_reply")
            self._row(r.wall, r.wall, time.time(), "COLLECT", m, "flush_count", r.dest)
            return CollectReply("probe_reply", flush_count=m.aux)
        if r is None or r.kind != kind or m.iteration != r.msg.iteration or not collecting:
            return out
        keys, offsets, ask = r.msg.keys, r.msg.values, r.msg.mask
        if m.count != len(offsets):
            out.result = "bad_reply"  # left in flight: asked again
            return out
        # The switch answers in order: an unanswered COLLECT sent (last) before this one was
        # first sent is lost, or its reply is; the engine asks again now.
        self._net.answered(r, m, ordered=True)
        self._row(r.wall, r.wall, time.time(), "COLLECT", m, "collected", r.dest)
        if kind == "invalidate":
            out.result = "invalidate_reply"
            return out
        out.result = "collect_reply"
        space, n, shard = self.cfg.key_space, self.cfg.n_shards, self.cfg.shard
        for i, (key, value) in enumerate(zip(m.keys, m.values)):
            if ask >> i & 1:
                if m.cached >> i & 1:
                    out.refreshed.append((offsets[i], keys[i]))
                else:
                    out.refused.append(offsets[i])
            if not m.mask >> i & 1:
                continue
            if key >= space:
                self.counters["collect_bad_key"] += 1
            elif key % n != shard:
                self.counters["collect_other_shard"] += 1  # another shard's PS takes it
            else:
                out.collected.append((key, value, offsets[i]))
        self.counters["refreshed"] += len(out.refreshed)
        self.counters["refresh_refused"] += len(out.refused)
        return out

    def on_writeback_ack(self, m: Message) -> tuple[list[int], list[int]]:
        """Read a WRITEBACK_ACK; return the keys the switch cached (mask bit set) and those it
        no longer holds (clear), which the PS should stop writing back."""
        cached = [k for i, k in enumerate(m.keys) if m.mask >> i & 1]
        rejected = [k for i, k in enumerate(m.keys) if not m.mask >> i & 1]
        self.counters["writeback_cached"] += len(cached)
        self.counters["writeback_rejected"] += len(rejected)
        r = self._net.lookup(m.seq)
        if r is not None and r.kind in ("writeback", "chain") and not self._net.spurious(m):
            self._net.answered(r, m, ordered=True)
            self._row(r.wall, r.wall, time.time(), "WRITEBACK", m, "cached", r.dest)
        return cached, rejected

    # --- machinery ---

    def _start(
        self, kind: str, iteration: int, items: list[_Item], dest: Address | None = None
    ) -> None:
        """Give up `kind`'s packets of the previous iteration, queue these and send (to the
        PS's switch unless `dest` is given)."""
        self._net.cancel(kind)
        cfg, op = self.cfg, _OPS[kind]
        dest = dest or cfg.switch
        if dest is None:  # PSConfig.validate: collect, which starts these, needs a switch
            raise AgentError(f"PS shard {cfg.shard} has no switch address to send {kind} to")
        reqs: list[Request[None]] = []
        for keys, values, mask, flags in items:
            m = Message(op, flags, cfg.job_id, cfg.shard, self._seq, iteration, mask)
            m = m._replace(keys=tuple(keys), values=tuple(values))
            reqs.append(Request(m, dest, kind, None, retries=self._retries[kind]))
            self._seq += 1
        self._net.submit(reqs)
        self._net.pump()

    def _lost(self, r: Request[None]) -> None:
        """A packet given up: out of retries, or outdated by the next iteration's."""
        cfg = self.cfg
        if r.kind == "collect":
            for i, (key, offset) in enumerate(zip(r.msg.keys, r.msg.values)):
                if r.msg.mask >> i & 1:
                    self._refresh_lost(offset, key)
        self._row(r.wall, r.wall, None, Op(r.msg.op).name, None, "unanswered", r.dest)
        if r.kind == "release":
            return  # superseded by the next iteration's release, which says more
        if r.msg.op == Op.COLLECT and not self._warned_lost:
            self._warned_lost = True
            print(
                f"PS shard {cfg.shard}: COLLECT to {r.dest[0]}:{r.dest[1]} "
                f"unanswered after {r.tries} retries; iteration {r.msg.iteration} may miss "
                "switch sums (is the switch there?)",
                file=sys.stderr,
            )
