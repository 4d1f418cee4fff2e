"""The PS's explicit state: what it believes the switch cache holds, and its barrier phases."""

from __future__ import annotations

from contract.codec import encode
from contract.constants import Op
from hosts.ps import ParameterServer
from hosts.ps_barrier import IterationState, Phase
from hosts.ps_config import PSConfig
from hosts.switch_cache import CacheBeliefs


def test_beliefs_follow_refreshes_writebacks_and_losses() -> None:
    c = CacheBeliefs()
    c.seed({5: 2, 6: None})
    assert c.offset_of == {5: 2}
    assert c.written(5, 1) and c.holds(5, 1) and c.slot == {2: (5, 1)}
    assert c.refreshable(1, cold=set()) == {2: 5}
    assert c.refreshable(1, cold={5}) == {}  # a key with a cold part is never refreshed
    c.refreshed(2, 5, 2)
    assert c.holds(5, 2) and not c.written(5, 1)  # a late ack does not move it back
    c.refused(2)
    assert c.slot == {} and c.holds(5, 2)  # the slot, not the key's tag, was wrong
    c.collected(7, 3)
    assert c.written(7, 3) and c.slot[3] == (7, 3)  # where its sums were collected
    c.refresh_lost(3, 7)
    assert not c.holds(7, 3) and 3 not in c.slot and c.take_unsure() == [(3, 7)]
    assert c.take_unsure() == []
    c.rejected(5)
    assert not c.holds(5, 2)


def test_evicted_keys_are_told_once_oldest_first_unless_cached_again() -> None:
    c = CacheBeliefs()
    for key, offset in ((5, 0), (6, 1), (7, 2)):
        c.collected(key, offset)
        c.written(key, 3)
    c.not_summed(3, cold={6, 9})  # 9 was never cached: a cold key like any other
    c.not_served(5)  # not marked cached any more; its slot may still be refreshed
    assert not c.holds(5, 3) and c.refreshable(3, cold=set()) == {0: 5, 1: 6, 2: 7}
    c.rejected(7)
    c.written(6, 4)  # its WRITEBACK was taken after all: the cache holds it again
    assert c.take_evicted(1, 4) == [5]  # 6 is passed over, 7 waits for the next release
    assert c.take_evicted(2, 5) == [7] and c.take_evicted(2, 5) == []


def test_barrier_phases_of_an_iteration() -> None:
    it = IterationState(3)
    assert it.phase is Phase.ACCUMULATING and not it.in_barrier
    for phase in (Phase.COLLECTING, Phase.INVALIDATING, Phase.WRITING_BACK):
        it.phase = phase
        assert it.in_barrier
    it.phase = Phase.RELEASED
    assert not it.in_barrier


def test_release_starts_the_next_iteration_state() -> None:
    ps = ParameterServer(PSConfig(1, 1, 10, iterations=2, bind=("127.0.0.1", 0)))
    try:
        first = ps.it
        # the only worker's DONE(1) (seq: the shard): server-only, apply and release at once
        done = encode(Op.DONE, 1, 0, 0, 1)
        ps.requests.handle(done, ("127.0.0.1", 9), 0.0)
        assert list(first.done) == [0] and ps.counters["barrier"] == 1
        assert first.phase is Phase.RELEASED and ps.it.number == ps.cur == 2
        assert ps.it.phase is Phase.ACCUMULATING and ps.it.done == {}
    finally:
        ps.close()
