"""Compute and stragglers in real runs: `python -m experiment run` in Mininet with COMPUTE and
STRAGGLERS, on each target. The runs must end exact, the workers must have slept what was
drawn, and where the verdict is faithful the measured iteration must be within 15% of the
model with compute (experiment/model.py iteration_ms)."""

from __future__ import annotations

import pytest

from tests.test_e2e import run_experiment
from topologies.switches import bmv2_missing

pytestmark = [pytest.mark.root, pytest.mark.e2e]

# 10 iterations, not SMALL's 6: a p50 over more of them than the first's start-up; 256 keys
# per worker at 1 Mbit/s: the PS link busy about half the iteration, so that the run can be
# network-bound between the computes
COMPUTE = ["--iterations", "10", "--keys-per-iter", "256", "--bw", "1"]
COMPUTE += ["--compute", "normal:40ms,5ms", "--stragglers", "1:3", "--seed", "5"]


@pytest.mark.parametrize("target", ["embedded", "bmv2"])
def test_a_run_with_a_straggler_is_exact_and_follows_the_model(tmp_path, target) -> None:
    if target == "bmv2" and (why := bmv2_missing()):
        pytest.skip(why)
    proc, summary = run_experiment(tmp_path, "--target", target, *COMPUTE)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert summary["exact"]
    compute = summary["compute"]
    assert compute["compute"] == "normal:40ms,5ms" and compute["stragglers"] == "1:3"
    for mode in ("server", "offload"):
        slept = compute["modes"][mode]
        # worker 0 slept three times the others (the draws' noise is 5 ms of 40)
        others = slept["per_worker_mean_ms"][1:]
        assert slept["per_worker_mean_ms"][0] == pytest.approx(3 * sum(others) / 2, rel=0.2)
    model = summary["model"]["iteration"]
    assert model["slowest_compute_ms"] == pytest.approx(
        compute["modes"]["server"]["slowest_mean_ms"], rel=0.05
    )
    assert "compute normal:40ms,5ms, stragglers 1:3" in proc.stdout
    assert "model with compute:" in proc.stdout
    fid = summary["fidelity"]
    for mode in ("server", "offload"):
        measured = summary["modes"][mode]["iteration_ms"]["p50"]
        if fid["details"][mode]["faithful"]:
            why = f"{mode}: {fid['details'][mode]['why']}"
            assert measured == pytest.approx(model[mode]["p50_ms"], rel=0.15), why
