"""FLUSHing the remote leaves' partial sums up to the root (docs/design.md section 7).

With aggregation at every leaf, a remote leaf holds its rack's sums of iteration t. The PS
sends each remote leaf one FLUSH per batch of MAX_ENTRIES slot offsets; the leaf turns it into
a partial PUSH (its pseudo-worker's id and the FLUSH's seq) that the root absorbs like any
push. A leaf is flushed as soon as every worker of its rack has said that its hot pushes of
t are acked (a DONE flagged HOT_PUSHED, or DONE(t)), so the partial sums cross the spine
while the cold pushes still queue on the PS's link; a push of t the leaf gets after that is
summed nearer the PS (the leaf's flushed_iter). A leaf whose rack is not known is flushed at
the barrier. FLUSHes are not answered: the root counts the partial PUSHes it
absorbed whole, and at the barrier the PS reads that count with an empty COLLECT (a probe),
adding the partial PUSHes that reached it with refused entries. Short of the number sent, it
probes again later and, once the count stops growing past a timeout, sends every unconfirmed
FLUSH again (duplicates are absorbed once: the root deduplicates by (job, pseudo-worker,
seq)).

A pseudo-worker's seqs follow the workers' rule (design.md section 1): seq s is sent only once
every seq <= s - DEDUP_WINDOW is known absorbed, so a leaf's FLUSHes go in waves of at most
DEDUP_WINDOW, each confirmed before the next.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass

from contract.codec import encode
from contract.constants import DEDUP_WINDOW, FLAG_RETRANSMIT, MAX_ENTRIES, Op
from hosts.agent import Address

# The time from a wave's send to its last partial PUSH counted, before it is measured (s).
INITIAL_ROUND = 0.005
MIN_ROUND = 0.001  # s: the estimate never goes below this
# A probe that finds a wave complete at once says the round is at most that long; the
# estimate shrinks by this factor then, so it follows a wave that got shorter (the probes
# cannot see how much earlier it completed).
ROUND_SHRINK = 0.8
# Resend the unconfirmed FLUSHes when a probe finds the count short this many rounds after
# the last send.
RESEND_ROUNDS = 4
MIN_RESEND = 0.05  # s: never sooner (the switches' queues behind a BSP burst)
MIN_PROBE_GAP = 0.001  # s, doubled per probe that finds the count short, up to 8 ms
MAX_PROBE_DOUBLINGS = 3
MAX_PROBE_GAP = 0.032  # s: the longest a count that is growing waits for its next probe


@dataclass(frozen=True)
class Leaf:
    """A remote leaf: its service address (FLUSHes and the chained WRITEBACK go there), the
    worker id its partial PUSHes carry (past the job's real workers), and the job's workers
    behind it (`rack`; empty: not known, the leaf is flushed at the barrier)."""

    address: Address
    pseudo_worker: int
    rack: frozenset[int] = frozenset()


class LeafFlush:
    """The FLUSHes of one iteration at a time. `racks_done(t, done)` as workers' DONEs come in
    (flushes the leaves whose racks are all done), `start(t)` at the barrier (flushes the
    rest), then `on_count(absorbed)` for each probe's answer until `done`; `probe_due()` says
    when to ask the count next."""

    def __init__(
        self,
        job_id: int,
        leaves: tuple[Leaf, ...],
        hot_slots: int,
        send: Callable[[bytes, Address], None],
        counters: Counter[str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.job_id, self.leaves, self._send, self.counters = job_id, leaves, send, counters
        self._clock = clock
        self.batches = -(-hot_slots // MAX_ENTRIES)
        self._seq = {leaf.pseudo_worker: 1 for leaf in leaves}
        self._round = INITIAL_ROUND  # a wave's time to completion, as the probes bound it
        self.iteration = 0
        self.done = True
        self.expected = 0  # partial PUSHes sent this iteration (all waves so far)
        self._next_batch: dict[int, int] = {}  # pseudo-worker -> its next batch (started ones)
        self._barrier = False  # start(iteration) was called: every leaf is flushing
        # FLUSHes sent since the count last covered every one, as resent
        self._unconfirmed: list[tuple[bytes, Address]] = []
        self._sent_at = self._probe_at = 0.0
        self._probes = 0  # probes since the last send that found the count short
        self._first_at = 0.0  # when this iteration's first wave was sent
        self._last_count = (0.0, 0)  # the last short probe's (time, count)

    def _begin(self, iteration: int) -> None:
        self.iteration, self.done, self.expected, self._barrier = iteration, False, 0, False
        self._next_batch, self._unconfirmed = {}, []
        self._first_at, self._last_count = self._clock(), (0.0, 0)

    def racks_done(self, iteration: int, done: Collection[int]) -> None:
        """Workers `done` have said their hot pushes of `iteration` are acked (HOT_PUSHED or
        DONE): flush every leaf whose whole rack has."""
        if iteration != self.iteration:
            self._begin(iteration)
        ready = [
            leaf
            for leaf in self.leaves
            if leaf.rack and leaf.pseudo_worker not in self._next_batch and leaf.rack.issubset(done)
        ]
        if ready and not self._barrier:
            self.counters["flush_early"] += len(ready)
            self._send_waves(ready)

    def start(self, iteration: int) -> None:
        """The barrier of `iteration`: flush the leaves not flushed yet, then count."""
        if iteration != self.iteration:
            self._begin(iteration)
        self._barrier = True
        rest = [leaf for leaf in self.leaves if leaf.pseudo_worker not in self._next_batch]
        if rest:
            self._send_waves(rest)
        # the first probe when the last wave should be complete, at once if it long is
        self._probe_at, self._probes = max(self._sent_at + self._round, self._clock()), 0

    def probe_due(self) -> float:
        """Seconds until the count should be asked (0: now)."""
        return max(0.0, self._probe_at - self._clock())

    def on_count(self, absorbed: int) -> None:
        """The partial PUSHes of this iteration absorbed so far (the root's count plus those
        the PS took itself)."""
        if self.done or not self._barrier:
            return
        now = self._clock()
        waited = now - self._sent_at
        if absorbed >= self.expected:
            if self._probes:
                # complete between the last short probe and this one: an upper bound
                self._round = waited
            elif waited <= 2 * self._round:
                # complete at the first, timed probe: maybe sooner than the estimate
                self._round = max(MIN_ROUND, ROUND_SHRINK * min(self._round, waited))
            # else a wave sent long before the barrier: its time says nothing
            self._unconfirmed = []
            more = [
                leaf for leaf in self.leaves if self._next_batch[leaf.pseudo_worker] < self.batches
            ]
            if more:
                self._send_waves(more)
                self._probe_at, self._probes = now + self._round, 0
            else:
                self.done = True
            return
        # Resend only a count that stopped growing: partial PUSHes still being counted are
        # queued on the links (three racks' flushes take ~85 ms at 1 Mbit/s), not lost.
        stalled = self._probes > 0 and absorbed <= self._last_count[1]
        if stalled and waited >= max(MIN_RESEND, RESEND_ROUNDS * self._round):
            self.counters["flush_resent"] += len(self._unconfirmed)
            for data, dest in self._unconfirmed:
                self._send(data, dest)
            self._sent_at, waited, self._probes = now, 0.0, 0
        self._probe_at = now + self._next_gap(now, absorbed, waited)
        self._last_count = (now, absorbed)
        self._probes += 1

    def _next_gap(self, now: float, absorbed: int, waited: float) -> float:
        """When to probe a short count again: when the partial PUSHes, arriving as fast as
        they did so far, should all be in (they queue on the links at their rates); a gap
        that doubles while the count does not grow (a loss: the resend timer runs)."""
        then, before = self._last_count if self._probes else (self._first_at, 0)
        if absorbed > before and now > then:
            rate = (absorbed - before) / (now - then)
            return min(MAX_PROBE_GAP, max(MIN_PROBE_GAP, (self.expected - absorbed) / rate))
        gap = MIN_PROBE_GAP * 2 ** min(self._probes + 1, MAX_PROBE_DOUBLINGS)
        return max(self._round - waited, gap)

    def _send_waves(self, leaves: list[Leaf]) -> None:
        """Each of `leaves`' next wave: up to DEDUP_WINDOW batches from where it stands."""
        sent = 0
        for leaf in leaves:
            first = self._next_batch.get(leaf.pseudo_worker, 0)
            last = min(first + DEDUP_WINDOW, self.batches)
            for batch in range(first, last):
                seq = self._seq[leaf.pseudo_worker]
                self._seq[leaf.pseudo_worker] = seq + 1
                args = (Op.FLUSH, self.job_id, leaf.pseudo_worker, seq, self.iteration)
                self._send(encode(*args, aux=batch), leaf.address)
                resend = encode(*args, aux=batch, flags=FLAG_RETRANSMIT)
                self._unconfirmed.append((resend, leaf.address))
            self._next_batch[leaf.pseudo_worker] = last
            sent += last - first
        self.expected += sent
        self.counters["flush_sent"] += sent
        self._sent_at = self._clock()
