"""`make run SYNC=ssp:S|async` (docs/design.md section 8): the options it refuses, and real
runs (Mininet, both targets) with a straggler in which every pushed update is applied
exactly once (the two modes end with the same parameters), pulls are answered stale, and
the switch sends on what it cannot hold for the PS to apply."""

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
        (("--sync", "async", "--workload", "lr"), "WORKLOAD=lr's pushes depend on the values"),
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


def test_ssp_zero_is_bsp() -> None:
    from experiment.__main__ import build_parser
    from experiment.options import config_of

    assert config_of(build_parser().parse_args(["run", "--sync", "ssp:0"])).sync == "bsp"


@pytest.mark.parametrize(
    ("sync", "extra"),
    [("ssp:2", ()), ("async", ()), ("async", ("--loss", "0.02")), ("ssp:2", ("--target", "bmv2"))],
    ids=["ssp2", "async", "async-loss", "ssp2-bmv2"],
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
    # conservation: the same updates applied once each, whatever the switch held
    assert summary["exact"], summary["params_sha256"]
    assert summary["config"]["sync"] == sync
    for mode in ("server", "offload"):
        stale = {int(k): n for k, n in summary["modes"][mode]["staleness"].items()}
        # the fast workers ran ahead of the straggler: some answers lacked its sums
        assert max(stale) >= 1 and max(stale) <= (2 if sync == "ssp:2" else 6)
    offload = summary["modes"]["offload"]
    assert offload["updates_in_switch"] > 0
    assert "staleness of the PS's pull replies" in (runs / "latest" / "report.md").read_text()
