"""The agents' one reliable request/reply engine (docs/design.md section 3).

A `ReliableChannel` sends typed `Request`s, each answered by one reply that echoes its `seq`,
and resends what is not answered. The worker uses one for its PULLs and PUSHes and one for its
DONEs; the PS uses one for its COLLECT, INVALIDATE and WRITEBACK packets to the switch. It owns
no socket and no loop: the agent passes it a `send` function, calls `pump()` when it wakes,
hands it each reply it matched (`answered`), and sleeps at most `wake_in()`.

Loss recovery (the rules both agents followed separately before):
- a request is resent (re-encoded with FLAG_RETRANSMIT) once its timeout passed and no reply
  at all came for one timeout: replies still flowing mean a queue is being worked through.
  Then only the oldest due request per destination is resent (as TCP resends only its first
  unacknowledged segment on a timeout, RFC 6298 5.4); the others wait for another timeout, or
  for the fast retransmit below: a peer that stalled (a descheduled process on shared cores)
  would otherwise get its whole window again, for nothing;
- the timeout is srtt + 4 rttvar (RFC 6298, through `RttEstimator`), doubled per resend and
  per timeout with no reply between (RFC 6298 5.5), but at least the largest round trip of
  the last PEAK_PERIOD or two and of the last PEAK_SPANS bursts (a burst: from a submit to
  an idle channel until it idles again, or PEAK_PERIOD): under BSP all workers start a
  phase at once, so each iteration's first requests queue behind every worker's window, and
  an estimator smoothed over the burst's later, shorter round trips has forgotten that by
  the next iteration, however long the iteration took (a fixed time window did not cover
  the 2 s iterations of 32 workers behind BMv2);
- at once when a later request to the same destination is answered over an ordered path (the
  switch and the PS handle a port's packets in order), since then it, or its reply, was lost;
- a request with a retry budget (`retries`) is given up when it runs out (`on_lost`);
- a second reply to a resent request proves the resend spurious: the first reply answered an
  earlier send, so the time since the send before the last is a lower bound of the round trip,
  fed to the estimator (Karn's rule alone would never see the longer round trip of a queue).
  Counted as `spurious_retransmits`.

Congestion control (`Window`): the number of requests in flight adapts, AIMD on the window
with a delay signal, in the spirit of TCP Vegas and Swift, with CoDel's test for a standing
queue:
- each first transmission's round trip is compared with the smallest recent one on its path
  class (a reply from the switch and one from the PS cross different links, so each has its
  own base); once per round trip, the smallest excess over the base among that round trip's
  replies is the standing queue. A burst that drains within the round trip, or a reply late
  because a process was descheduled, leaves that minimum small; only a queue that every
  request met raises it;
- above the target (the larger of TARGET_FLOOR and TARGET_FACTOR base round trips, plus up to
  FLOW_SCALING more the smaller the window is: Swift's flow-based scaling) the window shrinks
  in proportion to the excess, as Swift does: by BETA * (excess - target) / rtt, at most by
  half; every reply adds 1 / window (one per round trip), or 1 until the first
  decrease (slow start, from INITIAL_WINDOW);
- a resend shrinks it too (x0.5 on a timeout, x0.7 on a fast retransmit, which shows the path
  still delivers), at most once per round trip, and a resend later proved spurious undoes
  that (Eifel);
- the window stays between 1 and the channel's limit (the dedup window, DEDUP_WINDOW = 64,
  for pushes: their seqs also never run more than `span` ahead of the lowest unanswered one).
Why delay and not loss alone: the links here do not drop (a queue at the 10 Mbit/s PS link just
grows), and a loss signal comes only after the timeouts, spurious or not, that the growing
queue causes. A standing queue of about 10 ms (measured: 5 ms made 16-worker offload runs
slower, 10 ms did not) keeps the bottleneck busy while a worker waits to be scheduled, and
bounds the round trip, and with it the timeout, instead of letting it grow with the number of
workers times 64.
Why flow scaling: with many workers each window is small, and a worker refills its window only
once it is scheduled (34 processes on 2 cores at 32 workers); the queue that keeps the PS link
busy meanwhile grows with the number of workers. Why the minimum rather than each reply
(Swift) or the share of late replies (DCTCP): Python processes on two shared cores add
milliseconds of scheduling jitter to single replies; reacting to them (tried first) kept the
windows at a few requests and made iterations slower than with no congestion control at all.
"""

from __future__ import annotations

import math
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from contract.codec import Message, encode_message
from contract.constants import FLAG_RETRANSMIT
from hosts.agent import Address, RttEstimator

C = TypeVar("C")

MIN_WINDOW = 1.0
INITIAL_WINDOW = 8.0
TARGET_FLOOR = 0.010  # s of standing queue always tolerated
TARGET_FACTOR = 1.0  # and a standing queue of up to this many base round trips
FLOW_SCALING = 0.020  # s more at a window of 1 (Swift's flow-based scaling; none at the limit)
BETA = 0.8  # Swift's scale of the decrease per round trip, by the excess over the target
MAX_DECREASE = 0.5  # at most halve per round trip on delay
LOSS_DECREASE = 0.5  # on a retransmission timeout
FAST_LOSS_DECREASE = 0.7  # on a fast retransmit (CUBIC's beta)
BASE_PERIOD = 10.0  # s: the base round trip is the minimum over the last one or two periods
PEAK_PERIOD = 1.0  # s: a span of the peak round trip ends when the channel idles or after this
PEAK_SPANS = 4  # the timeout covers the largest round trip of the current and the last 3 spans
_MAX_BACKOFF = 6  # the quiet timeout doubles at most this often (the estimator's cap bounds it)
_SPURIOUS_MEMORY = 4096  # answered resent requests remembered (really lost ones never pair)


@dataclass(eq=False, slots=True)
class Request(Generic[C]):
    """One request until its reply: what is sent (`msg`, whose seq the reply echoes), where,
    and its transmissions (perf_counter times; `wall` is the first one on the wall clock)."""

    msg: Message
    dest: Address
    kind: str  # counter prefix: pull, push, done, collect, invalidate, writeback
    context: C  # the caller's (e.g. where a PULL's values go; None if it needs none)
    retries: int | None = None  # resends allowed; None: until answered
    data: bytes = field(default=b"", repr=False)  # the first transmission (encoded if empty)
    first: float = 0.0
    wall: float = 0.0
    last: float = 0.0
    before_last: float = 0.0
    due: float = 0.0
    tries: int = 0  # resends so far
    trigger: str = ""  # what caused the last resend: "timeout" or "fast"

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


class _Windowed:
    """The extreme (min or max) sample of the current and the previous `period`."""

    __slots__ = ("cur", "period", "pick", "prev", "since")

    def __init__(self, pick: Callable[[float, float], float], period: float) -> None:
        self.pick, self.period = pick, period
        self.cur = self.prev = float("inf") if pick is min else 0.0
        self.since = 0.0

    def update(self, x: float, now: float) -> float:
        if now - self.since >= self.period:
            self.prev, self.cur, self.since = self.cur, x, now
        else:
            self.cur = self.pick(self.cur, x)
        return self.pick(self.cur, self.prev)

    def value(self) -> float:
        return self.pick(self.cur, self.prev)


class _PeakRtt:
    """The largest round trip of the last PEAK_PERIOD or two and of the current and the last
    PEAK_SPANS - 1 spans. A span ends when the channel goes idle (a BSP phase: one worker's
    pulls, or its pushes) or after PEAK_PERIOD, so the peak covers the last iteration however
    long iterations take, and at least a second of them when they are short."""

    __slots__ = ("recent", "since", "spans")

    def __init__(self) -> None:
        self.spans: deque[float] = deque([0.0], maxlen=PEAK_SPANS)
        self.since = 0.0
        self.recent = _Windowed(max, PEAK_PERIOD)

    def new_span(self, now: float) -> None:
        self.spans.append(0.0)
        self.since = now

    def update(self, rtt: float, now: float) -> None:
        self.recent.update(rtt, now)
        if now - self.since >= PEAK_PERIOD:
            self.new_span(now)
        if rtt > self.spans[-1]:
            self.spans[-1] = rtt

    def value(self) -> float:
        return max(max(self.spans), self.recent.value())


class Window:
    """How many requests may be in flight: AIMD on delay and loss (module docstring), or a
    fixed `limit` when not `adaptive`."""

    def __init__(self, limit: int, adaptive: bool = True, initial: float = INITIAL_WINDOW) -> None:
        self.limit, self.adaptive = limit, adaptive
        self.cwnd = float(min(initial, limit) if adaptive else limit)
        self.ssthresh = float(limit)
        self.base: dict[object, _Windowed] = {}
        self._hold = 0.0  # no decrease before this (once per round trip)
        self._undo: float | None = None  # the window before a loss decrease
        # the smallest queueing (and its round trip) of the replies of this round trip
        self._excess, self._excess_rtt = float("inf"), 0.0
        self._epoch_end = 0.0
        self.decreases: Counter[str] = Counter()  # delay, loss, undo

    def allowed(self) -> int:
        return int(self.cwnd)

    def describe(self) -> dict:
        """For summaries: the window now, the base round trip per path (ms), decreases."""
        return {
            "window": round(self.cwnd, 2),
            "base_rtt_ms": {str(p): round(1e3 * m.value(), 3) for p, m in self.base.items()},
            **{f"window_{k}": n for k, n in self.decreases.items()},
        }

    def on_sample(self, rtt: float, path: object, now: float, srtt: float) -> None:
        """A first transmission's round trip on `path` (e.g. answered by the switch or not)."""
        if not self.adaptive:
            return
        m = self.base.get(path)
        if m is None:
            m = self.base[path] = _Windowed(min, BASE_PERIOD)
        base = m.update(rtt, now)
        # The queue a round trip's requests all met is its smallest excess over the base:
        # a burst that drains within the round trip, or one late reply, leaves it small.
        excess = rtt - base
        if excess < self._excess:
            self._excess, self._excess_rtt = excess, rtt
        self.cwnd += 1.0 if self.cwnd < self.ssthresh else 1.0 / self.cwnd
        if self.cwnd > self.limit:
            self.cwnd = float(self.limit)
        if now < self._epoch_end:
            return
        target = max(TARGET_FLOOR, TARGET_FACTOR * base) + self._flow_scaling()
        if self._excess > target and now >= self._hold:
            over = (self._excess - target) / self._excess_rtt
            self._undo = None
            self._decrease(max(1.0 - BETA * over, 1.0 - MAX_DECREASE), now, srtt, "delay")
        self._excess, self._epoch_end = float("inf"), now + srtt

    def _flow_scaling(self) -> float:
        """Swift's flow-based scaling: the smaller the window, the more queue is tolerated,
        FLOW_SCALING * (1/sqrt(window) - 1/sqrt(limit)) / (1 - 1/sqrt(limit)). Many workers
        sharing the PS link each get a small window, and each waits to be scheduled before
        it refills it; a queue that grows with their number keeps the link busy meanwhile."""
        top = 1.0 / math.sqrt(self.limit)
        if top >= 1.0:
            return 0.0
        share = (1.0 / math.sqrt(max(self.cwnd, 1.0)) - top) / (1.0 - top)
        return FLOW_SCALING * min(1.0, max(0.0, share))

    def on_loss(self, now: float, srtt: float, timeout: bool) -> None:
        if self.adaptive and now >= self._hold:
            self._undo = self.cwnd
            self._decrease(LOSS_DECREASE if timeout else FAST_LOSS_DECREASE, now, srtt, "loss")

    def on_spurious(self) -> None:
        """A resend proved spurious: undo the loss decrease it caused (if none came since)."""
        if self._undo is not None and self._undo > self.cwnd:
            self.cwnd, self.ssthresh, self._undo = self._undo, max(self.ssthresh, self._undo), None
            self.decreases["undo"] += 1

    def _decrease(self, factor: float, now: float, srtt: float, why: str) -> None:
        self.cwnd = max(MIN_WINDOW, self.cwnd * factor)
        self.ssthresh = self.cwnd
        self._hold = now + srtt
        self.decreases[why] += 1


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
        sample_resent: bool = False,
    ) -> None:
        """`span`: a request is sent only while its seq is below the lowest unanswered one
        plus span. `track_spurious`: seqs are never reused (a DONE's is), so a second reply
        identifies a spurious resend. `copies()`: how many copies of a first transmission to
        send. `on_lost`: a request given up (out of retries, or cancelled). `clock`: the
        monotonic clock of the transmission times (tests drive it). `sample_resent`: a reply
        to a resent request still bounds the round trip from the first send, and the
        timeout covers it (for DONEs: their replies wait for the barrier, so a timeout below
        the wait resends every DONE, and Karn's rule, sampling first transmissions only,
        would then never learn the wait)."""
        self._send, self.counters, self.rtt, self.window = send, counters, rtt, window
        self.span, self.track_spurious = span, track_spurious
        self._copies, self._on_resend, self._on_lost = copies, on_resend, on_lost
        self._clock = clock
        self.sample_resent = sample_resent
        self.queue: deque[Request[C]] = deque()
        self.inflight: dict[int, Request[C]] = {}  # insertion order = seq order
        self._quiet_from = 0.0  # no resend before this plus a timeout (the last reply)
        self._backoff = 0  # timeouts in a row with no reply between: the quiet timeout doubles
        # (op, seq) -> (round trip bound, what triggered the last resend)
        self._resent_answered: dict[tuple[int, int], tuple[float, str]] = {}
        self._peak = _PeakRtt()  # round trips, for the timeout
        self.max_rtt = 0.0  # the largest round trip measured (a first transmission's)
        self._rto: float | None = None  # _timeout() until the next sample

    # --- what the agent asks ---

    def submit(self, reqs: Iterable[Request[C]]) -> None:
        now = self._clock()
        if not self.queue and not self.inflight:
            self._peak.new_span(now)  # a new burst (phase): keep the last ones' peaks
        self.queue.extend(reqs)
        self._quiet_from = max(self._quiet_from, now)

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
        if now >= self._quiet_from + self._timeout(self._backoff):
            probed: set[Address] = set()
            for r in [r for r in self.inflight.values() if r.due <= now]:
                if r.exhausted:
                    self._give_up(r)
                elif r.dest not in probed:
                    # Only the oldest due request per destination: when nothing came back for
                    # a timeout, the peer may just have stalled (a descheduled process), and
                    # then every request in flight would be resent for nothing. Its reply, or
                    # the next timeout, tells.
                    probed.add(r.dest)
                    self._resend(r, now, "timeout")
                    self.window.on_loss(now, self._srtt(), timeout=True)
            if probed:
                # Still no reply: back off, as TCP's one retransmission timer does (RFC 6298
                # 5.5). Without it a window whose first round trip outlasts the initial
                # timeout (every worker's first burst at once) is resent one request per
                # initial timeout, each resend spurious.
                self._quiet_from = now
                self._backoff = min(self._backoff + 1, _MAX_BACKOFF)
        self._fill()

    def wake_in(self, limit: float) -> float:
        """Seconds until pump() has something to resend, at most `limit`."""
        if not self.inflight:
            return limit
        now = self._clock()
        quiet = self._quiet_from + self._timeout(self._backoff)
        if quiet > now:  # nothing is resent before then (a reply usually comes first)
            return min(limit, quiet - now)
        due = min(r.due for r in self.inflight.values())
        return min(limit, max(0.0, due - now))

    def lookup(self, seq: int) -> Request[C] | None:
        return self.inflight.get(seq)

    def answered(self, r: Request[C], reply: Message, *, ordered: bool, path: object = 0) -> None:
        """`reply` answers `r` (the caller checked it). `ordered`: it came over a path that
        keeps order with the requests sent before `r` to the same destination (so those
        still unanswered were lost). `path`: the class of path for the delay signal."""
        del self.inflight[r.msg.seq]
        now = self._clock()
        if r.tries == 0:
            sample = now - r.first
            self.rtt.sample(sample)
            if sample > self.max_rtt:
                self.max_rtt = sample
            self._peak.update(sample, now)
            self._rto = None
            if self.window.adaptive:
                self.window.on_sample(sample, path, now, self._srtt())
        elif self.sample_resent:
            # An upper bound of the round trip (the first send may have been lost): the
            # estimator learns the waits' spread, and the peak keeps the longest recent one.
            bound = now - r.first
            self.rtt.sample(bound)
            self._peak.update(bound, now)
            self._rto = None
        elif self.track_spurious:
            # If a second reply follows, this one answered a send before the last (the
            # paths keep order), so now - before_last is a lower bound of its round trip.
            self._resent_answered[reply.op, reply.seq] = (now - r.before_last, r.trigger)
            if len(self._resent_answered) > _SPURIOUS_MEMORY:
                del self._resent_answered[next(iter(self._resent_answered))]
        self._quiet_from, self._backoff = now, 0
        if ordered and self.inflight and next(iter(self.inflight)) < r.msg.seq:
            self._fast_retransmit(r, now)  # something sent before r is still unanswered

    def spurious(self, reply: Message) -> bool:
        """Whether `reply` is the second reply to an answered, resent request: the resend
        was spurious (its round trip bound teaches the estimator; the window's loss decrease
        is undone)."""
        if not self._resent_answered:
            return False
        found = self._resent_answered.pop((reply.op, reply.seq), None)
        if found is None:
            return False
        bound, trigger = found
        self.rtt.sample(bound)
        self._peak.update(bound, self._clock())
        self._rto = None
        self.window.on_spurious()
        self.counters["spurious_retransmits"] += 1
        self.counters[f"spurious_{trigger}_retransmits"] += 1  # which rule fired for nothing
        return True

    # --- machinery ---

    def _srtt(self) -> float:
        return self.rtt.srtt if self.rtt.srtt is not None else self.rtt.timeout()

    def _timeout(self, tries: int = 0) -> float:
        """The estimator's timeout, but at least the largest recent round trip: in BSP every
        worker starts a phase at once, so the first requests of each burst queue behind all
        the others' windows, every iteration, and an estimator smoothed over the burst's
        later, shorter round trips has forgotten that by the next one."""
        if tries == 0 and self._rto is not None:
            return self._rto
        peak = self._peak.value()
        rto = self.rtt.timeout(tries)
        if peak > 0.0:
            rto = min(self.rtt.cap, max(rto, peak * (1 << tries)))
        if tries == 0:
            self._rto = rto
        return rto

    def _fill(self) -> None:
        inflight, queue = self.inflight, self.queue
        if not queue:
            return
        room = max(1, self.window.allowed()) - len(inflight)
        end = None  # seqs from here on wait for the lowest unanswered one
        if self.span is not None:
            end = (next(iter(inflight.values())).id if inflight else queue[0].id) + self.span
        timeout, clock, send, counters = self._timeout(), self._clock, self._send, self.counters
        wall = time.time() - clock()  # the clock's offset to the wall clock
        while queue and room > 0:
            r = queue[0]
            if end is not None and r.id >= end:
                break
            queue.popleft()
            room -= 1
            # Stamped at each send, not once per burst: a burst's later requests would
            # otherwise carry the time before the earlier ones' sends in their latency.
            r.first = r.last = clock()
            r.wall = r.first + wall
            r.due = r.first + timeout
            for _ in range(self._copies() if self._copies else 1):
                send(r.data, r.dest)
            inflight[r.msg.seq] = r
            counters[r.kind + "_sent"] += 1

    def _fast_retransmit(self, answered: Request[C], now: float) -> None:
        last = answered.msg.seq
        for r in self.inflight.values():  # in seq order, which is send order
            if r.msg.seq >= last:
                break
            if r.dest == answered.dest and r.last <= answered.first and not r.exhausted:
                self._resend(r, now, "fast")
                self.counters[f"{r.kind}_fast_retransmits"] += 1
                self.window.on_loss(now, self._srtt(), timeout=False)

    def _resend(self, r: Request[C], now: float, trigger: str) -> None:
        r.tries += 1
        r.trigger = trigger
        r.before_last, r.last = r.last, now
        r.due = now + self._timeout(r.tries)
        self._send(r.retransmission(), r.dest)
        self.counters[f"{r.kind}_retransmits"] += 1
        if self._on_resend is not None:
            self._on_resend(r)

    def _give_up(self, r: Request[C]) -> None:
        del self.inflight[r.id]
        self.counters[f"{r.kind}_unanswered"] += 1
        if self._on_lost is not None:
            self._on_lost(r)
