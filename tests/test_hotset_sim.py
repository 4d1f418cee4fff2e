"""bench/hotset_sim.py: the policies it compares, and the drift sweep's JSON and figure."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from bench import hotset_sim
from bench.hotset_sim import SimConfig, SimLoop, SimWorkload
from hosts.workloads import DriftSpec, ZipfWorkload


def test_the_informed_loop_bounds_the_online_one_and_static_trails_under_drift() -> None:
    # One seeded workload at the sweep's lag; the ordering is what the policies are for
    # (informed knows what bayes learns from counts, bayes knows the law dynamic does not,
    # static never moves), not this seed's luck.
    runs = {
        policy: hotset_sim.simulate(
            SimConfig(
                SimWorkload("every=10,fraction=0.2", seed=7),
                SimLoop(policy=policy, lag=hotset_sim.SWEEP_LAG),
                iterations=40,
            )
        )
        for policy in hotset_sim.POLICIES
    }
    assert runs["static"]["keys_moved"] == 0
    assert runs["informed"]["coverage"] >= runs["bayes"]["coverage"] > runs["dynamic"]["coverage"]
    assert runs["dynamic"]["coverage"] > runs["static"]["coverage"]
    for run in runs.values():  # one workload: the oracles do not depend on the policy
        assert run["expected_oracle"] == runs["static"]["expected_oracle"]
        assert run["coverage"] <= run["oracle"]


def _informed_in_force(drift: str, seed: int, iterations: int, every: int, lag: int):
    """An informed run, and per iteration t from 4 on: its coverage, and what the expected
    oracle of `stepped(t)` (the iteration whose step is in force at t) covers of t."""
    loop = SimLoop(policy="informed", every=every, lag=lag)
    run = hotset_sim.simulate(SimConfig(SimWorkload(drift, seed), loop, iterations), trace=True)
    wl = ZipfWorkload(100_000, 1.1, 256, seed=seed, drift=DriftSpec.parse(drift))

    def covered(t: int, stepped: int) -> float:
        counts: Counter[int] = Counter()
        for worker in range(4):
            counts.update(wl.pull_keys(worker, t).tolist())
        hot = set(wl.hottest(run["budget"], stepped).tolist())
        assert hot != set(wl.hottest(run["budget"], t).tolist())  # the drift moved it
        return sum(n for k, n in counts.items() if k in hot) / sum(counts.values())

    return run, covered


def test_the_informed_loop_installs_the_expected_oracle_of_the_iteration_it_counted() -> None:
    # The head changes every 2 iterations; a step after each even iteration s sets the
    # expected oracle's keys of s, in force (lag 0) in s+1 and s+2, i.e. the next epoch's.
    run, covered = _informed_in_force("every=2,fraction=0.5", 7, 12, every=2, lag=0)
    for t in range(3, 13):
        stepped = t - 1 if (t - 1) % 2 == 0 else t - 2
        assert run["coverage_per_iteration"][t - 1] == pytest.approx(covered(t, stepped))


def test_a_loop_stepping_after_odd_iterations_reads_each_epoch_start_inside_a_step() -> None:
    # Epochs of every=10 start at iterations 11, 21, ...: phase 0 steps after 10 and 12,
    # phase 1 after 11, which mixes one old iteration into the step that meets the change.
    # The informed loop, told the distribution of the iteration it stepped after, gets the
    # new head one iteration sooner at phase 1.
    runs = {
        phase: hotset_sim.simulate(
            SimConfig(
                SimWorkload("every=10,fraction=0.2", seed=7),
                SimLoop(policy="informed", every=2, phase=phase, lag=1),
                iterations=40,
            ),
            trace=True,
        )
        for phase in (0, 1)
    }
    at = {p: r["coverage_per_iteration"] for p, r in runs.items()}
    assert at[1][13 - 1] > at[0][13 - 1]  # phase 1's step after 11 is in force at 13
    assert at[1][14 - 1] == pytest.approx(at[0][14 - 1])  # phase 0's after 12 catches up at 14


def test_the_bayes_filter_finds_the_new_head_from_one_iteration_of_counts() -> None:
    # every=10, fraction=0.5: at iteration 11 half the head swaps with tail keys, some into
    # the 20 top ranks (0.6-3.8 updates per iteration each). One iteration of counts is
    # enough for the filter: the newcomers drew far more than a tail key is likely to, and
    # the keys that left drew nothing where the law expected several.
    spec = DriftSpec.parse("every=10,fraction=0.5")
    wl = ZipfWorkload(100_000, 1.1, 256, seed=3, drift=spec)
    bayes = hotset_sim.LawAwareFilter(wl, spec, workers=4)
    for t in range(1, 12):
        counts: Counter[int] = Counter()
        for worker in range(4):
            counts.update(wl.pull_keys(worker, t).tolist())
        bayes.observe(counts)
    top, before = set(wl.hottest(20, 11).tolist()), set(wl.hottest(20, 10).tolist())
    chosen = bayes.best(100)
    assert len(top - before) >= 5  # the drift moved keys into the top 20
    assert len(top & chosen) >= 18
    assert not (before - top) & chosen


def test_an_unknown_policy_a_negative_lag_or_a_phase_past_the_step_is_refused() -> None:
    with pytest.raises(ValueError, match="policy 'oracle'"):
        SimLoop(policy="oracle")
    with pytest.raises(ValueError, match="lag -1 must be"):
        SimLoop(lag=-1)
    with pytest.raises(ValueError, match="phase 2 must be in"):
        SimLoop(every=2, phase=2)


def test_a_step_chooses_from_the_loops_record_while_earlier_writes_are_in_flight() -> None:
    # A step every iteration whose changes are in force 2 iterations after the next: three
    # steps' changes are pending at once. Each step must diff against what the loop has
    # already chosen (its record, as SwitchTarget keeps it), not the set in force, or the
    # in-force set drifts away from the steps' choices. The informed loop's step after s
    # sets the expected oracle of s, in force at s + 3.
    run, covered = _informed_in_force("every=2,fraction=0.5", 7, 14, every=1, lag=2)
    for t in range(4, 15):  # t - 3 is always an earlier epoch's (2 iterations each)
        assert run["coverage_per_iteration"][t - 1] == pytest.approx(covered(t, t - 3))
    assert run["hot_per_iteration"] == [run["budget"]] * 14  # no key left behind


def test_the_sweep_writes_every_policy_at_every_drift_and_a_figure(tmp_path: Path) -> None:
    # 12 iterations keep it short: the every=20 and every=40 drifts do not move yet, which
    # this test does not need (it checks the rows and the figure, not their values).
    out = tmp_path / "drift.json"
    assert (
        hotset_sim.main(["--sweep", "--seeds", "1", "--iterations", "12", "--out", str(out)]) == 0
    )
    rows = json.loads(out.read_text())
    turnovers = {0.0} | {f / e for e, f in hotset_sim.SWEEP_DRIFTS}
    assert {(r["policy"], r["turnover"]) for r in rows} == {
        (p, t) for p in hotset_sim.POLICIES for t in turnovers
    }
    assert all(r["lag"] == hotset_sim.SWEEP_LAG for r in rows)
    for policy in hotset_sim.POLICIES:  # a step every iteration: one phase
        assert {r["phase"] for r in rows if r["policy"] == policy} == {0}
    assert all(0 <= r["coverage"] <= r["oracle"] <= 1 for r in rows)
    png = out.with_suffix(".png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_draw_probability_is_what_the_workers_draw() -> None:
    # The workers' own stream, 300 iterations of 4 workers, pooled over rank bands so that
    # one key's luck does not decide it.
    wl = ZipfWorkload(100_000, 1.1, 256, seed=4)
    expected = 4 * wl.draw_probability(200)
    counts: Counter[int] = Counter()
    for t in range(1, 301):
        for worker in range(4):
            counts.update(wl.pull_keys(worker, t).tolist())
    seen = [counts[int(k)] / 300 for k in wl.hottest(200)]
    for lo, hi in ((0, 10), (10, 50), (50, 200)):
        assert sum(seen[lo:hi]) == pytest.approx(sum(expected[lo:hi]), rel=0.03)
    assert expected[0] <= 4.0 and all(a >= b for a, b in zip(expected, expected[1:]))


def test_missing_shares_sorts_the_left_out_oracle_keys_by_what_the_loop_made_of_them() -> None:
    ranked = np.array([5, 3, 8, 1, 0, 2, 4, 6, 7])  # keys, hottest first
    expected = np.array([4.0, 3.0, 2.0, 1.5, 1.0, 0.8, 0.5, 0.2, 0.1])
    rates = {5: 3.9, 3: 0.6, 8: 2.2, 6: 1.0}  # 1 unknown, 3 below the minimum, 8 held back
    kept = {5, 6, 7, 0}  # 1, 3 and 8 left out of the top 5; 6 and 7 outside it
    shares = hotset_sim.missing_shares(kept, ranked, expected, 5, lambda k: rates.get(k, 0.0), 1.0)
    total = expected[:5].sum()
    assert shares == pytest.approx(
        {"unseen": 1.5 / total, "below_min": 3.0 / total, "held_back": 2.0 / total,
         "outside": (0.2 + 0.1) / total}
    )  # fmt: skip


def test_the_epoch_profile_lines_up_iterations_with_the_epoch_starts(tmp_path: Path) -> None:
    # every=6: epochs start at 7, 13, 19; the loops step every 2 iterations, at both
    # phases. The informed loop's step after an epoch's first
    # iteration (phase 1: after 7) is in force from its third (lag 1): it is right from
    # there to the epoch's end, and short before it. The online loop's steps chosen before
    # an epoch start leave out keys it has never seen; later ones far fewer.
    out = tmp_path / "epochs.json"
    assert (
        hotset_sim.main(
            ["--epochs", "every=6,fraction=0.5", "--seeds", "7", "--iterations", "30",
             "--every", "2", "--lag", "1", "--out", str(out)]
        )
        == 0
    )  # fmt: skip
    profile = json.loads(out.read_text())
    rows = {(r["policy"], r["phase"]): r for r in profile["rows"]}
    informed = rows["informed", 1]["ratio_by_offset"]
    assert informed[2:] == pytest.approx([1.0] * 4)
    assert max(informed[:2]) < 0.95
    unseen = rows["dynamic", 0]["missing_by_offset"]["unseen"]
    # phase 0 steps after even iterations, in force at even ones: offsets 1, 3, 5 (the one
    # at 1, e.g. iteration 14, was chosen after 12, before the epoch start at 13)
    assert unseen[0] is None and unseen[2] is None and unseen[4] is None
    assert unseen[1] > 0.1 > unseen[5]
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_epoch_profile_refuses_a_drift_that_moves_nothing() -> None:
    with pytest.raises(SystemExit):
        hotset_sim.main(["--epochs", "none", "--seeds", "1"])
    with pytest.raises(ValueError, match="moves keys"):
        hotset_sim.epoch_profile("every=5,fraction=0", [1], 20)
    with pytest.raises(ValueError, match="more than every=10"):
        hotset_sim.epoch_profile("every=10,fraction=0.2", [1], 10)


def test_a_profile_shorter_than_two_epochs_says_which_offsets_it_never_saw(
    tmp_path: Path,
) -> None:
    out = tmp_path / "short.json"
    args = ["--epochs", "every=10,fraction=0.2", "--seeds", "3", "--iterations", "14"]
    assert hotset_sim.main([*args, "--out", str(out)]) == 0
    profile = json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    for row in profile["rows"]:  # iterations 11-14 are offsets 0-3 of the second epoch
        assert [v is None for v in row["ratio_by_offset"]] == [False] * 4 + [True] * 6
    assert out.with_suffix(".png").stat().st_size > 0


def test_a_config_replays_the_same_run_and_its_seed_decides_the_draws() -> None:
    # A frozen SimConfig is the whole input: the run is seeded by it alone.
    config = SimConfig(SimWorkload("every=5,fraction=0.3", seed=4), iterations=10)
    run = hotset_sim.simulate(config, trace=True)
    assert hotset_sim.simulate(config, trace=True) == run
    other = SimConfig(SimWorkload("every=5,fraction=0.3", seed=5), iterations=10)
    assert hotset_sim.simulate(other, trace=True) != run
