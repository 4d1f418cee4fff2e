"""bench/hotset_sim.py: the policies it compares, and the drift sweep's JSON and figure."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from bench import hotset_sim
from hosts.workloads import DriftSpec, ZipfWorkload


def test_the_informed_loop_bounds_the_online_one_and_static_trails_under_drift() -> None:
    # One seeded workload at the sweep's lag; the ordering is what the policies are for
    # (informed knows what dynamic estimates, static never moves), not this seed's luck.
    runs = {
        policy: hotset_sim.simulate(
            "every=10,fraction=0.2", seed=7, iterations=40, lag=hotset_sim.SWEEP_LAG, policy=policy
        )
        for policy in hotset_sim.POLICIES
    }
    assert runs["static"]["keys_moved"] == 0
    assert runs["informed"]["coverage"] >= runs["dynamic"]["coverage"]
    assert runs["dynamic"]["coverage"] > runs["static"]["coverage"]
    for run in runs.values():  # one workload: the oracles do not depend on the policy
        assert run["expected_oracle"] == runs["static"]["expected_oracle"]
        assert run["coverage"] <= run["oracle"]


def test_the_informed_loop_installs_the_expected_oracle_of_the_iteration_it_counted() -> None:
    # The head changes every 2 iterations; a step after each even iteration s sets the
    # expected oracle's keys of s, in force (lag 0) in s+1 and s+2, i.e. the next epoch's.
    drift, seed, iterations = "every=2,fraction=0.5", 7, 12
    run = hotset_sim.simulate(
        drift, seed, iterations, lag=0, every=2, policy="informed", trace=True
    )
    wl = ZipfWorkload(100_000, 1.1, 256, seed=seed, drift=DriftSpec.parse(drift))
    for t in range(3, iterations + 1):
        counts: Counter[int] = Counter()
        for worker in range(4):
            counts.update(wl.pull_keys(worker, t).tolist())
        stepped = t - 1 if (t - 1) % 2 == 0 else t - 2
        hot = set(wl.hottest(run["budget"], stepped).tolist())
        assert hot != set(wl.hottest(run["budget"], t).tolist())  # the drift moved it
        want = sum(n for k, n in counts.items() if k in hot) / sum(counts.values())
        assert run["coverage_per_iteration"][t - 1] == pytest.approx(want)


def test_a_loop_stepping_after_odd_iterations_reads_each_epoch_start_inside_a_step() -> None:
    # Epochs of every=10 start at iterations 11, 21, ...: phase 0 steps after 10 and 12,
    # phase 1 after 11, which mixes one old iteration into the step that meets the change.
    # The informed loop, told the distribution of the iteration it stepped after, gets the
    # new head one iteration sooner at phase 1.
    runs = {
        phase: hotset_sim.simulate(
            "every=10,fraction=0.2",
            seed=7,
            iterations=40,
            lag=1,
            phase=phase,
            policy="informed",
            trace=True,
        )
        for phase in (0, 1)
    }
    at = {p: r["coverage_per_iteration"] for p, r in runs.items()}
    assert at[1][13 - 1] > at[0][13 - 1]  # phase 1's step after 11 is in force at 13
    assert at[1][14 - 1] == pytest.approx(at[0][14 - 1])  # phase 0's after 12 catches up at 14


def test_an_unknown_policy_or_a_lag_of_a_whole_step_is_refused() -> None:
    with pytest.raises(ValueError, match="policy 'oracle'"):
        hotset_sim.simulate(None, seed=1, iterations=2, policy="oracle")
    with pytest.raises(ValueError, match="lag 2 must be in"):
        hotset_sim.simulate(None, seed=1, iterations=2, every=2, lag=2)
    with pytest.raises(ValueError, match="phase 2 must be in"):
        hotset_sim.simulate(None, seed=1, iterations=2, every=2, phase=2)


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
    for policy in hotset_sim.POLICIES:  # the loops at both step phases, static once
        phases = {r["phase"] for r in rows if r["policy"] == policy}
        assert phases == ({0} if policy == "static" else {0, 1})
    assert all(0 <= r["coverage"] <= r["oracle"] <= 1 for r in rows)
    png = out.with_suffix(".png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
