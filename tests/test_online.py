"""The controller's online loop (controller/online/): estimator and hysteresis with fakes,
sources against fakes and files, and a real run: the embedded switch's P4Runtime server,
PS and workers on a drifting workload, and the loop moving keys while they train."""

from __future__ import annotations

import math
import threading
import time

import numpy as np
import pytest

from contract.freqfile import write_frequency
from controller.cli import main
from controller.client import SwitchClient
from controller.errors import BadInput
from controller.hot_keys import HotKeys
from controller.jobs import Jobs
from controller.online.estimators import ChangeRateEstimator, RateEstimator
from controller.online.loop import OnlineController
from controller.online.observation import Observation, updates_from_presence
from controller.online.policy import Changes, Hysteresis
from controller.online.sources import CombinedSource, PSFrequencySource, SwitchHitsSource, read_hits
from controller.online.switch_target import SwitchTarget
from hosts.workloads import DriftSpec, ZipfWorkload
from tests.test_controller import (  # noqa: F401 (the fixtures are used by name)
    P4INFO_PATH,
    Switch,
    bare_switch_fixture,
    switch_fixture,
)


class FakeSource:
    def __init__(self, observations: list[Observation]) -> None:
        self.observations = list(observations)

    def read(self) -> Observation:
        return self.observations.pop(0)


class FakeTarget:
    def __init__(self, keys=()) -> None:
        self.keys = set(keys)
        self.applied: list[Changes] = []

    def current(self) -> set[int]:
        return set(self.keys)

    def apply(self, changes: Changes) -> None:
        assert not set(changes.add) & self.keys and set(changes.remove) <= self.keys
        self.keys = (self.keys - set(changes.remove)) | set(changes.add)
        self.applied.append(changes)


def test_estimator_decays_per_step_and_counts_per_iteration() -> None:
    est = RateEstimator(decay=0.5, forget=0.01, first_full=False)
    est.update(Observation({1: 40, 2: 4}, iterations=4))  # 10 and 1 per iteration
    assert est.rate(1) == pytest.approx(5.0) and est.rate(2) == pytest.approx(0.5)
    est.update(Observation({2: 40}, iterations=4))
    assert est.rate(1) == pytest.approx(2.5) and est.rate(2) == pytest.approx(5.25)
    for _ in range(20):
        est.update(Observation({}))
    assert est.rates == {}  # forgotten below the floor
    est = RateEstimator(decay=0.0)
    est.update(Observation({7: 3}))  # no iteration count: per step
    assert est.rate(7) == 3
    for bad in (1.0, -0.1):
        with pytest.raises(BadInput):
            RateEstimator(bad)


def test_estimator_first_full_starts_a_new_key_at_its_first_count() -> None:
    est = RateEstimator(decay=0.5, first_full=True)
    est.update(Observation({1: 8}, iterations=2))
    assert est.rate(1) == pytest.approx(4.0)  # not 2.0: a new key is not averaged with 0
    est.update(Observation({1: 4, 2: 6}, iterations=2))
    assert est.rate(1) == pytest.approx(3.0) and est.rate(2) == pytest.approx(3.0)


def test_change_estimator_keeps_every_count_of_a_steady_key() -> None:
    # 1 then 2 updates per iteration, alternating: no change, so the rate is the mean of all
    # 20 steps and its error shrinks with them; decay would remember only the last few
    est, decayed = ChangeRateEstimator(), RateEstimator(decay=0.5)
    for step in range(20):
        obs = Observation({5: 2.0 if step % 2 else 4.0}, iterations=2)
        est.update(obs)
        decayed.update(obs)
    assert est.changes == 0
    assert est.rate(5) == pytest.approx(60 / 40)
    assert est.stderr(5) == pytest.approx(math.sqrt(1.5 / 40))
    assert est.stderr(5) < decayed.stderr(5) / 2
    assert est.keys_at_least(1.5) == [5] and est.keys_at_least(1.6) == []
    # a read over no iteration (the PS's file has not moved) is held for the next, not a 0
    est.update(Observation({5: 1.0}, iterations=0))
    assert est.rate(5) == pytest.approx(60 / 40)
    est.update(Observation({5: 3.0}, iterations=2))
    assert est.rate(5) == pytest.approx(64 / 42) and est.changes == 0


def test_change_estimator_restarts_a_key_whose_rate_jumps() -> None:
    est = ChangeRateEstimator(threshold=7.0)
    for _ in range(10):
        est.update(Observation({1: 1.0, 2: 8.0}, iterations=2))  # 0.5 and 4 per iteration
    assert (est.rate(1), est.rate(2)) == (pytest.approx(0.5), pytest.approx(4.0))
    # key 1 enters the popular head, key 2 leaves it: one step shows both (log-likelihood
    # ratios 7.8 and 7.6 nats against one rate), and the counts before are forgotten
    est.update(Observation({1: 8.0}, iterations=2))
    assert est.changes == 2
    assert est.rate(1) == pytest.approx(4.0) and est.stderr(1) == pytest.approx(math.sqrt(2))
    assert est.rate(2) == 0.0 and 2 not in est.rates  # below `forget`: dropped
    assert est.keys_at_least(0.1) == [1]
    est.update(Observation({2: 2.0}, iterations=2))  # seen again: a new key, at its count
    assert est.rate(2) == pytest.approx(1.0)


def _change_reference(steps: list[dict[int, float]], per: float, threshold: float, window: int):
    """ChangeRateEstimator's rule, key by key in plain Python (the test's reference)."""

    def loglik(n: float, s: float) -> float:
        return n * math.log(n / s) - n if n > 0 else 0.0

    segment: dict[int, list[float]] = {}  # the key's counts per step since its last change
    for counts in steps:
        for key in segment:
            segment[key].append(counts.get(key, 0.0))
        for key in counts.keys() - segment.keys():
            segment[key] = [counts[key]]
        for key, seg in segment.items():
            total, span = sum(seg), per * len(seg)
            best, cut = threshold, 0
            for j in range(1, min(window, len(seg) - 1) + 1):
                after = sum(seg[-j:])
                ratio = (
                    loglik(after, per * j)
                    + loglik(total - after, span - per * j)
                    - loglik(total, span)
                )
                if ratio > best:
                    best, cut = ratio, j
            if cut:
                segment[key] = seg[-cut:]
        segment = {k: seg for k, seg in segment.items() if sum(seg) / (per * len(seg)) >= 0.125}
    return {k: sum(seg) / (per * len(seg)) for k, seg in segment.items()}


@pytest.mark.parametrize(("per", "window"), [(2, 4), (1, 12)])
def test_change_estimator_matches_a_key_by_key_reference(per: int, window: int) -> None:
    # 300 keys whose Poisson rates change at random steps, some to 0 and back. The
    # reference tests every key; the estimator skips those whose ratio cannot reach the
    # threshold (_testable), which steps of 1 iteration and many rare keys exercise.
    rng = np.random.default_rng(3)
    rates = rng.choice([0.0, 0.3, 1.0, 2.5, 4.0], size=300)
    steps = []
    for _ in range(80 // per):
        moving = rng.random(300) < 0.025 * per
        rates[moving] = rng.choice([0.0, 0.3, 1.0, 2.5, 4.0], size=int(moving.sum()))
        drawn = rng.poisson(rates * per)
        steps.append({k: float(n) for k, n in enumerate(drawn) if n})
    est = ChangeRateEstimator(threshold=5.0, window=window)
    for counts in steps:
        est.update(Observation(counts, iterations=per))
    want = _change_reference(steps, float(per), 5.0, window)
    assert est.changes > 50  # the test exercises the change rule
    assert est.rates == pytest.approx(want)


def test_change_estimator_seldom_sees_a_change_that_is_not_there() -> None:
    # 500 steady keys, 50 steps each: a ratio over 6 nats by chance is rare (about
    # P(chi2(1) > 12) = 5e-4 per split tested, 6 splits a step: under 0.4% of key-steps)
    rng = np.random.default_rng(11)
    est = ChangeRateEstimator()
    for _ in range(50):
        drawn = rng.poisson(2.0, size=500)  # 1 per iteration, 2 iterations a step
        est.update(Observation({k: float(n) for k, n in enumerate(drawn) if n}, iterations=2))
    assert est.changes < 0.004 * 50 * 500
    assert np.mean(list(est.rates.values())) == pytest.approx(1.0, abs=0.02)


def _presence_steps(rng, rates, workers=4, span=2):
    """Per step: each key's `collected` count, as the PS counts a hot key (an iteration in
    which some worker drew it), for keys at `rates` updates per iteration."""
    q = np.asarray(rates) / workers
    while True:
        drawn = rng.random((span, workers, len(q))) < q
        yield drawn.any(axis=1).sum(axis=0).astype(float)


def _presence_obs(collected, hot, span=2, workers=4, moved=frozenset()) -> Observation:
    presence = {k: float(c) for k, c in zip(hot, collected) if c}
    counts = dict(
        zip(presence, updates_from_presence(np.array(list(presence.values())), span, workers))
    )
    return Observation(counts, None, span, True, presence, workers, frozenset(hot), moved)


def test_change_estimator_counts_hot_keys_by_presence_without_bias() -> None:
    # 300 hot keys at 0.5-3 updates per iteration, 4 workers, 60 steps of 2 iterations.
    # Inverted per step, presence reads 0, ~1.3 or 8 updates a step for a key at 1 per
    # iteration (mean 4.3 a step, 2.1 per iteration):
    # the decay estimator, which averages those, is far off; the segment's share is not.
    rng = np.random.default_rng(5)
    rates = rng.uniform(0.5, 3.0, 300)
    hot = list(range(300))
    est, decayed = ChangeRateEstimator(), RateEstimator(decay=0.9)
    per_step_counts = ChangeRateEstimator()  # the same counts, without their presence
    steps = _presence_steps(rng, rates)
    for _ in range(60):
        obs = _presence_obs(next(steps), hot)
        est.update(obs)
        decayed.update(obs)
        per_step_counts.update(Observation(obs.counts, None, 2, True))
    got = np.array([est.rate(k) for k in hot])
    low = rates < 1.5  # presence saturates above: errors grow there
    assert np.abs(got[low] - rates[low]).mean() < 0.1
    assert np.median(got / rates) == pytest.approx(1.0, abs=0.05)
    per_step = np.array([decayed.rate(k) for k in hot])
    assert np.median(per_step[low] / rates[low]) > 1.5  # what the loop read before
    assert est.changes < 0.003 * 60 * 300  # steady keys: seldom a change
    assert per_step_counts.changes > 3 * est.changes  # the noise the loop acted on before
    errs = np.array([est.stderr(k) for k in hot])
    assert np.mean(np.abs(got[low] - rates[low]) < 2.5 * errs[low]) > 0.9


def test_change_estimator_sees_a_hot_key_leave_and_skips_a_moved_step() -> None:
    rng = np.random.default_rng(2)
    est = ChangeRateEstimator()
    steps = _presence_steps(rng, [1.5, 1.5])
    for _ in range(20):
        est.update(_presence_obs(next(steps), [1, 2]))
    assert est.rate(1) == pytest.approx(1.5, abs=0.4)
    # key 1 leaves the popular head: no worker draws it any more
    taken = 0
    while est.rate(1) >= 0.3 and taken < 4:
        est.update(_presence_obs(np.array([0.0, next(steps)[1]]), [1, 2]))
        taken += 1
    assert est.rate(1) < 0.3 and taken <= 3  # seen within 3 steps (6 iterations)
    # key 2 moved while a step was counted: that step is not a sample, whatever it holds
    before = est.rate(2)
    est.update(_presence_obs(np.array([0.0, 0.0]), [1, 2], moved=frozenset({2})))
    assert est.rate(2) == pytest.approx(before)


def test_a_key_every_worker_drew_enters_at_once_when_the_workers_are_known() -> None:
    # 20 members at 1 update per iteration, watched for 30 iterations by their presence;
    # then a key that all 4 workers drew in its first iteration. A worker pushes a key at
    # most once an iteration: 4 of 4 is a binomial count with a small error, and the key
    # beats the weakest member at the first step. Without the workers (Poisson) its error
    # is that of a count of 4, sqrt(4), and the noise test holds it back.
    rng = np.random.default_rng(7)
    members = list(range(20))
    steps = _presence_steps(rng, [1.0] * 20, span=1)
    binomial, poisson = ChangeRateEstimator(), ChangeRateEstimator()
    for _ in range(30):
        obs = _presence_obs(next(steps), members, span=1)
        binomial.update(obs)
        poisson.update(Observation(obs.counts, None, 1, True))
    obs = _presence_obs(next(steps), members, span=1)
    obs.counts[99] = 4.0
    binomial.update(obs)
    poisson.update(Observation(obs.counts, None, 1, True))
    policy = Hysteresis(budget=20)
    for est, enters in ((binomial, True), (poisson, False)):
        assert est.rate(99) == pytest.approx(4.0)
        changes = policy.choose(members, est.rate, [99], est.stderr)
        assert (99 in changes.add) is enters
    assert binomial.stderr(99) < 0.5 * poisson.stderr(99)


def test_loop_tells_the_estimator_which_keys_were_hot_and_which_moved() -> None:
    seen: list[tuple[frozenset[int], frozenset[int]]] = []

    class Recording(ChangeRateEstimator):
        def update(self, obs: Observation) -> None:
            seen.append((obs.hot, obs.moved))
            super().update(obs)

    first = Observation({1: 8.0, 3: 6.0}, None, 2, True, {1: 2.0}, 4)  # key 3: cold, 3/it
    second = Observation({1: 8.0, 3: 8.0}, None, 2, True, {1: 2.0, 3: 2.0}, 4)
    target = FakeTarget({1})
    loop = OnlineController(target, FakeSource([first, second]), Recording(), Hysteresis(2))
    assert loop.step().added == [3]
    loop.step()
    assert seen == [(frozenset({1}), frozenset()), (frozenset({1, 3}), frozenset({3}))]
    # a source without presence (the switch's counters): every count is updates, as before
    loop = OnlineController(
        FakeTarget({1}), FakeSource([Observation({1: 3.0})]), Recording(), Hysteresis(2)
    )
    loop.step()
    assert seen[-1] == (frozenset(), frozenset())


def test_change_estimator_refuses_bad_settings() -> None:
    for kwargs in ({"threshold": 0.0}, {"threshold": math.inf}, {"window": 0}, {"forget": -1}):
        with pytest.raises(BadInput):
            ChangeRateEstimator(**kwargs)


def test_updates_from_presence_inverts_the_chance_that_some_worker_drew_a_key() -> None:
    # 4 workers each drawing a key with chance q: P(some worker) = 1 - (1 - q)^4
    q = np.array([0.0, 0.1, 0.25, 0.6])
    share = 1 - (1 - q) ** 4
    got = updates_from_presence(share * 10, 10, 4)
    assert got == pytest.approx(10 * 4 * q)
    assert updates_from_presence(np.array([10.0, 12.0]), 10, 4) == pytest.approx([40, 40])
    # by simulation: the estimate is close to the updates the workers made
    rng = np.random.default_rng(1)
    drawn = rng.random((2000, 4)) < 0.3
    est = updates_from_presence(np.array([drawn.any(axis=1).sum()]), 2000, 4)[0]
    assert est == pytest.approx(drawn.sum(), rel=0.05)


def test_ps_frequency_source_counts_hot_keys_from_collected(tmp_path) -> None:
    path = tmp_path / "f.csv"
    src = PSFrequencySource([path], collected=True)
    cold, collected = np.zeros(8, np.int64), np.zeros(8, np.int64)
    cold[2], collected[5] = 6, 4  # key 5: collected in 4 of 4 iterations: 4 workers each
    write_frequency(path, cold, collected, {"iterations": 4, "workers": 4})
    assert src.read().counts == {2: 6.0, 5: pytest.approx(16.0)}
    collected[5] += 2  # in 2 of the next 4 iterations
    write_frequency(path, cold, collected, {"iterations": 8, "workers": 4})
    obs = src.read()
    assert obs.counts == {5: pytest.approx(4 * 4 * (1 - 0.5**0.25))}
    assert (obs.presence, obs.workers) == ({5: 2.0}, 4)  # what the estimator models
    assert PSFrequencySource([path]).read().presence is None  # cold counts only


def test_hysteresis_fills_room_then_needs_the_margin() -> None:
    pol = Hysteresis(budget=3, margin=0.2, max_changes=10, min_rate=1.0)
    rates = {1: 10.0, 2: 9.0, 3: 0.5, 4: 1.0, 5: 8.0}
    ch = pol.choose([], rates.get, rates)
    assert ch == Changes([1, 2, 5], [])  # best first; 3 is below the minimum rate
    full = {1, 2, 5}
    rates.update({6: 9.5})  # beats the weakest (8.0) by 18.75%: not enough
    assert pol.choose(full, rates.get, rates) == Changes([], [])
    rates[6] = 9.7  # by 21%: replaces it
    assert pol.choose(full, rates.get, rates) == Changes([6], [5])
    # the budget shrank: the weakest leave
    assert Hysteresis(budget=1).choose(full, rates.get, rates) == Changes([], [5, 2])


def test_hysteresis_caps_changes_per_step() -> None:
    old = {k: 1.0 for k in range(10)}
    new = {k: 100.0 for k in range(100, 110)}
    rates = {**old, **new}
    ch = Hysteresis(budget=10, margin=0.5, max_changes=4).choose(old, rates.get, rates)
    assert ch.add == [100, 101, 102, 103] and len(ch.remove) == 4
    assert set(ch.remove) <= set(old)
    with pytest.raises(BadInput):
        Hysteresis(budget=-1)


def test_keys_near_the_boundary_do_not_flap() -> None:
    # two keys whose counts alternate around each other: without hysteresis they would swap
    # every step; with it the set stays put once filled
    target = FakeTarget()
    obs = [Observation({1: 100, 2: 52 if i % 2 else 48, 3: 48 if i % 2 else 52}) for i in range(12)]
    loop = OnlineController(
        target, FakeSource(obs), RateEstimator(0.5), Hysteresis(2, margin=0.2, min_rate=0)
    )
    for _ in range(12):
        loop.step()
    assert len(target.applied) == 12 and sum(len(c.add) for c in target.applied) == 2
    assert Hysteresis(2, margin=0.0, min_rate=0).choose({1, 2}, {1: 9, 2: 5, 3: 5.1}.get, [3]) == (
        Changes([3], [2])
    )


def test_a_candidate_must_beat_the_weakest_member_by_more_than_its_noise() -> None:
    est = RateEstimator(decay=0.5, first_full=True)
    # a member watched for 5 steps of 2 iterations at 2 updates per iteration
    for _ in range(5):
        est.update(Observation({1: 4}, iterations=2))
    steady = est.stderr(1)
    est.update(Observation({1: 4, 2: 40}, iterations=2))  # key 2 seen once, 20 per iteration
    # Poisson: one interval's rate n/s has variance rate/s; the member's error is smaller
    assert est.stderr(2) == pytest.approx((20.0 / 2) ** 0.5)
    assert 0 < est.stderr(1) < steady < est.stderr(2)
    pol = Hysteresis(budget=1, margin=1.0, min_rate=0.0, confidence=2.0)
    assert pol.choose({1}, est.rate, est.rates, est.stderr) == Changes([2], [1])
    # 6 per iteration beats 2 x the member's rate (4), but not by 2 standard errors (3.7)
    est.update(Observation({1: 4, 3: 12}, iterations=2))
    assert est.rate(3) == pytest.approx(3 * est.rate(1))
    noisy = Hysteresis(budget=1, margin=1.0, min_rate=0.0, confidence=2.0)
    assert noisy.choose({1}, est.rate, {3: 0}, est.stderr) == Changes([], [])
    # without the test (confidence 0, or no stderr given) the margin alone lets it in
    assert Hysteresis(1, 1.0, min_rate=0.0, confidence=0.0).choose(
        {1}, est.rate, {3: 0}, est.stderr
    ) == Changes([3], [1])
    assert noisy.choose({1}, est.rate, {3: 0}) == Changes([3], [1])


def test_step_reports_coverage_against_the_oracle() -> None:
    lines: list[str] = []
    target = FakeTarget({1, 2})
    obs = Observation({1: 30, 2: 10, 3: 40, 4: 20}, iteration=120, iterations=10, complete=True)
    loop = OnlineController(
        target,
        FakeSource([obs]),
        RateEstimator(0.0),
        Hysteresis(2, 0.2, 1, 0.0, confidence=0.0),
        lines.append,
    )
    r = loop.step()
    # the interval ran with {1, 2}: 40 of 100 updates; the best 2 keys had 70
    assert lines == ["iteration 120: +1 -1 keys, coverage 40.0% (oracle 70.0%)"]
    assert (r.added, r.removed, r.hot) == ([3], [2], 2) and target.keys == {1, 3}
    loop.source = FakeSource([Observation({5: 1})])  # no iteration, incomplete: no oracle
    loop.step()
    assert lines[-1] == "step 2: +1 -1 keys, coverage 0.0%"  # decay 0: only key 5 is left


def test_step_reports_when_it_began_and_how_long_its_write_took() -> None:
    # Analyses place a step's Write among the workers' iterations (wall-clock logs), so the
    # report gives the start on that clock and the Write's own time apart from the step's.
    class SlowTarget(FakeTarget):
        def apply(self, changes: Changes) -> None:
            time.sleep(0.02)
            super().apply(changes)

    obs = Observation({1: 30, 2: 10, 3: 40}, iteration=4, iterations=2, complete=True)
    loop = OnlineController(
        SlowTarget({1, 2}), FakeSource([obs]), RateEstimator(0.0), Hysteresis(2, 0.2, 1, 0.0)
    )
    before = time.time()
    report = loop.step()
    assert report.started is not None and before <= report.started <= time.time()
    assert 0.02 <= report.write_seconds <= report.seconds
    assert report.as_dict()["started"] == report.started
    assert report.as_dict()["write_seconds"] == report.write_seconds


def test_the_loop_follows_a_drifting_head() -> None:
    # counts straight from a drifting workload: the loop follows the head as it moves
    wl = ZipfWorkload(20_000, 1.2, 256, seed=3, drift=DriftSpec(10, 0.2, head=64))

    def interval(t0: int) -> Observation:
        keys = np.concatenate([wl.pull_keys(w, t) for w in range(8) for t in range(t0, t0 + 5)])
        u, c = np.unique(keys, return_counts=True)
        return Observation(dict(zip(u.tolist(), c.astype(float).tolist())), t0 + 4, 5, True)

    obs = [interval(1 + 5 * i) for i in range(30)]
    target = FakeTarget()
    loop = OnlineController(
        target, FakeSource(obs), RateEstimator(0.5), Hysteresis(64, 0.1, 16, 1.0)
    )
    reports = [loop.step() for _ in range(4)]
    static = set(target.keys)  # what a one-off selection from the start keeps
    assert len(static) == 64
    reports += [loop.step() for _ in range(26)]
    later = reports[5:]
    dynamic = np.mean([r.coverage for r in later])
    frozen = np.mean(
        [sum(o.counts.get(k, 0) for k in static) / r.total for o, r in zip(obs[5:], later)]
    )
    oracle = np.mean([r.oracle_coverage for r in later])
    # the oracle is the top 64 of each interval's own sampled counts, which no estimate
    # from past intervals can match; the loop must stay close to it and far above static
    assert dynamic > 0.8 * oracle and dynamic > frozen + 0.1, (dynamic, frozen, oracle)
    assert sum(len(r.added) for r in later) > 20  # it did move with the drift


def test_switch_hits_source_takes_differences_and_restarted_counters() -> None:
    class FakeHits(SwitchHitsSource):
        now: dict[int, int] = {}

        def hits(self) -> dict[int, int]:
            return self.now

    src = FakeHits(None, 1, weight=0.5)  # type: ignore[arg-type]
    src.now = {1: 10, 2: 4}
    assert src.read().counts == {1: 5.0, 2: 2.0}
    src.now = {1: 30, 2: 2}  # key 2 was evicted and installed again
    assert src.read().counts == {1: 10.0, 2: 1.0}
    with pytest.raises(BadInput):
        SwitchHitsSource(None, 1, weight=0)  # type: ignore[arg-type]


def test_ps_frequency_source_reads_cold_counts_per_interval(tmp_path) -> None:
    paths = [tmp_path / "f0.csv", tmp_path / "f1.csv"]
    src = PSFrequencySource(paths)
    assert src.read() == Observation({}, None, None, False)  # nothing written yet
    cold = np.zeros(8, np.int64)
    cold[[2, 4]] = [6, 3]
    collected = np.zeros(8, np.int64)
    collected[5] = 4  # a collected aggregate is not a worker update: not counted
    write_frequency(paths[0], cold, collected, {"iterations": 3})
    obs = src.read()
    assert obs == Observation({2: 6.0, 4: 3.0}, 3, 3, True)
    cold[2] += 4
    write_frequency(paths[0], cold, collected, {"iterations": 5})
    write_frequency(paths[1], np.array([0, 7, 0]), np.zeros(3, np.int64), {"iterations": 5})
    assert src.read() == Observation({2: 4.0, 1: 7.0}, 5, 5, True)
    both = CombinedSource([FakeSource([Observation({2: 1.0})]), FakeSource([Observation({})])])
    assert both.read().counts == {2: 1.0}
    paths[0].write_text("garbage\n")
    with pytest.raises(BadInput, match=r"f0\.csv"):
        src.read()


# --- the PS's frequency file, which the loop reads ---


def test_csv_rows_are_np_savetxt_byte_for_byte() -> None:
    import io

    from contract.freqfile import csv_rows

    rng = np.random.default_rng(5)
    edges = [10**k + d for k in range(16) for d in (-1, 0, 1)] + [2**40 - 1, 2**40, 2**62]
    tables = [
        np.array([[0, 0, 0, 0]]),
        rng.integers(0, 400, (3000, 4)),
        rng.integers(0, 10 ** rng.integers(1, 18, 4), (500, 4)),
        np.array(edges).reshape(-1, 1).repeat(4, axis=1),
        np.array([[5, -1, 2, 0]]),  # not counters: still savetxt's text
    ]
    for table in tables:
        want = io.StringIO()
        np.savetxt(want, table, fmt="%d", delimiter=",")
        assert csv_rows(table) == want.getvalue().encode()
    assert csv_rows(np.zeros((0, 4), np.int64)) == b""


@pytest.mark.parametrize("suffix", [".csv", ".npz"])
def test_ps_rewrites_the_file_in_a_thread_in_order_and_reports_its_failure(
    tmp_path, suffix: str
) -> None:
    from contract.freqfile import read_frequency
    from hosts.ps_config import PSConfig
    from hosts.ps_frequency import FrequencyCounts

    path = tmp_path / f"freq{suffix}"
    counts = FrequencyCounts(PSConfig(1, 4, 100, freq_path=str(path), freq_every=2))
    for t in (2, 4):
        counts.cold[7] = t
        counts.write(t, background=True)
        counts.cold[7] = 99  # counted after the rewrite began: not in its file
    counts.write(5)  # the last one: after the rewrite in flight
    freq = read_frequency(path)
    assert freq.meta["iterations"] == "5" and freq.cold.tolist() == [99]
    path.unlink()
    path.mkdir()  # the next rewrite cannot rename into place
    counts.write(6, background=True)
    with pytest.raises(OSError):
        counts.write(7)


def test_a_ps_with_a_live_file_counts_into_it_and_rewrites_nothing(
    tmp_path, request: pytest.FixtureRequest
) -> None:
    from contract.freqfile import read_frequency
    from hosts.agent import AgentError
    from hosts.ps import ParameterServer
    from hosts.ps_config import PSConfig

    path = tmp_path / "freq.live"
    with pytest.raises(AgentError, match="always current"):
        PSConfig(1, 4, 100, freq_path=str(path), freq_every=2).validate()
    ps = ParameterServer(PSConfig(1, 4, 100, freq_path=str(path)))
    request.addfinalizer(ps.close)
    assert read_frequency(path).meta["iterations"] == "0"
    for t in (1, 2):
        assert ps.cur == t
        ps.it.cold_keys, ps.it.cold_values = [7, 7, 9], [1, 1, 1]
        ps.barrier.finalize()  # server-only: iteration t's counts go into the file at once
        freq = read_frequency(path)
        assert freq.meta["iterations"] == str(t) and freq.meta["workers"] == "4"
        assert dict(zip(freq.keys.tolist(), freq.cold.tolist())) == {7: 2 * t, 9: t}
    ps.counts.write(ps.cur - 1)  # at exit: already current, nothing written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["freq.live"]
    assert read_frequency(path).meta == freq.meta


# --- on a real switch ---


def test_cli_auto_moves_keys_from_a_frequency_file(capsys, switch: Switch, tmp_path) -> None:
    with switch.client() as c:
        Jobs(c, switch.p4info).add(3, 16)
        HotKeys(c, switch.p4info).install(Jobs(c, switch.p4info).get(3), [100, 101])
    cold = np.zeros(300, np.int64)
    cold[[7, 8, 9, 200]] = [90, 80, 70, 1]
    freq = tmp_path / "f.csv"
    write_frequency(freq, cold, np.zeros(300, np.int64), {"iterations": 10})
    log = tmp_path / "auto.log"
    argv = ["--grpc-addr", switch.addr, "--p4info", str(P4INFO_PATH), "hotkeys", "auto"]
    argv += ["--job-id", "3", "--budget", "3", "--interval", "0.05", "--steps", "2"]
    argv += ["--freq", str(freq), "--max-changes", "2", "--log", str(log)]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    # step 1 fills the free slot and replaces one of the idle keys (2 changes at most)
    assert out[0] == "iteration 10: +2 -1 keys, coverage 0.0% (oracle 99.6%)", out
    assert out[1] == "iteration 10: +1 -1 keys, coverage 0.0% (oracle 0.0%)", out  # no new counts
    assert out[2] == "job 3: 2 steps, +3 -2 keys"
    assert log.read_text().count("job 3 iteration 10:") == 2
    assert {e.match[1] for e in switch.hot(0).entries()} == {7, 8, 9}
    assert {e.match[1] for e in switch.hot(7).entries()} == {7, 8, 9}
    for bad, needle in (
        ("--decay", "1"),
        ("--change-threshold", "0"),
        ("--interval", "0"),
        ("--budget", "17"),
    ):
        args = [*argv, bad, needle if bad != "--budget" else "17"]
        assert main(args) == 5
        assert "hotagg-ctl: error:" in capsys.readouterr().err


def test_cli_auto_finds_a_cold_key_with_the_switch_sketch(capsys, switch: Switch) -> None:
    # No PS file: the only way the loop learns of cold key 7 is the switch's sketch (a
    # digest when it reaches --sketch in an epoch, then its cells' counters), over the
    # embedded switch's P4Runtime server while pushes go through its pipeline.
    from controller.tenancy import Tenancy, admission
    from tests.test_controller import push_frame

    with switch.client() as c:
        Jobs(c, switch.p4info).add(3, 4)
        HotKeys(c, switch.p4info).install(Jobs(c, switch.p4info).get(3), [100, 101])
        Tenancy(c, switch.p4info).admit([admission(3, 0, 1, "10.0.0.1")])
    stop = threading.Event()

    def traffic() -> None:  # key 7 (cold) twice a packet; 8 every 20th: below the threshold
        seq = 0
        while not stop.is_set():
            seq += 1
            switch.pipeline.process(1, push_frame(3, [7, 100, 7] + [8] * (seq % 20 == 0), seq))
            time.sleep(0.005)

    th = threading.Thread(target=traffic, daemon=True)
    argv = ["--grpc-addr", switch.addr, "--p4info", str(P4INFO_PATH), "hotkeys", "auto"]
    argv += ["--job-id", "3", "--budget", "3", "--interval", "0.3", "--steps", "3"]
    argv += ["--sketch", "20"]
    th.start()
    try:
        assert main(argv) == 0
    finally:
        stop.set()
        th.join(5)
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "job 3: 3 steps, +1 -0 keys", out
    assert {e.match[1] for e in switch.hot(0).entries()} == {7, 100, 101}
    assert {e.match[1] for e in switch.hot(7).entries()} == {7, 100, 101}
    assert main([*argv[:-1], "0"]) == 5  # --sketch 0 is refused (off is: no --sketch)
    assert "hotagg-ctl: error:" in capsys.readouterr().err


def test_switch_target_moves_keys_in_one_write_and_reads_hits_in_one_read(
    switch: Switch,
) -> None:
    # The loop's switch side on the embedded switch's P4Runtime server: a step's changes go
    # out in one Write RPC (deletes and inserts in all 8 instances), the hot set is not read
    # back, orphans of an interrupted earlier write are tolerated as HotKeys does, and the
    # hit counters of the 8 instances come in one Read RPC.
    from controller.tenancy import Tenancy, admission
    from tests.test_controller import push_frame

    with switch.client() as c:
        job = Jobs(c, switch.p4info).add(1, 4)
        hot = HotKeys(c, switch.p4info)
        hot.install(job, [5, 6, 7])
        Tenancy(c, switch.p4info).admit([admission(1, 0, 1, "10.0.0.1")])  # push_frame's
        # orphans: 9 in instance 3 only (an interrupted install), 6 gone from instance 5
        c.write_entries("insert", [hot._entries(3, 1, [(9, 3)])[0]])
        c.write_entries("delete", hot._keys(5, 1, [6]))
        switch.pipeline.process(1, push_frame(1, [5, 6, 5, 77]))
        reads = []
        c.read_raw = lambda ents, read=c.read_raw: reads.append(1) or read(ents)  # type: ignore[method-assign]
        assert read_hits(hot, 1) == {5: 2, 6: 1, 7: 0, 9: 0} and len(reads) == 1  # 9: orphan
        target = SwitchTarget(hot, job)
        assert target.current() == {5, 6, 7} and target.reads == 1
        target.apply(Changes(add=[9, 10], remove=[6]))
        assert target.writes == 2  # the batch, then the orphan's MODIFY
        assert target.current() == {5, 7, 9, 10} and target.reads == 1  # not read back
        want = {5: 0, 7: 2, 9: 1, 10: 3}  # 6's offset 1 went to 9, the free 3 to 10
        for i in range(8):
            got = {e.match[1]: e.params[0] for e in switch.hot(i).entries()}
            assert got == want, (i, got)
        target.apply(Changes(add=[], remove=[]))
        assert target.writes == 2  # nothing to change: no RPC
        with pytest.raises(BadInput, match="not hot"):
            target.apply(Changes(add=[], remove=[6]))


@pytest.mark.parametrize(("suffix", "freq_every"), [(".csv", 1), (".live", 0)])
def test_the_loop_moves_keys_on_a_switch_while_a_job_trains(
    switch: Switch, tmp_path, suffix: str, freq_every: int
) -> None:
    # The embedded switch's real P4Runtime server; its pipeline also carries the agents'
    # packets (through the test relay). The workload's head drifts; the loop, reading the
    # hot-key counters over P4Runtime and the PS's frequency file (rewritten every
    # iteration, or its live counters), moves keys while the job runs, and the result stays
    # exact.
    from tests.agent_fakes import PipelineSwitch, Relay
    from tests.test_agents import HOT_SLOTS, JOB, check_exact, run_job

    wl = ZipfWorkload(2000, 1.3, 48, seed=21, drift=DriftSpec(3, 0.5, head=24))
    with switch.client() as c:
        job = Jobs(c, switch.p4info).add(JOB, HOT_SLOTS)
    sw = PipelineSwitch(JOB, None, {}, pipeline=switch.pipeline)
    relay = lambda ups: Relay(ups, switch=sw)  # noqa: E731
    stop = threading.Event()
    client = SwitchClient(switch.addr, 0, (0, 2), timeout=5).connect()
    hot = HotKeys(client, switch.p4info)
    source = CombinedSource(
        [SwitchHitsSource(hot, JOB), PSFrequencySource([tmp_path / f"freq0{suffix}"])]
    )
    loop = OnlineController(
        SwitchTarget(hot, job), source, RateEstimator(0.3), Hysteresis(24, 0.1, 12, 0.5)
    )
    th = threading.Thread(target=loop.run, args=(0.15, None, stop), daemon=True)
    th.start()
    # Steps go by the clock: the first two fill the 24 slots (12 a step), swaps start at the
    # third. 30 iterations once ended within those two steps under CI's load (24 keys added,
    # none removed); 60 leave several steps of swaps.
    iterations = 60
    try:
        params, summaries, _, _ = run_job(
            wl,
            3,
            iterations,
            tmp_path,
            relay=relay,
            collect=True,
            freq_every=freq_every,
            freq_suffix=suffix,
        )
    finally:
        stop.set()
        th.join(10)
        client.close()
    check_exact(wl, 3, iterations, params, summaries)
    reports = loop.history
    assert len(reports) >= 3, reports
    assert sum(len(r.added) for r in reports) > 0 and sum(len(r.removed) for r in reports) > 0
    assert any(r.iteration for r in reports)  # the PS's file was read while it ran
    c = summaries[0]["counters"]
    assert c["collected_entries"] > 0 and c["cold_entries"] > 0


def test_a_forgotten_key_seen_again_starts_afresh() -> None:
    est = RateEstimator(decay=0.5, forget=0.1, first_full=True)
    est.update(Observation({1: 8, 2: 8, 3: 8, 4: 8}))
    for _ in range(7):  # 1 decays to 8 / 2^7, below the floor; 2, 3, 4 stay watched
        est.update(Observation({2: 8, 3: 8, 4: 8}))
    assert est.rate(1) == 0.0 and est.stderr(1) == 0.0 and 1 not in est.rates
    assert est.keys_at_least(0.0) == [2, 3, 4]
    est.update(Observation({1: 6, 2: 8}))
    assert est.rate(1) == pytest.approx(6.0) and est.stderr(1) == pytest.approx(6.0**0.5)
    assert est.keys_at_least(7.0) == [2] and sorted(est.rates) == [1, 2, 3, 4]


def test_a_mirrored_target_reads_the_primary_and_applies_every_change_to_all() -> None:
    from controller.online.policy import Changes
    from controller.online.switch_target import MirroredTarget

    class Record:
        def __init__(self, keys: set[int]) -> None:
            self.keys = set(keys)

        def current(self) -> set[int]:
            return set(self.keys)

        def apply(self, changes: Changes) -> None:
            self.keys = (self.keys - set(changes.remove)) | set(changes.add)

    root, leaves = Record({1, 2}), [Record({1, 2}), Record({1, 2, 9})]
    target = MirroredTarget(root, list(leaves))
    target.apply(Changes(add=[3], remove=[1]))
    assert target.current() == {2, 3}
    assert leaves[0].current() == {2, 3} and leaves[1].current() == {2, 3, 9}
