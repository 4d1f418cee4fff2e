"""`make run SYNC=ssp:S|async` (docs/design.md section 8): the options it refuses, and real
runs (Mininet, both targets, with and without LOSS) with a straggler in which every pushed
update is applied exactly once (the conservation check, recomputed from the workers' raw
pushes; with zipf the two modes also end with the same parameters, with lr they push
different updates), pulls are answered stale, and the switch sends on what it cannot hold
for the PS to apply."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiment.schema import load_summary
from tests.test_e2e import SMALL, missing_prerequisites, run_cli
from topologies.switches import REPO_ROOT, bmv2_missing


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (("--sync", "ssp:-1"), "SYNC (--sync): sync mode 'ssp:-1'"),
        (("--sync", "ssp:2", "--topo", "star:4:2"), "has 2 PS shards, use one"),
        (
            ("--sync", "async", "--topo", "leafspine:2:2", "--aggregate", "leaves"),
            "SYNC=async: AGGREGATE=leaves",
        ),
    ],
)
def test_what_ssp_and_async_cannot_take_is_refused_by_name(tmp_path: Path, argv, words) -> None:
    proc = run_cli(*argv, "--runs-dir", str(tmp_path))
    assert proc.returncode == 2 and words in proc.stderr, proc.stderr


def test_lr_is_taken_with_ssp_and_async_since_conservation_checks_each_mode() -> None:
    from experiment.__main__ import build_parser
    from experiment.options import check, config_of

    for sync in ("ssp:2", "async"):
        argv = ["run", "--sync", sync, "--workload", "lr", "--topo", "star:3"]
        check(config_of(build_parser().parse_args(argv)))  # no PreflightError


def test_ssp_zero_is_bsp() -> None:
    from experiment.__main__ import build_parser
    from experiment.options import config_of

    assert config_of(build_parser().parse_args(["run", "--sync", "ssp:0"])).sync == "bsp"


@pytest.mark.parametrize(
    ("sync", "extra"),
    [
        ("ssp:2", ()),
        ("async", ()),
        ("async", ("--loss", "0.02", "--workload", "lr", "--workload-args", "--batch 16")),
        ("ssp:2", ("--target", "bmv2", "--loss", "0.02")),
    ],
    ids=["ssp2", "async", "async-loss-lr", "ssp2-bmv2-loss"],
)
def test_a_straggler_run_applies_every_update_once(tmp_path: Path, sync: str, extra) -> None:
    if why := missing_prerequisites():
        pytest.skip(why)
    if "bmv2" in extra and (why := bmv2_missing()):
        pytest.skip(why)
    runs = tmp_path / "runs"
    proc = subprocess.run(
        [sys.executable, "-m", "experiment", "run", *SMALL, "--sync", sync,
         "--compute", "10ms", "--stragglers", "1:4", "--runs-dir", str(runs),
         "--intf-prefix", f"y{os.getpid() % 1000}", *extra],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    summary_path = runs / "latest" / "summary.json"
    assert summary_path.exists(), proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = load_summary(summary_path)
    # conservation, recomputed from the workers' raw pushes: every update applied once in
    # each mode, whatever the switch held and however often a push was resent
    conserved = summary["conservation"]
    assert conserved["modes"]["warmup"]["status"] == "conserved"
    for mode in ("server", "offload"):
        check = conserved["modes"][mode]
        assert check["status"] == "conserved", check["why"]
        assert check["updates"] == summary["modes"][mode]["updates_total"] > 0
    lr = "lr" in extra
    # zipf's pushes do not depend on the pulls: both modes push the same updates, whose
    # parameters must then be equal too; lr's are gradients at stale values, which differ
    assert conserved["params_compared"] is not lr
    if not lr:
        assert summary["params_sha256"]["server"] == summary["params_sha256"]["offload"]
    assert summary["exact"], conserved
    assert summary["config"]["sync"] == sync
    if "--loss" in extra:
        assert sum(summary["modes"][m]["retransmissions"] for m in ("server", "offload")) > 0
    for mode in ("server", "offload"):
        stale = {int(k): n for k, n in summary["modes"][mode]["staleness"].items()}
        # the fast workers ran ahead of the straggler: some answers lacked its sums
        assert max(stale) >= 1 and max(stale) <= (2 if sync == "ssp:2" else 6)
    offload = summary["modes"]["offload"]
    assert offload["updates_in_switch"] > 0
    report = (runs / "latest" / "report.md").read_text()
    assert "staleness of the PS's pull replies" in report
    assert "conservation: warm-up " in report and "; server-only " in report
    assert "; offload " in report and "each applied once" in report
