"""Several jobs on one switch (JOBS=J, docs/design.md section 9): the per-job options, where
each job's agents run, how the slots are split, and real runs (Mininet, both targets) in
which two jobs of different skew and worker counts share the switch and each ends exact in
every split."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from contract.constants import MAX_WORKERS
from experiment.__main__ import build_parser
from experiment.config import RunConfig, Split, job_configs
from experiment.jobs_run import splits_measured
from experiment.options import check, config_of
from experiment.schema import load_summary
from experiment.testbed import place_jobs
from tests.test_e2e import missing_prerequisites, run_cli
from topologies.generate import MAX_PORTS
from topologies.switches import REPO_ROOT, bmv2_missing

OVER = MAX_WORKERS // 2 + 1
PORTS_FULL = (MAX_PORTS - 1) // 2


def config(*argv: str) -> RunConfig:
    return config_of(build_parser().parse_args(["run", *argv]))


def test_a_per_job_option_takes_one_value_for_all_or_one_per_job() -> None:
    cfg = config("--jobs", "2", "--skew", "1.1,1.3", "--workers", "2,3", "--seed", "7")
    topology = check(cfg)
    jobs = job_configs(cfg)
    assert [(j.job_id, j.skew, j.workers, j.seed) for j in jobs] == [
        (1, 1.1, 2, 7),
        (2, 1.3, 3, 7),
    ]
    # the run's star: every job's workers and a PS per job
    assert cfg.workers == 5 and len(topology.workers) == 5
    assert len(topology.parameter_servers) == 2
    # a one-job run is its own single job
    single = config("--skew", "1.2")
    assert job_configs(single) == [single] and single.per_job == {}


def test_each_job_runs_on_its_own_workers_and_ps() -> None:
    cfg = config("--jobs", "3", "--workers", "1,2,3")
    topology = check(cfg)
    placed = place_jobs(cfg, topology)
    names = [[h.name for h in p.workers] for p in placed]
    assert [len(n) for n in names] == [1, 2, 3]
    flat = [n for group in names for n in group]
    assert len(set(flat)) == len(flat)  # no worker host in two jobs
    servers = [p.parameter_servers[0].name for p in placed]
    assert len(set(servers)) == 3 and not set(servers) & set(flat)
    # one job: every PS of the topology is its shard
    shards = config("--topo", "star:4:2")
    [only] = place_jobs(shards, check(shards))
    assert len(only.parameter_servers) == 2


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (("--skew", "1.1,1.3"), "SKEW=1.1,1.3 gives 2 values; JOBS=1 takes one value"),
        (("--jobs", "2", "--seed", "1,2,3"), "SEED=1,2,3 gives 3 values; JOBS=2"),
        (("--jobs", "2", "--topo", "star:8"), "JOBS=2: TOPO= is not taken"),
        (("--jobs", "2", "--aggregate", "leaves"), "JOBS=2: AGGREGATE= is not taken"),
        (("--jobs", "2", "--hotset", "dynamic"), "JOBS=2: HOTSET= is not taken"),
        # two jobs of OVER workers are more than the switch's ids; of PORTS_FULL, fewer, but
        # with the two PS hosts more than the star's ports
        (("--jobs", "2", "--workers", f"{OVER},{OVER}"), f"{2 * OVER} workers in all; the star"),
        (
            ("--jobs", "2", "--workers", f"{PORTS_FULL},{PORTS_FULL}"),
            f"{2 * PORTS_FULL} workers and 2 parameter servers in all",
        ),
        (("--jobs", "4", "--hot-slots", "3"), "HOT_SLOTS=3 cannot give each of 4 jobs a slot"),
    ],
)
def test_what_several_jobs_cannot_take_is_refused_by_name(tmp_path: Path, argv, words) -> None:
    proc = run_cli(*argv, "--runs-dir", str(tmp_path))
    assert proc.returncode == 2 and words in proc.stderr, proc.stderr


def test_malformed_per_job_values_name_their_make_variable(tmp_path: Path) -> None:
    for argv, words in (
        (("--skew", "1.1,x"), "SKEW (--skew): 'x' is not a number"),
        (("--workload", "zipf,nope"), "WORKLOAD (--workload): invalid choice: 'nope'"),
        (("--jobs", "0"), "JOBS (--jobs): 0 is not in 1.."),
        (("--split", "halves"), "SPLIT (--split): invalid choice"),
    ):
        proc = run_cli(*argv, "--runs-dir", str(tmp_path))
        assert proc.returncode == 2 and words in proc.stderr, proc.stderr


def test_the_savings_split_is_measured_beside_equal_halves() -> None:
    assert splits_measured(config("--jobs", "2")) == [Split.SAVINGS, Split.EQUAL]
    assert splits_measured(config("--jobs", "2", "--split", "equal")) == [Split.EQUAL]


# Two jobs that differ in skew and in workers (a job with more workers updates its hot keys
# more often per iteration, so the savings split gives it more of the scarce slots).
JOBS_RUN = [
    "--jobs", "2", "--workers", "2,3", "--skew", "1.0,1.4", "--seed", "11,12",
    "--iterations", "6", "--warmup", "3", "--keys", "5000", "--keys-per-iter", "128",
    "--hot-slots", "24", "--bw", "2",
]  # fmt: skip


def run_jobs(tmp_path: Path, *extra: str) -> tuple[Path, dict]:
    if why := missing_prerequisites():
        pytest.skip(why)
    runs = tmp_path / "runs"
    proc = subprocess.run(
        [sys.executable, "-m", "experiment", "run", *JOBS_RUN, "--runs-dir", str(runs),
         "--intf-prefix", f"j{os.getpid() % 1000}", *extra],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    run_dir = (runs / "latest").resolve()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return run_dir, json.loads((run_dir / "summary.json").read_text())


@pytest.mark.parametrize(
    "extra", [(), ("--loss", "0.02"), ("--target", "bmv2")], ids=["embedded", "loss", "bmv2"]
)
def test_two_jobs_share_the_switch_and_each_is_exact_in_every_split(tmp_path, extra) -> None:
    if "bmv2" in extra and (why := bmv2_missing()):
        pytest.skip(why)
    run_dir, jobs = run_jobs(tmp_path, *extra)
    assert jobs["exact"]
    config = json.loads((run_dir / "config.json").read_text())
    slots = config["slots"]
    # each split stays within HOT_SLOTS; equal halves give each job at most half
    for split in ("savings", "equal"):
        assert sum(slots[split].values()) <= 24
    assert all(n <= 12 for n in slots["equal"].values())
    for job_id, workers in ((1, 2), (2, 3)):
        own = load_summary(run_dir / f"job{job_id}" / "summary.json")
        assert own["exact"] and own["workers"] == workers
        assert own["config"]["job_id"] == job_id
        offload = own["modes"]["offload"]
        # the switch summed some of this job's updates, and only this job's PS saw the rest
        assert 0 < offload["updates_in_switch"] < offload["updates_total"]
        for phase in ("server", "offload", "offload-equal"):
            assert (run_dir / phase / f"job{job_id}" / "params0.npy").exists()
        assert (run_dir / f"job{job_id}" / "report.md").exists()
    assert (run_dir / "jobs.png").stat().st_size > 0
