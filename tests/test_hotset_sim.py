"""bench/hotset_sim.py: the policies it compares, and the drift sweep's JSON and figure."""

from __future__ import annotations

import json

import pytest

from bench import hotset_sim


def test_the_informed_loop_bounds_the_online_one_and_static_trails_under_drift() -> None:
    runs = {
        policy: hotset_sim.simulate("every=10,fraction=0.2", seed=7, iterations=40, policy=policy)
        for policy in hotset_sim.POLICIES
    }
    assert runs["static"]["keys_moved"] == 0
    assert runs["informed"]["coverage"] >= runs["dynamic"]["coverage"]
    assert runs["dynamic"]["coverage"] > runs["static"]["coverage"]
    for run in runs.values():  # one workload: the oracles do not depend on the policy
        assert run["expected_oracle"] == runs["static"]["expected_oracle"]
        assert run["coverage"] <= run["oracle"]


def test_the_informed_loop_holds_the_expected_oracle_once_it_has_stepped() -> None:
    # No drift, no lag: its step after iteration 2 sets the expected oracle's keys, so from
    # iteration 3 on it covers exactly what the expected oracle does; the two differ only
    # in iterations 1-2 (the warm-up's set). Means are rounded to 1e-4.
    short = hotset_sim.simulate(None, seed=7, iterations=2, policy="informed", lag=0)
    long = hotset_sim.simulate(None, seed=7, iterations=30, policy="informed", lag=0)
    assert 30 * long["coverage"] - 2 * short["coverage"] == pytest.approx(
        30 * long["expected_oracle"] - 2 * short["expected_oracle"], abs=0.005
    )
    assert short["ratio_expected"] < 1.0  # the warm-up's set is not the oracle's


def test_an_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="policy 'oracle'"):
        hotset_sim.simulate(None, seed=1, iterations=2, policy="oracle")


def test_the_sweep_writes_every_policy_at_every_drift_and_a_figure(tmp_path) -> None:
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
    assert all(0 <= r["coverage"] <= r["oracle"] <= 1 for r in rows)
    png = out.with_suffix(".png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
