"""The PS's FLUSHes to the remote leaves (hosts/leaf_flush.py): waves, counts, resends; and
when the PS starts them (a rack's DONEs flagged HOT_PUSHED, over loopback UDP)."""

from __future__ import annotations

import contextlib
import socket
import time
from collections import Counter

import pytest

from contract.codec import decode, encode
from contract.constants import DEDUP_WINDOW, FLAG_HOT_PUSHED, FLAG_RETRANSMIT, MAX_ENTRIES, Op
from hosts.agent import AgentError
from hosts.leaf_flush import MIN_PROBE_GAP, MIN_RESEND, ROUND_SHRINK, Leaf, LeafFlush
from hosts.ps import ParameterServer, parse_leaf
from hosts.ps_config import PSConfig

LEAVES = (Leaf(("10.0.2.254", 18497), 7), Leaf(("10.0.3.254", 18497), 8))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def flusher(
    slots: int, leaves: tuple[Leaf, ...] = LEAVES
) -> tuple[LeafFlush, list, Clock, Counter]:
    sent: list = []
    clock, counters = Clock(), Counter()
    f = LeafFlush(
        3, leaves, slots, lambda data, dest: sent.append((decode(data), dest)), counters, clock
    )
    return f, sent, clock, counters


# leaf 7 has workers 0 and 1 behind it, leaf 8 worker 2; worker 3 is on the PS's leaf
RACKS = (
    Leaf(("10.0.2.254", 18497), 7, frozenset({0, 1})),
    Leaf(("10.0.3.254", 18497), 8, frozenset({2})),
)


def test_every_batch_of_every_leaf_is_flushed_once_in_waves_the_dedup_window_allows() -> None:
    batches = DEDUP_WINDOW + 36
    f, sent, _, _ = flusher(batches * MAX_ENTRIES - 3)
    f.start(5)
    assert len(sent) == 2 * DEDUP_WINDOW and f.expected == 2 * DEDUP_WINDOW
    f.on_count(2 * DEDUP_WINDOW - 1)  # one short: no second wave yet
    assert len(sent) == 2 * DEDUP_WINDOW and not f.done
    f.on_count(2 * DEDUP_WINDOW)
    assert len(sent) == 2 * batches and not f.done
    f.on_count(2 * batches)
    assert f.done
    for leaf in LEAVES:
        mine = [m for m, dest in sent if dest == leaf.address]
        assert all(m.op == Op.FLUSH and m.job_id == 3 and m.iteration == 5 for m in mine)
        assert all(m.worker_id == leaf.pseudo_worker and m.count == 0 for m in mine)
        assert sorted(m.aux for m in mine) == list(range(batches))
        assert [m.seq for m in mine] == list(range(1, batches + 1))


def test_seqs_go_on_across_iterations() -> None:
    f, sent, _, _ = flusher(2 * MAX_ENTRIES)
    f.start(1)
    f.on_count(4)
    f.start(2)
    seqs = [m.seq for m, dest in sent if dest == LEAVES[0].address]
    assert seqs == [1, 2, 3, 4]


def test_a_short_count_is_resent_only_once_it_stops_growing_past_the_timeout() -> None:
    f, sent, clock, counters = flusher(3 * MAX_ENTRIES)
    f.start(9)
    first = list(sent)
    clock.now += 0.001
    f.on_count(2)
    assert len(sent) == len(first) and f.probe_due() > 0
    clock.now += MIN_RESEND
    f.on_count(4)  # still growing: queued behind the links, not lost
    assert len(sent) == len(first)
    clock.now += 0.001
    f.on_count(4)  # stuck short past the timeout: lost
    resent = sent[len(first) :]
    assert len(resent) == len(first) and counters["flush_resent"] == len(first)
    # a resend repeats each FLUSH, flagged as a retransmission
    assert [(m.seq, m.aux, d) for m, d in resent] == [(m.seq, m.aux, d) for m, d in first]
    assert all(m.flags & FLAG_RETRANSMIT for m, _ in resent)
    f.on_count(6)
    assert f.done


def test_a_count_answered_after_completion_changes_nothing() -> None:
    f, sent, _, _ = flusher(MAX_ENTRIES)
    f.start(1)
    f.on_count(2)
    n = len(sent)
    f.on_count(0)
    assert f.done and len(sent) == n


def test_a_leaf_is_flushed_as_soon_as_its_whole_rack_is_done_and_the_rest_at_the_barrier() -> None:
    f, sent, _, counters = flusher(2 * MAX_ENTRIES, RACKS)
    f.racks_done(4, {0})
    assert sent == []  # worker 1, behind the same leaf, may still push to it
    f.racks_done(4, {0, 3})
    assert sent == []
    f.racks_done(4, {0, 1, 3})
    assert [(m.worker_id, m.aux, m.iteration) for m, _ in sent] == [(7, 0, 4), (7, 1, 4)]
    f.racks_done(4, {0, 1, 3})  # a DONE resent: nothing twice
    assert len(sent) == 2 and counters["flush_early"] == 1
    f.on_count(2)  # no probe is asked before the barrier: a count then changes nothing
    assert not f.done
    f.start(4)  # leaf 8's rack (worker 2) is done only now: flushed at the barrier
    assert [(m.worker_id, m.aux) for m, _ in sent[2:]] == [(8, 0), (8, 1)]
    assert f.expected == 4
    f.on_count(4)
    assert f.done
    # the next iteration starts anew, seqs going on
    f.racks_done(5, {2})
    assert [(m.worker_id, m.seq, m.iteration) for m, _ in sent[4:]] == [(8, 3, 5), (8, 4, 5)]


def test_a_leaf_whose_rack_is_not_known_waits_for_the_barrier() -> None:
    f, sent, _, _ = flusher(MAX_ENTRIES)
    f.racks_done(1, {0, 1, 2, 3})
    assert sent == []
    f.start(1)
    assert len(sent) == 2


def test_a_short_count_at_the_barrier_resends_the_early_waves_too() -> None:
    f, sent, clock, counters = flusher(MAX_ENTRIES, RACKS)
    f.racks_done(2, {0, 1, 2})  # both racks done while worker 3 still pushes
    clock.now += 1.0  # long before the barrier
    f.start(2)
    assert f.probe_due() == 0  # the early wave is long due: probe at once
    f.on_count(1)  # one of the two partial PUSHes is missing
    assert len(sent) == 2
    clock.now += 0.002
    f.on_count(1)  # and it does not come: lost
    resent = [(m.worker_id, m.seq) for m, _ in sent[2:]]
    assert resent == [(7, 1), (8, 1)] and counters["flush_resent"] == 2
    f.on_count(2)
    assert f.done


def test_a_growing_count_is_probed_again_when_it_should_be_complete() -> None:
    f, _, clock, _ = flusher(8 * MAX_ENTRIES)
    f.start(1)  # 16 FLUSHes
    clock.now += 0.010
    f.on_count(4)  # 4 in 10 ms: the other 12 need about 30 ms more
    assert f.probe_due() == pytest.approx(0.030)
    clock.now += 0.030
    f.on_count(13)  # 9 in 30 ms: the last 3 in 10 ms
    assert f.probe_due() == pytest.approx(0.010)
    clock.now += 0.010
    f.on_count(16)
    assert f.done


def test_a_count_complete_at_its_first_probe_shortens_the_next_wait() -> None:
    f, _, clock, _ = flusher(MAX_ENTRIES)
    f.start(1)
    clock.now += 0.008
    f.on_count(1)  # short: complete at the next probe, 20 ms after the send
    clock.now += 0.012
    f.on_count(2)
    f.start(2)
    assert f.probe_due() == pytest.approx(0.020)  # that wave's time
    clock.now += 0.020
    f.on_count(4)  # complete at once: maybe sooner, so the next probe comes earlier
    f.start(3)
    assert f.probe_due() == pytest.approx(ROUND_SHRINK * 0.020)
    clock.now += 0.001
    f.on_count(4)  # nothing more yet: probe again after a short gap
    assert 0 < f.probe_due() <= ROUND_SHRINK * 0.020 and f.probe_due() >= MIN_PROBE_GAP


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("10.0.2.254/15", True),
        ("10.0.2.254:9000/3", True),
        ("10.0.2.254/15/3,4,5", True),
        ("10.0.2.254/15/", True),
        ("10.0.2.254", False),
        ("/3", False),
        ("10.0.2.254/15/3,x", False),
        ("10.0.2.254/15/3/4", False),
    ],
)
def test_leaf_option_is_parsed_or_refused_clearly(text: str, ok: bool) -> None:
    if ok:
        leaf = parse_leaf(text)
        assert leaf.address[0] == "10.0.2.254" and leaf.pseudo_worker == int(text.split("/")[1])
        rack = text.split("/")[2] if text.count("/") == 2 else ""
        assert leaf.rack == {int(w) for w in rack.split(",") if w}
    else:
        with pytest.raises(AgentError, match="--leaf"):
            parse_leaf(text)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"collect": False, "switch": None}, "needs --collect"),
        ({"n_shards": 2}, "one PS shard"),
        ({"leaves": (Leaf(("10.0.2.254", 1), 1),)}, "pseudo-worker"),
        ({"leaves": (Leaf(("a", 1), 5), Leaf(("b", 1), 5))}, "pseudo-worker"),
        ({"leaves": (Leaf(("a", 1), 5, frozenset({3})),)}, "racks"),
        (
            {"leaves": (Leaf(("a", 1), 5, frozenset({1})), Leaf(("b", 1), 6, frozenset({1})))},
            "racks",
        ),
    ],
)
def test_leaf_configurations_that_cannot_work_are_refused(changes: dict, message: str) -> None:
    base = dict(
        job_id=1,
        n_workers=3,
        key_space=100,
        collect=True,
        switch=("10.0.1.254", 18497),
        hot_slots=16,
        leaves=LEAVES,
    )
    base.update(changes)
    with pytest.raises(AgentError, match=message):
        PSConfig(**base).validate()  # type: ignore[arg-type]


def test_a_rack_whose_hot_pushes_are_all_acked_is_flushed_before_its_dones() -> None:
    """The PS flushes a remote leaf once every worker behind it has sent DONE flagged
    HOT_PUSHED (or DONE): its cold pushes may still be queued on the PS's link then. The
    flag is never answered; one for another iteration changes nothing."""
    leaf_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    leaf_sock.bind(("127.0.0.1", 0))
    leaf_sock.settimeout(0.05)
    leaf = Leaf(leaf_sock.getsockname(), 5, frozenset({0, 1}))
    config = PSConfig(
        job_id=3, n_workers=3, key_space=100, bind=("127.0.0.1", 0), collect=True,
        switch=("127.0.0.1", 9), hot_slots=16, leaves=(leaf,),
    )  # fmt: skip
    ps = ParameterServer(config)
    worker = ("127.0.0.1", 40001)

    def flushes() -> list:
        got = []
        with contextlib.suppress(TimeoutError):
            while True:
                got.append(decode(leaf_sock.recv(2048)))
        return got

    def hot_pushed(w: int, t: int) -> None:
        data = encode(Op.DONE, 3, w, 0, t, flags=FLAG_HOT_PUSHED)
        ps.requests.handle(data, worker, time.time())

    try:
        hot_pushed(0, 1)
        hot_pushed(1, 2)  # a later iteration's: counted late, no flush
        hot_pushed(2, 1)  # worker 2 is on the root's rack
        assert flushes() == []
        hot_pushed(1, 1)
        sent = flushes()
        assert [(m.op, m.iteration, m.worker_id, m.aux) for m in sent] == [
            (Op.FLUSH, 1, 5, 0), (Op.FLUSH, 1, 5, 1)]  # fmt: skip
        hot_pushed(1, 1)  # again: nothing twice
        assert flushes() == []
        counters = ps.counters
        assert (counters["hot_pushed"], counters["hot_pushed_late"]) == (4, 1)
        assert counters["flush_early"] == 1 and not ps.it.done  # no DONE came
    finally:
        ps.close()
        leaf_sock.close()
