"""FLUSHing the remote leaves' partial sums up to the root (docs/design.md section 7).

With aggregation at every leaf, a remote leaf holds its rack's sums of iteration t. At the
barrier the PS sends each remote leaf one FLUSH per batch of MAX_ENTRIES slot offsets; the
leaf turns it into a partial PUSH (its pseudo-worker's id and the FLUSH's seq) that the root
absorbs like any push. FLUSHes are not answered: the root counts the partial PUSHes it
absorbed whole, and the PS reads that count with an empty COLLECT (a probe), adding the
partial PUSHes that reached it with refused entries. Short of the number sent, it probes
again later and, past a timeout, sends every FLUSH of the wave again (duplicates are absorbed
once: the root deduplicates by (job, pseudo-worker, seq)).

A pseudo-worker's seqs follow the workers' rule (design.md section 1): seq s is sent only once
every seq <= s - DEDUP_WINDOW is known absorbed, so a leaf's FLUSHes go in waves of at most
DEDUP_WINDOW, each confirmed before the next.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from contract.codec import encode
from contract.constants import DEDUP_WINDOW, FLAG_RETRANSMIT, MAX_ENTRIES, Op
from hosts.agent import Address

# First probe this long after a wave is sent, before the flush round trip is known (s).
INITIAL_ROUND = 0.005
# Resend a wave when a probe finds it short this many flush round trips after sending it.
RESEND_ROUNDS = 4
MIN_RESEND = 0.05  # s: never sooner (the switches' queues behind a BSP burst)
MIN_PROBE_GAP = 0.001  # s, doubled per probe that finds the count short, up to 32 ms


@dataclass(frozen=True)
class Leaf:
    """A remote leaf: its service address (FLUSHes and the chained WRITEBACK go there) and
    the worker id its partial PUSHes carry (past the job's real workers)."""

    address: Address
    pseudo_worker: int


class LeafFlush:
    """The FLUSHes of one iteration at a time. `start(t)`, then `on_count(absorbed)` for each
    probe's answer until `done`; `probe_due()` says when to ask the count next."""

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
        self._round = INITIAL_ROUND  # the last wave's time to completion
        self.iteration = 0
        self.done = True
        self.expected = 0  # partial PUSHes sent this iteration (all waves so far)
        self._next_batch = 0
        self._wave: list[tuple[bytes, Address]] = []  # this wave's FLUSHes, as resent
        self._sent_at = self._probe_at = 0.0
        self._probes = 0

    def start(self, iteration: int) -> None:
        """Flush iteration `iteration`: send the first wave."""
        self.iteration, self.done, self.expected, self._next_batch = iteration, False, 0, 0
        self._send_wave()

    def probe_due(self) -> float:
        """Seconds until the count should be asked (0: now)."""
        return max(0.0, self._probe_at - self._clock())

    def on_count(self, absorbed: int) -> None:
        """The partial PUSHes of this iteration absorbed so far (the root's count plus those
        the PS took itself)."""
        if self.done:
            return
        now = self._clock()
        if absorbed >= self.expected:
            self._round = 0.5 * self._round + 0.5 * (now - self._sent_at)
            if self._next_batch >= self.batches:
                self.done = True
            else:
                self._send_wave()
            return
        waited = now - self._sent_at
        if waited >= max(MIN_RESEND, RESEND_ROUNDS * self._round):
            self.counters["flush_resent"] += len(self._wave)
            for data, dest in self._wave:
                self._send(data, dest)
            self._sent_at, waited = now, 0.0
        # ask again after the rest of a usual round, or a gap that doubles while the count
        # stays short (a probe is a packet on the PS's link too)
        self._probes += 1
        gap = MIN_PROBE_GAP * 2 ** min(self._probes, 5)
        self._probe_at = now + max(self._round - waited, gap)

    def _send_wave(self) -> None:
        first = self._next_batch
        last = min(first + DEDUP_WINDOW, self.batches)
        self._wave = []
        for leaf in self.leaves:
            for batch in range(first, last):
                seq = self._seq[leaf.pseudo_worker]
                self._seq[leaf.pseudo_worker] = seq + 1
                args = (Op.FLUSH, self.job_id, leaf.pseudo_worker, seq, self.iteration)
                self._send(encode(*args, aux=batch), leaf.address)
                self._wave.append((encode(*args, aux=batch, flags=FLAG_RETRANSMIT), leaf.address))
        self._next_batch = last
        self.expected += len(self._wave)
        self.counters["flush_sent"] += len(self._wave)
        now = self._clock()
        self._sent_at, self._probe_at, self._probes = now, now + self._round, 0
