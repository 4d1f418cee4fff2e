"""Workloads as classes (hosts/workloads/): what the shipped ones declare, and a fourth
workload that is one class: registered in this file, it is taken by the workers' options, the
agents, the experiment's options and their checks, the sweep, the model and the
configuration line without a change anywhere else (no root, no network)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from experiment import sweep
from experiment.__main__ import build_parser
from experiment.agents import PhasePlan, workload_args
from experiment.config import (
    WARMUP_STREAM_OFFSET,
    PreflightError,
    RunConfig,
    measured_stream_offset,
    warmup_stream_offset,
)
from experiment.configline import config_line
from experiment.model import predict_run, workload_of
from experiment.options import check, config_of
from hosts import worker
from hosts.__main__ import main as hosts_main
from hosts.stats import params_sha256
from hosts.workloads import (
    WORKLOADS,
    DriftSpec,
    LogisticWorkload,
    Step,
    TraceWorkload,
    Workload,
    WorkloadError,
    ZipfWorkload,
    from_args,
    parse_args,
    reference_run,
    register,
    workload_class,
    workload_names,
)
from tests.test_agents import check_exact, run_job


class ToyWorkload(Workload):
    """Every worker pulls keys 0..width-1 each iteration and pushes worker + iteration to
    each: a workload of its own, with an option of its own."""

    name = "toy"
    about = "the same keys every iteration"

    def __init__(self, key_space: int, width: int) -> None:
        if not 1 <= width <= key_space:
            raise WorkloadError(f"--toy-width {width} must be in 1..{key_space}")
        self.key_space, self.width = key_space, width

    @classmethod
    def add_arguments(cls, group: argparse._ArgumentGroup) -> None:
        group.add_argument("--toy-width", type=int, default=4, help="toy: keys per iteration")

    @classmethod
    def from_args(cls, args: argparse.Namespace, drift: DriftSpec | None) -> ToyWorkload:
        return cls(args.keys, args.toy_width)

    @classmethod
    def config_words(
        cls, config: Mapping[str, Any], defaults: Mapping[str, Any]
    ) -> tuple[str, str]:
        return f"toy workload ({config['keys']} keys, the same each iteration)", "toy"

    def check_run(self, run: Mapping[str, Any]) -> list[str]:
        return [f"toy: all {self.width} keys are hot"] if self.width <= run["hot_slots"] else []

    def pull_keys(self, worker: int, iteration: int) -> np.ndarray:
        return np.arange(self.width, dtype=np.uint64)

    def step(self, worker: int, iteration: int, keys: np.ndarray, pulled: np.ndarray) -> Step:
        return Step(keys, np.full(len(keys), worker + iteration, dtype=np.int32))

    def describe(self) -> dict[str, Any]:
        return {"workload": self.name, "keys": self.key_space, "width": self.width}


class FiniteToyWorkload(ToyWorkload):
    """The toy with a stream that ends, as a trace's does."""

    name = "finite-toy"
    finite_stream = True


@pytest.fixture
def toy() -> Iterator[type[ToyWorkload]]:
    register(ToyWorkload)
    try:
        yield ToyWorkload
    finally:
        del WORKLOADS[ToyWorkload.name]


def _run_config(tmp_path: Path, *argv: str) -> RunConfig:
    base = ["run", "--topo", "star:2", "--runs-dir", str(tmp_path / "runs")]
    return config_of(build_parser().parse_args([*base, *argv]))


def test_the_shipped_workloads_declare_what_the_rest_asks() -> None:
    assert workload_names()[:3] == ["zipf", "lr", "trace"]  # --workload's choices, in order
    assert workload_class("zipf") is ZipfWorkload and workload_class("lr") is LogisticWorkload
    assert [c.drifts for c in (ZipfWorkload, LogisticWorkload, TraceWorkload)] == [1, 1, 0]
    assert TraceWorkload.finite_stream and not ZipfWorkload.finite_stream
    (trace,) = TraceWorkload.run_options
    assert (trace.flag, trace.make, trace.dest, trace.needed) == ("--trace", "TRACE", "trace", 1)
    with pytest.raises(WorkloadError, match=r"unknown workload 'nope' \(registered: zipf, "):
        workload_class("nope")


def test_register_refuses_a_second_class_of_one_name_and_a_class_it_cannot_build() -> None:
    class OtherZipf(ToyWorkload):
        name = "zipf"

    with pytest.raises(ValueError, match="'zipf' is registered already"):
        register(OtherZipf)

    class Unbuildable(Workload):
        name = "unbuildable"

    with pytest.raises(TypeError, match="from_args"):
        register(Unbuildable)
    assert "unbuildable" not in WORKLOADS


def test_an_unregistered_workload_is_refused_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--workload", "toy"])
    assert "WORKLOAD (--workload): invalid choice: 'toy'" in capsys.readouterr().err


def test_a_registered_workload_is_taken_by_the_workers_and_the_reference(
    toy: type[ToyWorkload], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--job", "1", "--worker-id", "0", "--ps", "10.0.0.5", "--iterations", "3"]
    args = worker.build_parser().parse_args([*argv, "--workload", "toy", "--toy-width", "3"])
    built = from_args(args)
    assert isinstance(built, ToyWorkload) and built.width == 3
    with pytest.raises(WorkloadError, match=r"--toy-width 0 must be in 1\.\.100000"):
        from_args(parse_args(["--workload", "toy", "--toy-width", "0"]))
    with pytest.raises(WorkloadError, match="--drift goes with zipf or lr, not --workload toy"):
        from_args(parse_args(["--workload", "toy", "--drift", "every=2,fraction=0.5"]))
    # `python -m hosts reference` computes what the PS must end with
    ref = ["reference", "--workers", "2", "--iterations", "3", "--keys", "10"]
    assert hosts_main([*ref, "--workload", "toy", "--toy-width", "3"]) == 0
    expected = reference_run(ToyWorkload(10, 3), 2, 3).params
    assert capsys.readouterr().out.strip() == params_sha256(expected)


def test_the_agents_are_exact_on_a_registered_workload(
    toy: type[ToyWorkload], tmp_path: Path
) -> None:
    workload = ToyWorkload(64, 5)
    params, summaries, _, _ = run_job(workload, 2, 3, tmp_path)
    check_exact(workload, 2, 3, params, summaries)


def test_a_registered_workload_is_accepted_by_the_experiment_options(
    toy: type[ToyWorkload], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _run_config(tmp_path, "--workload", "toy", "--workload-args", "--toy-width 3")
    assert cfg.workload == "toy" and cfg.extra_workload_args == ["--toy-width", "3"]
    assert len(check(cfg).workers) == 2
    assert "hotagg: note: toy: all 3 keys are hot" in capsys.readouterr().out
    # the workers of every phase get its options (experiment/agents.py)
    plan = PhasePlan("offload", tmp_path, 3, True, 0, True, False, 256, None, None, 60)
    argv = ["--job", "1", "--worker-id", "0", "--ps", "10.0.0.5", "--iterations", "3"]
    built = from_args(worker.build_parser().parse_args([*argv, *workload_args(cfg, plan)]))
    assert isinstance(built, ToyWorkload) and built.width == 3
    # a generated stream: the warm-up reads far on, the measured phases from the start
    assert (warmup_stream_offset(cfg), measured_stream_offset(cfg)) == (WARMUP_STREAM_OFFSET, 0)
    # what it cannot take is refused before anything is built, naming the make variables
    for argv, named in [
        (["--workload-args", "--toy-width 0"], "WORKLOAD_ARGS='--toy-width 0': --toy-width 0"),
        (["--workload-args", "--toy-width x"], "WORKLOAD_ARGS='--toy-width x': argument"),
        (["--drift", "every=2,fraction=0.5"], "DRIFT=every=2,fraction=0.5,head=256: goes with"),
        (["--trace", str(tmp_path / "t.csv")], "TRACE= is for WORKLOAD=trace"),
        # an option the run gives every worker itself is not WORKLOAD_ARGS' to change
        (["--workload-args", "--seed 3"], "WORKLOAD_ARGS='--seed 3': --seed is the run's own"),
    ]:
        with pytest.raises(PreflightError, match="^" + re.escape(named)):
            check(_run_config(tmp_path, "--workload", "toy", *argv))


def test_a_finite_stream_is_read_as_a_traces_is(tmp_path: Path) -> None:
    register(FiniteToyWorkload)
    try:
        cfg = _run_config(tmp_path, "--workload", "finite-toy", "--warmup", "4")
        assert (warmup_stream_offset(cfg), measured_stream_offset(cfg)) == (0, 4)
    finally:
        del WORKLOADS[FiniteToyWorkload.name]


def test_the_sweep_gives_every_run_the_workloads_options(
    toy: type[ToyWorkload], tmp_path: Path
) -> None:
    parser = argparse.ArgumentParser()
    sweep.add_arguments(parser)
    point = sweep.Point(2, 1.1, 256, 0.0, 2.0, 1, 1)
    # one word that starts with a dash too (--workload-args=--toy-width=3)
    for given in ("--toy-width 3", "--toy-width=3"):
        args = parser.parse_args(["--workload", "toy", f"--workload-args={given}"])
        run = build_parser().parse_args(["run", *sweep.run_arguments(point, args, tmp_path)])
        built = workload_of(config_of(run).as_dict())
        assert isinstance(built, ToyWorkload) and built.width == 3


def test_the_model_and_the_configuration_line_take_a_registered_workload(
    toy: type[ToyWorkload], tmp_path: Path
) -> None:
    cfg = _run_config(tmp_path, "--workload", "toy", "--workload-args", "--toy-width 6")
    config = {**cfg.as_dict(), "workers": 2, "link_bandwidth_mbps": [2.0]}
    built = workload_of(config)
    assert isinstance(built, ToyWorkload) and built.width == 6
    # every worker pushes the same 6 keys each iteration: the warm-up makes them all hot,
    # and offloaded, the PS link carries less than server-only
    bound = predict_run(built, 2, 5, 2.0, hot_slots=256)
    assert (bound.hot_keys, bound.hot_coverage) == (6, 1.0)
    assert bound.offload.to_ps < bound.server.to_ps
    line = config_line({"config": config})
    assert ", toy workload (100000 keys, the same each iteration), " in line
