"""A PS shard's answers to the requests it receives, per op (docs/design.md section 3).

- PUSH: deduplicated by (worker, seq) in a 64-seq window like the switch's (the worker's
  sliding window guarantees a newer seq in a window position means the older one was acked);
  duplicates are re-acked with the mask stored for the seq, never applied twice. First-time
  pushes of the current iteration are buffered (the barrier applies them), so every pull
  for iteration t sees exactly iterations < t. The PUSH_ACK echoes the mask the switch set.
- PULL for t: answered once iterations < t are applied, else held. The reply's mask is the
  request's (the switch's cache-hit bitmap) plus the entries whose keys this PS knows the
  cache holds for t (acked WRITEBACKs), so workers learn them as hot, but not those the
  switch passed on unanswered (such a key has left the switch); values are int64 clamped
  to int32.
- DONE(t) from every worker starts the barrier (hosts/ps_barrier.py); its release sends
  DONE_ACK(t) to all workers (`release`), again to any later DONE(t). While workers are
  retransmitting, each DONE_ACK is sent twice. Its entries name keys that left the switch's
  cache (hosts/switch_cache.py), so that workers stop grouping them as cached. A DONE flagged
  HOT_PUSHED is not a DONE: it is never answered and only lets a remote leaf be flushed
  (AGGREGATE=leaves, docs/design.md section 7).
- COLLECT_REPLY and WRITEBACK_ACK, the switch's answers, go to the barrier.
DONE.seq must equal this shard's index (the worker's shard list must match ours).

Consistency modes (docs/design.md section 8): in `ssp:S` a push or DONE of a later iteration
goes to that iteration's state, DONE_ACK(t) leaves once iteration t - S is applied (at once
if it is), and a pull of t is answered once t - 1 - S is; in `async` DONE_ACK leaves at once,
pulls are never held and cold entries are applied on arrival. Each pull the PS answers
records its staleness, (t - 1) - the newest applied iteration, in the log and `staleness`.
"""

from __future__ import annotations

import sys
import time
from collections import Counter, deque
from collections.abc import Callable

import numpy as np

from contract.codec import CodecError, Message, decode, encode
from contract.constants import (
    DEDUP_WINDOW,
    FLAG_FROM_SWITCH,
    FLAG_HOT_PUSHED,
    FLAG_RETRANSMIT,
    INT32_MAX,
    INT32_MIN,
    MAX_ENTRIES,
    Op,
)
from hosts.agent import Address
from hosts.ps_barrier import Barrier, IterationState, Phase
from hosts.ps_config import PSConfig
from hosts.switch_channel import RowWriter

_OP_NAMES = {op.value: op.name for op in Op}
# Requests that point at a configuration mismatch between a worker and this PS.
_MISCONFIGURED = {
    "unknown_job": "a request for another job id: check --job of the workers and the PS",
    "bad_worker": "a worker id >= --workers: check --workers and the workers' --worker-id",
    "bad_key": "a key outside --keys or owned by another shard: check --keys and --shard",
    "bad_shard": "a DONE for another shard: the workers' --ps list must be in shard order",
}


class _Dedup:
    __slots__ = ("masks", "seqs")

    def __init__(self) -> None:
        self.seqs = [0] * DEDUP_WINDOW
        self.masks = [0] * DEDUP_WINDOW


class RequestHandler:
    """Decodes each datagram, answers it by its op, and logs it (`row`); `params` is the
    shard's parameter array, which the barrier applies."""

    def __init__(
        self,
        config: PSConfig,
        params: np.ndarray,
        barrier: Barrier,
        counters: Counter[str],
        send: Callable[[bytes, Address], None],
        row: RowWriter,
    ) -> None:
        self.cfg, self.params, self.barrier, self.counters = config, params, barrier, counters
        self._send_datagram, self._row = send, row
        self._sent_at = 0.0  # when the last reply was handed to the socket (the log's `reply`)
        # the job's workers, then the remote leaves' pseudo-workers (design.md section 7)
        self._pseudo = {leaf.pseudo_worker for leaf in config.leaves}
        ids = max([config.n_workers, *(p + 1 for p in self._pseudo)])
        self._dedup = [_Dedup() for _ in range(ids)]
        self._addr: dict[int, Address] = {}  # worker -> where its DONEs come from
        self._held: deque[tuple[Message, Address, float]] = deque()
        # the evicted keys the DONE_ACKs of one iteration carry (a re-ack repeats them)
        self._evicted_told: list[int] = []
        self._evicted_told_at = 0
        self._loss_seen = 0  # the latest iteration that saw a retransmitted request
        self.sync = config.sync
        self.staleness: Counter[int] = Counter()  # pulls the PS answered, by staleness

    def handle(self, data: bytes, addr: Address, arrival: float) -> None:
        """One datagram received at `arrival` (s, wall clock)."""
        start = time.time()
        try:
            m = decode(data)
        except CodecError:
            self.counters["malformed"] += 1
            self._row(arrival, start, None, "?", None, "malformed", addr)
            return
        if m.op not in _OP_NAMES:
            result = "unknown_op"
        elif m.job_id != self.cfg.job_id:
            result = "unknown_job"
        elif m.op == Op.PUSH and m.flags & FLAG_FROM_SWITCH and m.worker_id in self._pseudo:
            result = self._on_partial_push(m)
        elif m.op in (Op.PUSH, Op.PULL, Op.DONE) and m.worker_id >= self.cfg.n_workers:
            result = "bad_worker"
        elif m.op == Op.PUSH:
            if m.flags & FLAG_RETRANSMIT:
                self._loss_seen = self.barrier.cur
            result = self._on_push(m, addr)
        elif m.op == Op.PULL:
            if m.flags & FLAG_RETRANSMIT:
                self._loss_seen = self.barrier.cur
            result = self._on_pull(m, addr, arrival, start)
            if result == "replied":
                return  # logged by _answer_pull
        elif m.op == Op.DONE and m.flags & FLAG_HOT_PUSHED:
            result = self._on_hot_pushed(m)
        elif m.op == Op.DONE:
            result = self._on_done(m, addr, arrival, start)
        elif m.op == Op.COLLECT_REPLY:
            result = self.barrier.on_collect_reply(m)
        elif m.op == Op.WRITEBACK_ACK:
            result = self.barrier.on_writeback_ack(m)
        else:
            result = "unexpected_op"
        if result in _MISCONFIGURED and not self.counters[result]:
            # workers would otherwise retransmit silently until their deadline
            print(f"ps: {_MISCONFIGURED[result]} (from {addr[0]}:{addr[1]}: {m})", file=sys.stderr)
        self.counters[result] += 1
        # DONEs are logged when DONE_ACK goes out; switch replies with their requests.
        if result not in ("barrier", "collect_reply", "writeback_ack", "hot_pushed"):
            replied = result in ("accepted", "dup", "reack")
            name = _OP_NAMES.get(m.op) or str(m.op)
            self._row(arrival, start, self._sent_at if replied else None, name, m, result, addr)

    def _send(self, data: bytes, addr: Address) -> None:
        # Stamped before the send: the receiver may get the reply, and the core, before
        # sendto returns, and the latency dissection reads this time as the reply's.
        self._sent_at = time.time()
        self._send_datagram(data, addr)

    def _keys_ok(self, keys: tuple[int, ...]) -> bool:
        n, shard, space = self.cfg.n_shards, self.cfg.shard, self.cfg.key_space
        if not keys:
            return True
        if max(keys) >= space:
            return False
        return n == 1 or all(k % n == shard for k in keys)

    def _on_push(self, m: Message, addr: Address) -> str:
        b = self.barrier
        if m.seq == 0:
            return "malformed"
        d = self._dedup[m.worker_id]
        i = m.seq % DEDUP_WINDOW
        if d.seqs[i] == m.seq:
            self._send(self._ack(m, d.masks[i]), addr)
            return "dup"
        if d.seqs[i] > m.seq:
            return "stale"  # acked long ago (the worker's window moved past it)
        it = b.state(m.iteration)
        if it is None or b.finished:
            return "bad_iteration"  # cannot happen when paced: not acked, not applied
        if not self._keys_ok(m.keys):
            return "bad_key"
        d.seqs[i], d.masks[i] = m.seq, m.mask
        it.cold_keys.extend(m.keys)
        if self.sync.bound is None:
            b.apply_cold(m.keys, m.values)  # async: as they come
        else:
            it.cold_values.extend(m.values)
        self.counters["cold_entries"] += m.count
        self._send(self._ack(m, m.mask), addr)
        return "accepted"

    def _on_partial_push(self, m: Message) -> str:
        """A remote leaf's partial PUSH with entries the root refused (a slot conflict or an
        overflow there): its sums are applied here, once, and it counts toward the flush. It
        is not acked: the leaf sent it on the PS's FLUSH, and the PS counts it instead."""
        b = self.barrier
        if m.seq == 0:
            return "malformed"
        d = self._dedup[m.worker_id]
        i = m.seq % DEDUP_WINDOW
        if d.seqs[i] >= m.seq:
            return "partial_dup"
        if m.iteration != b.cur or b.it.phase not in (Phase.ACCUMULATING, Phase.FLUSHING):
            # cannot happen: a leaf is flushed once its rack is done, and the flush completes
            # only once this is in
            return "bad_iteration"
        if not self._keys_ok(m.keys):
            return "bad_key"
        d.seqs[i], d.masks[i] = m.seq, m.mask
        b.it.cold_keys.extend(m.keys)
        b.it.cold_values.extend(m.values)
        b.it.flush_remainders += 1
        self.counters["partial_entries"] += m.count
        return "partial"

    def _ack(self, m: Message, mask: int) -> bytes:
        return encode(Op.PUSH_ACK, m.job_id, m.worker_id, m.seq, m.iteration, mask=mask)

    def _on_pull(self, m: Message, addr: Address, arrival: float, start: float) -> str:
        b = self.barrier
        if not self._keys_ok(m.keys):
            return "bad_key"
        if m.iteration <= b.applied:
            # the parameters already hold its iteration: only a stale retransmission asks
            # this, and its worker has had its answer
            self.counters["late_pull"] += 1
            return "late"
        if not self.sync.allows(m.iteration - 1, b.applied):
            if len(self._held) >= self.cfg.max_held:
                self._held.popleft()
                self.counters["held_dropped"] += 1
            self._held.append((m, addr, arrival))
            return "held"
        self._answer_pull(m, addr, arrival, start)
        return "replied"

    def _answer_pull(self, m: Message, addr: Address, arrival: float, start: float) -> None:
        b = self.barrier
        values = self.params.take(m.keys).tolist() if m.keys else []
        if values and (min(values) < INT32_MIN or max(values) > INT32_MAX):
            values = [min(max(v, INT32_MIN), INT32_MAX) for v in values]
            self.counters["saturated"] += 1
        # mask: the switch's cache-hit bits, plus the keys this PS knows the cache holds for
        # this iteration (acked WRITEBACKs), so that workers learn them as hot.
        mask, it, tag = m.mask, m.iteration, b.cache.tag
        if tag:
            # (in the barrier a refresh may already have moved the slot on to the next
            # iteration, unbeknown to this PS: only a stray resent pull comes then)
            switch_mask = m.mask if self.cfg.collect and not b.it.in_barrier else None
            for i, key in enumerate(m.keys):
                if tag.get(key) == it:  # cache.holds(key, it), on the hot path
                    if switch_mask is not None and not switch_mask >> i & 1:
                        # the switch passed it although it caches it for `it`: it has left
                        b.cache.not_served(key)
                        self.counters["evicted_not_served"] += 1
                    else:
                        mask |= 1 << i
        reply = encode(Op.PULL_REPLY, m.job_id, m.worker_id, m.seq, it, m.keys, values, mask=mask)
        stale = it - 1 - b.applied  # iterations whose sums the value lacks (0 in BSP)
        self.staleness[stale] += 1
        self._send(reply, addr)
        self.counters["pull"] += 1
        self._row(arrival, start, self._sent_at, "PULL", m, "replied", addr, stale)

    def _on_hot_pushed(self, m: Message) -> str:
        """A worker's hot pushes of an iteration are all acked (a DONE flagged HOT_PUSHED,
        never answered): its leaf may be flushed once its whole rack has said so or sent
        DONE (docs/design.md section 7). Counted only; a late or early one changes nothing."""
        b = self.barrier
        if m.seq != self.cfg.shard:
            return "bad_shard"
        if m.iteration != b.cur or b.it.phase is not Phase.ACCUMULATING:
            return "hot_pushed_late"
        b.it.hot_pushed.add(m.worker_id)
        b.on_done()
        return "hot_pushed"

    def _on_done(self, m: Message, addr: Address, arrival: float, start: float) -> str:
        b = self.barrier
        if m.seq != self.cfg.shard:
            return "bad_shard"  # the worker's shard list disagrees with ours
        self._addr[m.worker_id] = addr
        if m.iteration < b.cur:
            self._send(self._done_ack(m.worker_id, m.iteration), addr)
            return "reack"
        it = b.it if m.iteration == b.cur else b.state(m.iteration)
        if it is None or b.finished:
            return "bad_iteration"
        if m.worker_id in it.acked:
            self._send(self._done_ack(m.worker_id, m.iteration), addr)
            return "reack"  # acked early (ssp, async): its ack was lost
        if m.worker_id in it.done:
            return "waiting"  # a resent DONE while others are still pushing
        it.done[m.worker_id] = (arrival, start)
        if it is b.it:
            b.on_done()
        if self.sync.allows(m.iteration, b.applied):  # ssp, async: it may go on now
            self._ack_done(it, m.worker_id, 1, time.time())
        if it is b.it and b.complete(it) and it.phase is Phase.ACCUMULATING:
            b.finalize()
        return "barrier"

    def _ack_done(self, it: IterationState, worker: int, copies: int, now: float) -> None:
        """DONE_ACK of `it` to `worker` (`copies` times), and its DONE's log row."""
        ack = self._done_ack(worker, it.number)
        for _ in range(copies):
            self._send(ack, self._addr[worker])
        it.acked.add(worker)
        arrival, start = it.done[worker]
        m = Message(Op.DONE, 0, self.cfg.job_id, worker, self.cfg.shard, it.number, 0)
        self._row(arrival, start, now, "DONE", m, "barrier", self._addr[worker])

    def _done_ack(self, worker: int, iteration: int) -> bytes:
        # its entries: keys that left the switch's cache, announced at this release
        told = self._evicted_told if iteration == self._evicted_told_at else ()
        return encode(Op.DONE_ACK, self.cfg.job_id, worker, self.cfg.shard, iteration, told)

    def release(self, it: IterationState) -> None:
        """Iteration `it` is applied (and its hot keys written back): DONE_ACK to every worker,
        then the pulls held for the next iteration are answered."""
        now = time.time()
        # Workers that retransmit are losing packets: then a lost DONE_ACK, which costs a
        # worker a timeout and the whole job an iteration's wait, is made unlikely by a copy.
        copies = 2 if self._loss_seen and it.number - self._loss_seen <= 2 else 1
        self._evicted_told_at = it.number
        self._evicted_told = self.barrier.cache.take_evicted(MAX_ENTRIES, it.number + 1)
        self.counters["evicted_told"] += len(self._evicted_told)
        for w in sorted(it.done):
            if w not in it.acked:
                self._ack_done(it, w, copies, now)
        if self.sync.bound:  # ssp: DONEs of it + 1 .. it + S may go on now
            b = self.barrier
            for t in range(it.number + 1, it.number + self.sync.bound + 1):
                later = b.it if t == b.cur else b.ahead.get(t)
                if later is None:
                    continue
                for w in sorted(later.done):
                    if w not in later.acked:
                        self._ack_done(later, w, copies, now)

    def answer_held(self) -> None:
        """Answer the held pulls the applied iterations now allow."""
        applied = self.barrier.applied
        held, self._held = self._held, deque()
        for m, addr, arrival in held:
            if self.sync.allows(m.iteration - 1, applied):
                self._answer_pull(m, addr, arrival, time.time())
            else:
                self._held.append((m, addr, arrival))
