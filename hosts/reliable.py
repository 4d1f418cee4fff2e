"""The agents' one reliable request/reply engine (docs/design.md section 3).

A `ReliableChannel` sends typed `Request`s, each answered by one reply that echoes its `seq`,
and resends what is not answered. The worker uses one for its PULLs and PUSHes and one for its
DONEs; the PS uses one for its COLLECT, INVALIDATE and WRITEBACK packets to the switch. It owns
no socket and no loop: the agent passes it a `send` function, calls `pump()` when it wakes,
hands it each reply it matched (`answered`), and sleeps at most `wake_in()`.

Loss recovery (the rules both agents followed separately before):
- a request is resent (re-encoded with FLAG_RETRANSMIT) once its timeout passed (srtt + 4
  rttvar, doubled per resend, RFC 6298 through `RttEstimator`) and no reply at all came for
  one base timeout: replies still flowing mean a queue is being worked through;
- at once when a later request to the same destination is answered over an ordered path (the
  switch and the PS handle a port's packets in order), since then it, or its reply, was lost;
- a request with a retry budget (`retries`) is given up when it runs out (`on_lost`);
- a second reply to a resent request proves the resend spurious: the first reply answered an
  earlier send, so the time since the send before the last is a lower bound of the round trip,
  fed to the estimator (Karn's rule alone would never see the longer round trip of a queue).
  Counted as `spurious_retransmits`.

How many requests may be in flight is the `Window`'s (fixed for now).
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from contract.codec import Message, encode_message
from contract.constants import FLAG_RETRANSMIT
from hosts.agent import Address, RttEstimator

C = TypeVar("C")

_SPURIOUS_MEMORY = 4096  # answered resent requests remembered (really lost ones never pair)


@dataclass(eq=False)
class Request(Generic[C]):
    """One request until its reply: what is sent (`msg`, whose seq the reply echoes), where,
    and its transmissions (perf_counter times; `wall` is the first one on the wall clock)."""

    msg: Message
    dest: Address
    kind: str  # counter prefix: pull, push, done, collect, invalidate, writeback
    context: C | None = None  # the caller's (e.g. where a PULL's values go)
    retries: int | None = None  # resends allowed; None: until answered
    data: bytes = field(default=b"", repr=False)  # the first transmission (encoded if empty)
    first: float = 0.0
    wall: float = 0.0
    last: float = 0.0
    before_last: float = 0.0
    due: float = 0.0
    tries: int = 0  # resends so far

    def __post_init__(self) -> None:
        if not self.data:
            self.data = encode_message(self.msg)

    @property
    def id(self) -> int:
        return self.msg.seq

    def retransmission(self) -> bytes:
        """The request again, flagged RETRANSMIT (informative: nothing else changes)."""
        return encode_message(self.msg._replace(flags=self.msg.flags | FLAG_RETRANSMIT))

    @property
    def exhausted(self) -> bool:
        return self.retries is not None and self.tries >= self.retries


class Window:
    """How many requests may be in flight: `limit`. The channel reports round trips, losses
    and spurious resends to it (for a window that adapts)."""

    def __init__(self, limit: int, adaptive: bool = False) -> None:
        self.limit, self.adaptive = limit, adaptive
        self.cwnd = float(limit)

    def allowed(self) -> int:
        return int(self.cwnd)

    def on_sample(self, rtt: float, path: object, now: float, srtt: float) -> None:
        """A first transmission's round trip on `path` (e.g. answered by the switch or not)."""

    def on_loss(self, now: float, srtt: float, timeout: bool) -> None:
        """A resend, after a timeout or a fast retransmit."""

    def on_spurious(self) -> None:
        """A resend proved spurious."""


class ReliableChannel(Generic[C]):
    """Requests to one or more destinations, sent within a `Window`, resent until answered
    (or their retry budget runs out). Requests are sent in submission order, and their seqs
    must increase in that order (fast retransmit relies on it)."""

    def __init__(
        self,
        send: Callable[[bytes, Address], None],
        counters: Counter[str],
        rtt: RttEstimator,
        window: Window,
        *,
        span: int | None = None,
        track_spurious: bool = True,
        copies: Callable[[], int] | None = None,
        on_resend: Callable[[Request[C]], None] | None = None,
        on_lost: Callable[[Request[C]], None] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        """`span`: a request is sent only while its seq is below the lowest unanswered one
        plus span. `track_spurious`: seqs are never reused (a DONE's is), so a second reply
        identifies a spurious resend. `copies()`: how many copies of a first transmission to
        send. `on_lost`: a request given up (out of retries, or cancelled). `clock`: the
        monotonic clock of the transmission times (tests drive it)."""
        self._send, self.counters, self.rtt, self.window = send, counters, rtt, window
        self.span, self.track_spurious = span, track_spurious
        self._copies, self._on_resend, self._on_lost = copies, on_resend, on_lost
        self._clock = clock
        self.queue: deque[Request[C]] = deque()
        self.inflight: dict[int, Request[C]] = {}  # insertion order = seq order
        self._quiet = 0.0  # no resend before this
        self._resent_answered: dict[tuple[int, int], float] = {}  # (op, seq) -> rtt bound

    # --- what the agent asks ---

    def submit(self, reqs: Iterable[Request[C]]) -> None:
        self.queue.extend(reqs)
        self._quiet = max(self._quiet, self._clock() + self.rtt.timeout())

    def busy(self, kind: str | None = None) -> bool:
        """Whether requests (of `kind`) are queued or unanswered."""
        if kind is None:
            return bool(self.queue or self.inflight)
        return any(r.kind == kind for r in self.queue) or any(
            r.kind == kind for r in self.inflight.values()
        )

    def queued(self, kind: str | None = None) -> bool:
        """Whether requests (of `kind`) still wait for room in the window."""
        return any(kind is None or r.kind == kind for r in self.queue)

    def cancel(self, kind: str) -> None:
        """Drop `kind`'s queued requests (counted `<kind>_dropped`) and give up its
        unanswered ones (`<kind>_unanswered`, on_lost)."""
        kept = deque(r for r in self.queue if r.kind != kind)
        if len(kept) != len(self.queue):
            self.counters[f"{kind}_dropped"] += len(self.queue) - len(kept)
            self.queue = kept
        for r in [r for r in self.inflight.values() if r.kind == kind]:
            self._give_up(r)

    def pump(self) -> None:
        """Resend (or give up) what is due, then send what the window has room for."""
        now = self._clock()
        if now >= self._quiet:
            for r in [r for r in self.inflight.values() if r.due <= now]:
                if r.exhausted:
                    self._give_up(r)
                else:
                    self._resend(r, now)
                    self.window.on_loss(now, self._srtt(), timeout=True)
        self._fill()

    def wake_in(self, limit: float) -> float:
        """Seconds until pump() has something to resend, at most `limit`."""
        if not self.inflight:
            return limit
        due = max(self._quiet, min(r.due for r in self.inflight.values()))
        return min(limit, max(0.0, due - self._clock()))

    def lookup(self, seq: int) -> Request[C] | None:
        return self.inflight.get(seq)

    def answered(self, r: Request[C], reply: Message, *, ordered: bool, path: object = 0) -> None:
        """`reply` answers `r` (the caller checked it). `ordered`: it came over a path that
        keeps order with the requests sent before `r` to the same destination (so those
        still unanswered were lost). `path`: the class of path for the delay signal."""
        del self.inflight[r.id]
        now = self._clock()
        if r.tries == 0:
            sample = now - r.first
            self.rtt.sample(sample)
            self.window.on_sample(sample, path, now, self._srtt())
        elif self.track_spurious:
            # If a second reply follows, this one answered a send before the last (the
            # paths keep order), so now - before_last is a lower bound of its round trip.
            self._resent_answered[reply.op, reply.seq] = now - r.before_last
            if len(self._resent_answered) > _SPURIOUS_MEMORY:
                del self._resent_answered[next(iter(self._resent_answered))]
        self._quiet = now + self.rtt.timeout()
        if ordered:
            self._fast_retransmit(r, now)

    def spurious(self, reply: Message) -> bool:
        """Whether `reply` is the second reply to an answered, resent request: the resend
        was spurious (its round trip bound teaches the estimator; the window's loss decrease
        is undone)."""
        bound = self._resent_answered.pop((reply.op, reply.seq), None)
        if bound is None:
            return False
        self.rtt.sample(bound)
        self.window.on_spurious()
        self.counters["spurious_retransmits"] += 1
        return True

    # --- machinery ---

    def _srtt(self) -> float:
        return self.rtt.srtt if self.rtt.srtt is not None else self.rtt.timeout()

    def _fill(self) -> None:
        inflight, queue = self.inflight, self.queue
        while queue and len(inflight) < max(1, self.window.allowed()):
            r = queue[0]
            lowest = next(iter(inflight.values())).id if inflight else r.id
            if self.span is not None and r.id >= lowest + self.span:
                break
            queue.popleft()
            # Stamped at each send, not once per burst: a burst's later requests would
            # otherwise carry the time before the earlier ones' sends in their latency.
            r.first = r.last = self._clock()
            r.wall = time.time()
            r.due = r.first + self.rtt.timeout()
            for _ in range(self._copies() if self._copies else 1):
                self._send(r.data, r.dest)
            inflight[r.id] = r
            self.counters[f"{r.kind}_sent"] += 1

    def _fast_retransmit(self, answered: Request[C], now: float) -> None:
        for r in list(self.inflight.values()):  # in seq order, which is send order
            if r.id >= answered.id:
                break
            if r.dest == answered.dest and r.last <= answered.first and not r.exhausted:
                self._resend(r, now)
                self.counters[f"{r.kind}_fast_retransmits"] += 1
                self.window.on_loss(now, self._srtt(), timeout=False)

    def _resend(self, r: Request[C], now: float) -> None:
        r.tries += 1
        r.before_last, r.last = r.last, now
        r.due = now + self.rtt.timeout(r.tries)
        self._send(r.retransmission(), r.dest)
        self.counters[f"{r.kind}_retransmits"] += 1
        if self._on_resend is not None:
            self._on_resend(r)

    def _give_up(self, r: Request[C]) -> None:
        del self.inflight[r.id]
        self.counters[f"{r.kind}_unanswered"] += 1
        if self._on_lost is not None:
            self._on_lost(r)
