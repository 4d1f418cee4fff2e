"""hosts/reliable.py on its own: a fake clock and a list for a network."""

from __future__ import annotations

from collections import Counter

import pytest

from contract.codec import Message, decode
from contract.constants import FLAG_FROM_SWITCH, FLAG_RETRANSMIT, Op
from hosts.agent import RttEstimator
from hosts.reliable import ReliableChannel, Request, Window

PS, PS2 = ("10.0.0.1", 18497), ("10.0.0.2", 18497)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Net:
    """What the channel sent, decoded, with where to."""

    def __init__(self) -> None:
        self.sent: list[tuple[Message, tuple[str, int]]] = []

    def __call__(self, data: bytes, dest: tuple[str, int]) -> None:
        self.sent.append((decode(data), dest))

    def take(self) -> list[tuple[Message, tuple[str, int]]]:
        out, self.sent = self.sent, []
        return out


def push(seq: int, dest=PS, context=None, **kw) -> Request:
    m = Message(Op.PUSH, 0, 1, 2, seq, 1, 0, (seq,), (seq * 10,))
    return Request(m, dest, "push", context, **kw)


def ack(seq: int, flags: int = 0) -> Message:
    return Message(Op.PUSH_ACK, flags, 1, 2, seq, 1, 0)


def channel(window: Window | None = None, **kw):
    clock, net, counters = Clock(), Net(), Counter()
    rtt = RttEstimator(0.001, 1.0, initial=0.01)
    ch = ReliableChannel(net, counters, rtt, window or Window(64), clock=clock, **kw)
    return ch, clock, net, counters


def answer(ch: ReliableChannel, m: Message, **kw) -> Request:
    r = ch.lookup(m.seq)
    assert r is not None
    ch.answered(r, m, **kw)
    return r


def test_requests_are_typed_and_resent_through_the_codec_with_the_flag() -> None:
    ch, clock, net, counters = channel()
    r = push(1, context={"why": "the caller's"})
    assert r.id == 1 and r.kind == "push" and decode(r.data) == r.msg
    ch.submit([r])
    ch.pump()
    [(m, dest)] = net.take()
    assert m == r.msg and dest == PS and r.tries == 0 and r.first == clock.now
    clock.now += 0.005
    ch.pump()
    assert net.take() == []  # not due yet (initial timeout 10 ms)
    clock.now += 0.006
    ch.pump()
    [(m, _)] = net.take()
    assert m == r.msg._replace(flags=FLAG_RETRANSMIT)  # the same request, flagged
    assert r.tries == 1 and counters["push_retransmits"] == 1
    assert r.due - clock.now == pytest.approx(0.02)  # doubled per resend


def test_span_bounds_seqs_ahead_of_the_lowest_unanswered() -> None:
    ch, _, net, _ = channel(span=4)
    ch.submit([push(s) for s in range(1, 11)])
    ch.pump()
    assert [m.seq for m, _ in net.take()] == [1, 2, 3, 4]
    answer(ch, ack(2), ordered=False)
    ch.pump()
    assert net.take() == []  # seq 1 still unanswered: 5 would be 4 ahead of it
    answer(ch, ack(1), ordered=False)
    ch.pump()
    assert [m.seq for m, _ in net.take()] == [5, 6]


def test_a_reply_over_an_ordered_path_resends_earlier_requests_to_that_destination() -> None:
    ch, clock, net, counters = channel()
    ch.submit([push(1), push(2, PS2), push(3), push(4)])
    ch.pump()
    net.take()
    clock.now += 0.001
    answer(ch, ack(3, FLAG_FROM_SWITCH), ordered=False)  # a switch reply may overtake
    assert net.take() == []
    answer(ch, ack(4), ordered=True)
    # seq 1 went to the same PS before 4 and is unanswered: lost. Seq 2 went elsewhere.
    assert [(m.seq, m.flags, d) for m, d in net.take()] == [(1, FLAG_RETRANSMIT, PS)]
    assert counters["push_fast_retransmits"] == 1
    answer(ch, ack(2), ordered=True)
    assert net.take() == []  # seq 1 was resent after 2 was sent: wait for it


def test_a_second_reply_to_a_resent_request_is_a_spurious_resend_and_a_round_trip() -> None:
    ch, clock, net, counters = channel()
    ch.submit([push(1)])
    ch.pump()
    clock.now += 0.011
    ch.pump()  # timeout: resent
    assert len(net.take()) == 2
    clock.now += 0.030  # the original's reply arrives 41 ms after it was sent
    assert not ch.spurious(ack(1))
    answer(ch, ack(1), ordered=False)
    assert ch.rtt.srtt is None  # Karn: a reply to a resent request is no sample
    assert ch.spurious(ack(1))  # the resend's reply: the first answered the original
    assert counters["spurious_retransmits"] == 1
    assert counters["spurious_timeout_retransmits"] == 1
    assert not counters["spurious_fast_retransmits"]
    assert ch.rtt.srtt == pytest.approx(0.041)  # the original's round trip (a lower bound)
    assert not ch.spurious(ack(1))  # once


def test_no_resend_while_replies_keep_coming() -> None:
    ch, clock, net, _ = channel()
    ch.submit([push(s) for s in range(1, 5)])
    ch.pump()
    net.take()
    for s in (1, 2):  # one reply per 8 ms: each one's due time passes, yet replies flow
        clock.now += 0.008
        answer(ch, ack(s), ordered=False)
        ch.pump()
    assert ch.rtt.srtt is not None and net.take() == []


def test_retry_budget_give_up_and_cancel() -> None:
    lost = []
    ch, clock, net, counters = channel(on_lost=lost.append)
    wb = push(1, retries=0)
    ch.submit([wb, push(2, retries=1)])
    ch.pump()
    clock.now += 0.011
    ch.pump()
    assert lost == [wb] and counters["push_unanswered"] == 1  # sent once, given up
    assert [m.seq for m, _ in net.take()] == [1, 2, 2]  # 2 resent once
    ch.submit([Request(push(3).msg, PS, "collect", None)])
    ch.cancel("push")
    assert [r.id for r in lost] == [1, 2] and ch.busy() and not ch.busy("push")
    ch.cancel("collect")
    assert not ch.busy() and counters["collect_dropped"] == 1  # never sent: dropped


def test_copies_of_first_transmissions() -> None:
    ch, clock, net, _ = channel(copies=lambda: 2)
    ch.submit([push(1)])
    ch.pump()
    assert len(net.take()) == 2
    clock.now += 0.011
    ch.pump()
    assert len(net.take()) == 1  # a resend is one packet


# --- the congestion window ---


def replies(w: Window, rtts: list[float], clock: Clock, path: object = 0, gap: float = 0.0005):
    for rtt in rtts:
        clock.now += gap
        w.on_sample(rtt, path, clock.now, srtt=0.002)


def test_window_grows_while_the_round_trip_stays_near_its_base() -> None:
    w, clock = Window(64), Clock()
    assert w.allowed() == 8  # starts small, not at the dedup window
    replies(w, [0.001] * 8, clock)
    assert w.allowed() == 16  # slow start: one more per reply
    replies(w, [0.0012] * 100, clock)
    assert w.allowed() == 64  # never past the limit (the dedup window)
    fixed = Window(64, adaptive=False)
    replies(fixed, [0.5] * 10, clock)
    assert fixed.allowed() == 64


def queued(rtt: float, rounds: int, gap: float) -> tuple[Window, Clock]:
    """A window grown to the limit on replies at the base round trip (1 ms), then facing a
    standing queue: `rounds` of 4 replies with round trip `rtt`, `gap` apart."""
    w, clock = Window(64), Clock()
    replies(w, [0.001] * 56, clock)
    assert w.allowed() == 64
    for _ in range(rounds):
        replies(w, [rtt] * 4, clock, gap=gap)
    return w, clock


def test_window_shrinks_when_requests_queue_and_regrows_by_one_per_window() -> None:
    # A standing queue far past the target (10 ms or one base round trip, plus at most 20 ms
    # of flow scaling): every reply of a round trip (2 ms) is 39 ms late; it halves per
    # round trip.
    w, clock = queued(0.040, 20, 0.001)
    assert w.allowed() <= 2 and w.decreases["delay"] >= 6
    replies(w, [0.001] * 10, clock)
    assert 3 <= w.allowed() <= 5  # additive increase now (slow start would give 12)


def test_late_replies_that_are_not_a_standing_queue_cost_nothing() -> None:
    # Scheduling jitter (one reply in 4 is 20 ms late) and bursts that drain within the
    # round trip (the first replies queued, the last not): some reply of every round trip
    # came back near the base, so nothing is queued for good.
    w, clock = Window(64), Clock()
    for _ in range(60):
        replies(w, [0.001] * 3 + [0.021], clock, gap=0.0005)
        replies(w, [0.015, 0.010, 0.005, 0.001], clock, gap=0.0005)
    assert w.allowed() == 64 and w.decreases["delay"] == 0


def test_base_round_trip_is_kept_per_path() -> None:
    # Replies from the switch come back far sooner than the PS's: measured against the
    # switch's base, every PS reply would look queued.
    w, clock = Window(64), Clock()
    for _ in range(30):
        replies(w, [0.0002], clock, path=True)
        replies(w, [0.002], clock, path=False)
    assert w.decreases["delay"] == 0 and w.allowed() == 64


def test_loss_shrinks_the_window_and_a_spurious_resend_undoes_it() -> None:
    w, clock = Window(64), Clock()
    replies(w, [0.001] * 24, clock)
    assert w.allowed() == 32
    w.on_loss(clock.now, 0.002, timeout=True)
    assert w.allowed() == 16
    w.on_loss(clock.now + 0.001, 0.002, timeout=True)
    assert w.allowed() == 16  # at most once per round trip
    w.on_spurious()
    assert w.allowed() == 32 and w.decreases["undo"] == 1
    w.on_loss(clock.now + 0.01, 0.002, timeout=False)
    assert w.allowed() == 22  # a fast retransmit: x0.7


def test_channel_sends_within_the_window_and_feeds_it() -> None:
    ch, clock, net, _ = channel(Window(64, initial=2))
    ch.submit([push(s) for s in range(1, 11)])
    ch.pump()
    assert [m.seq for m, _ in net.take()] == [1, 2]
    clock.now += 0.001
    answer(ch, ack(1), ordered=False)
    ch.pump()
    assert [m.seq for m, _ in net.take()] == [3, 4]  # slow start: the window is 3 now


def test_a_stalled_peer_gets_one_probe_per_destination_not_its_whole_window() -> None:
    ch, clock, net, counters = channel()
    ch.submit([push(1), push(2), push(3, PS2), push(4)])
    ch.pump()
    net.take()
    clock.now += 0.011  # nothing came back for a timeout
    ch.pump()
    assert [(m.seq, d) for m, d in net.take()] == [(1, PS), (3, PS2)]
    ch.pump()
    assert net.take() == []  # the rest wait for another timeout
    clock.now += 0.001
    for s in (1, 2, 3, 4):  # the peers wake up and answer the originals
        answer(ch, ack(s), ordered=True)
    assert net.take() == [] and counters["push_retransmits"] == 2


def test_the_timeout_covers_the_largest_round_trip_of_the_last_bursts() -> None:
    # Under BSP each phase's first requests queue behind every worker's; the next phases,
    # however long the iterations took, must not time them out by a drained queue's rtt.
    ch, clock, _, _ = channel()

    def burst(first: int, first_rtt: float) -> float:
        """20 requests, each sent before the last is answered; the first takes first_rtt,
        the rest 1 ms. Returns the timeout the first one got."""
        ch.submit([push(first)])
        ch.pump()
        timeout = ch.wake_in(1.0)
        for s in range(first, first + 20):
            clock.now += first_rtt if s == first else 0.001
            if s + 1 < first + 20:
                ch.submit([push(s + 1)])
                ch.pump()
            answer(ch, ack(s), ordered=False)
        clock.now += 5.0  # the barrier: far longer than PEAK_PERIOD
        return timeout

    burst(1, 0.030)  # this burst's first request waited 30 ms
    covered = [burst(s, 0.001) for s in (100, 200, 300, 400)]
    assert ch.rtt.timeout() < 0.010
    # the next 3 bursts still wait 30 ms; the 4th after it has forgotten that burst
    assert covered[:3] == [pytest.approx(0.030)] * 3 and covered[3] < 0.010


def test_the_tolerated_queue_grows_as_the_window_shrinks() -> None:
    # Swift's flow-based scaling: a 15 ms standing queue is too much for one big window,
    # but many workers with small windows share it, so the window settles, not at 1.
    w, _ = queued(0.016, 200, 0.003)
    assert 4 <= w.allowed() <= 14 and w.decreases["delay"] >= 3


def test_timeouts_with_no_reply_between_back_off() -> None:
    # Every worker's first burst at once can outlast the initial timeout: without backoff
    # one request per initial timeout was resent, each for nothing (RFC 6298 5.5).
    ch, clock, net, counters = channel()
    ch.submit([push(s) for s in range(1, 5)])
    ch.pump()
    net.take()
    resent_at = []
    for step in range(1, 80):
        clock.now = 100.0 + step * 0.001
        ch.pump()
        resent_at += [step] * len(net.take())
    # quiet timeouts of 10, 20, 40 ms (to a step of float rounding)
    assert [round(t, -1) for t in resent_at] == [10, 30, 70]
    answer(ch, ack(1), ordered=False)  # a reply ends the backoff
    clock.now += 0.011
    ch.pump()
    assert [m.seq for m, _ in net.take()] == [2] and counters["push_retransmits"] == 4


@pytest.mark.parametrize("sample_resent", [True, False])
def test_a_barrier_channel_learns_a_wait_longer_than_its_timeout(sample_resent: bool) -> None:
    # A DONE's reply comes only at the barrier, 200 ms on, far beyond the 10 ms initial
    # timeout: the first DONE is resent. Sampling first transmissions only (Karn), the
    # channel would never learn the wait and resend every later DONE as well.
    ch, clock, _, _ = channel(sample_resent=sample_resent, track_spurious=False)
    resent = []
    for it in range(1, 6):
        ch.submit([push(it)])
        ch.pump()
        for _ in range(40 - 2 * (it % 2)):  # 190-200 ms in 5 ms steps
            clock.now += 0.005
            ch.pump()
        r = answer(ch, ack(it), ordered=False)
        resent.append(r.tries)
        clock.now += 0.050  # the next iteration's pulls and pushes
    assert resent[0] >= 1  # the first wait is unknown: resent
    if sample_resent:
        assert resent[1:] == [0, 0, 0, 0]  # every later DONE waits it out
    else:
        assert all(n >= 1 for n in resent)  # the channel never learns it
