"""The PS's FLUSHes to the remote leaves (hosts/leaf_flush.py): waves, counts, resends. Pure."""

from __future__ import annotations

from collections import Counter

import pytest

from contract.codec import decode
from contract.constants import DEDUP_WINDOW, FLAG_RETRANSMIT, MAX_ENTRIES, Op
from hosts.agent import AgentError
from hosts.leaf_flush import MIN_RESEND, Leaf, LeafFlush
from hosts.ps import parse_leaf
from hosts.ps_config import PSConfig

LEAVES = (Leaf(("10.0.2.254", 18497), 7), Leaf(("10.0.3.254", 18497), 8))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def flusher(slots: int) -> tuple[LeafFlush, list, Clock, Counter]:
    sent: list = []
    clock, counters = Clock(), Counter()
    f = LeafFlush(
        3, LEAVES, slots, lambda data, dest: sent.append((decode(data), dest)), counters, clock
    )
    return f, sent, clock, counters


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


def test_a_short_count_is_probed_again_and_the_wave_resent_only_after_the_timeout() -> None:
    f, sent, clock, counters = flusher(3 * MAX_ENTRIES)
    f.start(9)
    first = list(sent)
    clock.now += 0.001
    f.on_count(2)
    assert len(sent) == len(first) and f.probe_due() > 0
    clock.now += MIN_RESEND
    f.on_count(5)
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


@pytest.mark.parametrize(
    ("text", "ok"),
    [("10.0.2.254/15", True), ("10.0.2.254:9000/3", True), ("10.0.2.254", False), ("/3", False)],
)
def test_leaf_option_is_parsed_or_refused_clearly(text: str, ok: bool) -> None:
    if ok:
        leaf = parse_leaf(text)
        assert leaf.address[0] == "10.0.2.254" and leaf.pseudo_worker == int(text.rsplit("/")[1])
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
