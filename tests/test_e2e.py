"""End to end: `python -m experiment run` in Mininet with a small configuration.

Real namespaces, veth links, switch processes, P4Runtime over gRPC and the agents; the
assertions are on the run's summary.json, the way a user reads it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from contract.constants import MAX_WORKERS
from experiment.config import HOTSET_EVERY
from experiment.schema import load_summary
from topologies.network import missing_prerequisites
from topologies.switches import REPO_ROOT, bmv2_missing

pytestmark = [pytest.mark.root, pytest.mark.e2e]

SMALL = [
    "--workers",
    "3",
    "--iterations",
    "6",
    "--warmup",
    "2",
    "--keys",
    "5000",
    "--keys-per-iter",
    "128",
    "--hot-slots",
    "64",
    "--skew",
    "1.2",
]
MODE_FIELDS = ("iteration_ms", "push_ms", "pull_ms")
COUNT_FIELDS = ("ps_packets_in", "updates_total", "updates_in_switch", "retransmissions")


def run_experiment(tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    if why := missing_prerequisites():
        pytest.skip(why)
    runs = tmp_path / "runs"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiment",
            "run",
            *SMALL,
            "--runs-dir",
            str(runs),
            "--grpc-base-port",
            "0",
            "--intf-prefix",
            f"e{os.getpid() % 1000}",
            *extra,
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    summary_path = runs / "latest" / "summary.json"
    assert summary_path.exists(), proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc, dict(load_summary(summary_path))  # checked against experiment/schema.py


@pytest.fixture(scope="module")
def embedded_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess, dict]:
    """The embedded target's run at seed 3, shared by the tests that read it."""
    tmp_path = tmp_path_factory.mktemp("embedded")
    return (tmp_path, *run_experiment(tmp_path, "--seed", "3"))


def test_offload_is_exact_and_takes_hot_updates_off_the_ps(embedded_run):
    tmp_path, proc, summary = embedded_run
    assert proc.returncode == 0, proc.stderr[-2000:]
    for field in ("target", "topology", "workers", "iterations", "seed", "exact"):
        assert field in summary
    assert summary["exact"] is True
    assert summary["params_sha256"]["server"] == summary["params_sha256"]["offload"]
    server, offload = summary["modes"]["server"], summary["modes"]["offload"]
    for mode in (server, offload):
        for field in MODE_FIELDS:
            assert mode[field]["p50"] > 0 and mode[field]["p99"] >= mode[field]["p50"]
        for field in COUNT_FIELDS:
            assert isinstance(mode[field], int)
    assert server["updates_in_switch"] == 0
    assert offload["updates_in_switch"] > 0
    assert server["updates_total"] == offload["updates_total"]
    assert offload["ps_packets_in"] < server["ps_packets_in"]
    run_dir = (tmp_path / "runs" / "latest").resolve()
    for name in (
        "latency.csv",
        "latency_cdf.png",
        "ps_load.png",
        "skew.png",
        "latency_dissection.png",
    ):
        assert (run_dir / name).stat().st_size > 0, name
    assert "exact: True" in proc.stdout


@pytest.mark.bmv2
def test_bmv2_run_is_exact_and_ends_with_the_embedded_targets_parameters(embedded_run, tmp_path):
    """The same run on BMv2: exact, and the final parameters are those of the embedded
    target (both targets sum the same integers, so the hashes must be equal)."""
    if why := bmv2_missing():
        pytest.skip(f"BMv2 target: {why}")
    proc, summary = run_experiment(tmp_path, "--seed", "3", "--target", "bmv2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert summary["target"] == "bmv2" and summary["exact"] is True
    assert summary["modes"]["offload"]["updates_in_switch"] > 0
    assert summary["params_sha256"] == embedded_run[2]["params_sha256"]


def test_loss_keeps_the_run_exact(tmp_path):
    # On a generated star (TOPO=star:3), which needs no file.
    proc, summary = run_experiment(tmp_path, "--loss", "0.05", "--seed", "4", "--topo", "star:3")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert summary["exact"] is True
    offload = summary["modes"]["offload"]
    assert offload["retransmissions"] > 0  # the drop simulator really dropped packets
    assert offload["switch_stats"]["s1"]["SIM_DROP"] > 0


def test_bw_auto_calibrates_and_records_the_verdicts(tmp_path):
    """BW=auto: rising rates until one does not saturate the PS link in both modes; the run
    uses the last that did (the lowest tried when none did) and records every trial. Which
    rate wins depends on the machine, so the test checks the rule, not a rate."""
    proc, summary = run_experiment(tmp_path, "--bw", "auto", "--seed", "6")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert summary["exact"] is True
    auto = summary["config"]["bw_auto"]
    trials = auto["trials"]
    rates = [t["mbps"] for t in trials]
    assert rates == sorted(rates) and len(rates) >= 1
    assert all(t["saturated"] for t in trials[:-1])
    bound = [t["mbps"] for t in trials if t["saturated"]]
    assert auto["chosen_mbps"] == (bound[-1] if bound else rates[0])
    assert summary["link_bandwidth_mbps"] == [auto["chosen_mbps"]]
    fidelity = summary["fidelity"]
    assert set(fidelity["bottlenecks"]) == {"server", "offload"}
    assert "BW=auto:" in proc.stdout
    # the header says the rate is not known yet, then the rate the calibration chose
    assert "links BW=auto (calibrated after the warm-up)" in proc.stdout
    assert f"links {auto['chosen_mbps']:g} Mbit/s" in proc.stdout
    run_dir = (tmp_path / "runs" / "latest").resolve()
    assert (run_dir / f"calibrate-{rates[0]:g}-server").is_dir()
    # A rate counts only when both modes were PS-link-bound there, the link saturated.
    for trial in trials:
        both = trial["modes"] == {"server": "ps_link", "offload": "ps_link"}
        full = all(u >= 0.8 for u in trial["ps_link_utilization"].values())
        assert trial["saturated"] == (both and full)


def test_training_run_is_exact_so_cached_pulls_were_right(tmp_path):
    # Logistic regression computes its gradients from the pulled parameters, so a wrong
    # value answered from the switch's cache would change the parameters (and `exact`).
    proc, summary = run_experiment(tmp_path, "--workload", "lr", "--seed", "5")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert summary["exact"] is True
    offload = summary["modes"]["offload"]
    assert offload["pulls_answered_by_switch"] > 0 and offload["updates_in_switch"] > 0
    assert offload["switch_stats"]["s1"]["CACHE_WRITE"] > 0


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "experiment", "run", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_bad_options_fail_with_a_clear_message(tmp_path):
    proc = run_cli("--workers", "9", "--runs-dir", str(tmp_path))
    assert proc.returncode == 2 and "WORKERS=9" in proc.stderr  # options come before root
    assert "Traceback" not in proc.stderr
    proc = run_cli("--bw", "0", "--runs-dir", str(tmp_path))
    assert proc.returncode == 2 and "BW (--bw): 0 is not a positive number" in proc.stderr
    assert "Traceback" not in proc.stderr
    if os.geteuid() == 0:
        too_many = MAX_WORKERS + 1
        proc = run_cli("--topo", f"star:{too_many}", "--runs-dir", str(tmp_path))
        assert proc.returncode == 2
        assert f"{too_many} workers; the switch takes 1..{MAX_WORKERS}" in proc.stderr
        proc = run_cli("--ps", "h9", "--runs-dir", str(tmp_path))
        assert proc.returncode == 2 and "PS=h9: no host 'h9'" in proc.stderr
        proc = run_cli("--workload", "trace", "--runs-dir", str(tmp_path))
        assert proc.returncode == 2 and "WORKLOAD=trace needs TRACE=" in proc.stderr
        trace = tmp_path / "short.csv"
        trace.write_text("".join(f"{t},0,{t}\n" for t in range(1, 11)))
        proc = run_cli("--workload", "trace", "--trace", str(trace), "--runs-dir", str(tmp_path))
        assert proc.returncode == 2 and "has 10 iterations" in proc.stderr
        assert not list(tmp_path.glob("*-seed*"))  # refused before a run directory was made


def test_a_second_aggregating_switch_is_refused(tmp_path):
    if why := missing_prerequisites():
        pytest.skip(why)
    topo = json.loads((REPO_ROOT / "topologies" / "leafspine.json").read_text())
    topo["switches"]["s2"] = {"aggregate": True, "service_ip": "10.0.2.254"}
    path = tmp_path / "two-aggregators.json"
    path.write_text(json.dumps(topo))
    proc = run_cli("--topo", str(path), "--runs-dir", str(tmp_path / "runs"))
    assert proc.returncode == 2
    assert "marks 2 switches 'aggregate'" in proc.stderr
    assert not (tmp_path / "runs").exists()  # refused before anything was started


# --- HOTSET=static|dynamic and DRIFT (experiment/hotset.py) ----------------------------------

DRIFTING = ["--iterations", "24", "--drift", "every=5,fraction=0.3"]


def check_coverage(summary: dict, mode: str, drift: str | None) -> dict:
    """The summary's offload_hot_set block: present, in range, achieved never above the oracle (the
    switch sums at most one key per slot and iteration), and its counts agree with the
    run's own totals."""
    hs = summary["offload_hot_set"]
    assert hs["mode"] == mode and hs["drift"] == drift
    assert hs["budget"] == summary["warmup_hot_set"]["keys"]  # the same slots in both modes
    n = summary["iterations"]
    for field in ("coverage", "oracle_coverage", "updates", "summed"):
        assert len(hs[field]) == n, field
    for c, o in zip(hs["coverage"], hs["oracle_coverage"]):
        assert 0.0 <= c <= o + 1e-9 and o <= 1.0
    for field in ("coverage_mean", "oracle_coverage_mean", "coverage_ratio"):
        assert 0.0 <= hs[field] <= 1.0 + 1e-9, field
    recovery = hs["coverage_ratio_by_epoch_offset"]
    if drift is None:
        assert recovery is None
    else:  # one entry per iteration of an epoch; the switch sums at most the oracle's keys
        assert len(recovery) == int(drift.split(",")[0].split("=")[1])
        assert all(0.0 <= r <= 1.0 + 1e-9 for r in recovery)
    offload = summary["modes"]["offload"]
    assert sum(hs["updates"]) == offload["updates_total"]  # the workload is the one run
    assert sum(hs["summed"]) == offload["updates_in_switch"]  # the masks are the switch's
    return hs


def test_static_run_records_its_coverage_against_the_oracle(embedded_run):
    tmp_path, proc, summary = embedded_run
    hs = check_coverage(summary, "static", None)
    assert hs["moves"] == [] and hs["keys_moved"] == 0 and hs["every"] is None
    assert "hot set (static): coverage" in proc.stdout
    assert (tmp_path / "runs" / "latest" / "coverage.png").stat().st_size > 0


@pytest.mark.parametrize("target", ["embedded", "bmv2"])
def test_dynamic_hot_set_follows_a_drift_and_stays_exact(tmp_path, target):
    """HOTSET=dynamic DRIFT=every=5,fraction=0.3: the online loop moves keys while the
    workers train, and the parameters are still those of server-only."""
    if target == "bmv2" and (why := bmv2_missing()):
        pytest.skip(f"BMv2 target: {why}")
    proc, summary = run_experiment(
        tmp_path, "--seed", "7", "--target", target, "--hotset", "dynamic", *DRIFTING
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert summary["exact"] is True
    assert summary["params_sha256"]["server"] == summary["params_sha256"]["offload"]
    hs = check_coverage(summary, "dynamic", "every=5,fraction=0.3,head=256")
    # which switch ran, in the header and the config (BMv2's builds differ several-fold)
    if target == "bmv2":
        assert f"BMv2 ({summary['config']['bmv2_binary']})," in proc.stdout
    else:
        assert "embedded switch," in proc.stdout and "bmv2_binary" not in summary["config"]
    assert hs["every"] == HOTSET_EVERY["ps"] and hs["reselections"] >= 1
    assert hs["keys_moved"] > 0
    assert hs["keys_moved"] == sum(m["added"] + m["removed"] for m in hs["moves"])
    assert all(m["hot"] <= hs["budget"] for m in hs["moves"])
    run_dir = (tmp_path / "runs" / "latest").resolve()
    assert (run_dir / "coverage.png").stat().st_size > 0
    assert (run_dir / "offload" / "hotset.log").read_text().count("keys, coverage") == len(
        hs["moves"]
    )
    assert "online hot set:" in proc.stdout and "keys moved (" in proc.stdout
    # the warm-up saw no drift, the measured phases did
    assert "drift" not in json.loads((run_dir / "warmup" / "w0.json").read_text())["workload"]
    for phase in ("server", "offload"):
        workload = json.loads((run_dir / phase / "w0.json").read_text())["workload"]
        assert workload["drift"] == "every=5,fraction=0.3,head=256", phase


@pytest.mark.parametrize("target", ["embedded", "bmv2"])
def test_dynamic_hot_set_measured_by_the_switch_alone_stays_exact(tmp_path, target):
    """HOTSET_SOURCE=switch: the loop reads the hot-key hit counters and the cold-key
    sketch, not the PS's counters, so every key it adds was found by the sketch."""
    if target == "bmv2" and (why := bmv2_missing()):
        pytest.skip(f"BMv2 target: {why}")
    proc, summary = run_experiment(
        tmp_path, "--seed", "7", "--target", target, "--hotset", "dynamic",
        "--hotset-source", "switch", "--iterations", "60", "--drift", "every=5,fraction=0.3",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert summary["exact"] is True
    hs = check_coverage(summary, "dynamic", "every=5,fraction=0.3,head=256")
    assert hs["source"] == "switch" and hs["reselections"] >= 1
    assert hs["every"] == HOTSET_EVERY["switch"]  # each step reads the switch's counters
    assert "head=256, measured by the switch): coverage" in proc.stdout
    assert sum(m["added"] for m in hs["moves"]) > 0
    log = (tmp_path / "runs" / "latest" / "offload" / "hotset.log").read_text()
    assert "(oracle" not in log  # the switch's counts cover reported keys only


def test_dynamic_hot_set_without_drift_stays_exact(tmp_path):
    proc, summary = run_experiment(
        tmp_path, "--seed", "8", "--hotset", "dynamic", "--iterations", "16"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert summary["exact"] is True
    hs = check_coverage(summary, "dynamic", None)
    assert hs["reselections"] >= 1  # the loop ran during the phase
