"""Switch targets as classes (topologies/targets.py): what each shipped target owns, and a
third target that is one class: registered, it is accepted by the options, the sweep, the
switch process and the report without a change anywhere else (no root, no network)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from experiment import sweep
from experiment.__main__ import build_parser
from experiment.configline import config_line
from experiment.options import check, config_of
from experiment.report import regime_hint
from topologies.switches import SwitchProcess
from topologies.targets import (
    TARGETS,
    Bmv2Target,
    Capabilities,
    EmbeddedTarget,
    LaunchSpec,
    Target,
    UnknownTarget,
    make_target,
    register,
    switch_programs,
    target_class,
)

SPEC = LaunchSpec("s1", {2: "veth2", 1: "veth1"}, "127.0.0.1:50999", 3, 510, 7)
# A stand-in switch: it listens on the P4Runtime port it is given, which is what readiness
# asks of a target by default.
LISTEN = (
    "import socket, sys, time; s = socket.socket(); "
    "s.bind(('127.0.0.1', int(sys.argv[1].rsplit(':', 1)[1]))); s.listen(); time.sleep(60)"
)


class ToyTarget(Target):
    """A third target: a program that only opens its P4Runtime port."""

    name = "toy"
    capabilities = Capabilities(register_reads=False)
    programs = ("toy-switch",)

    def argv(self, spec: LaunchSpec) -> list[str]:
        return [sys.executable, "-c", LISTEN, spec.grpc_addr, "toy-switch"]

    @classmethod
    def cost_note(cls, record: Mapping[str, object]) -> str | None:
        return "a faster toy"


@pytest.fixture
def toy() -> Iterator[type[ToyTarget]]:
    register(ToyTarget)
    try:
        yield ToyTarget
    finally:
        del TARGETS[ToyTarget.name]


def test_each_shipped_target_builds_its_own_command_line() -> None:
    embedded = EmbeddedTarget().argv(SPEC)
    assert embedded[1:3] == ["-m", "softswitch"]
    assert embedded[embedded.index("-i") + 1] == "1@veth1"  # ports in port order
    assert embedded[embedded.index("--seed") + 1] == "7"
    bmv2 = Bmv2Target("simple_switch_grpc-perf").argv(SPEC)
    assert bmv2[0] == "simple_switch_grpc-perf" and "--no-p4" in bmv2
    assert bmv2[bmv2.index("--grpc-server-addr") + 1] == "127.0.0.1:50999"
    assert "--seed" not in bmv2  # BMv2's drop simulator has no seed option


def test_what_differs_between_the_targets_is_asked_of_the_class(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert EmbeddedTarget.capabilities.register_reads
    assert not Bmv2Target.capabilities.register_reads  # p4lang/PI issue 376
    assert EmbeddedTarget().device_config() == b""  # it serves the P4Info alone
    monkeypatch.setenv("BMV2_BINARY", "simple_switch_grpc-perf")
    bmv2 = make_target("bmv2")
    assert bmv2 == Bmv2Target("simple_switch_grpc-perf")
    assert bmv2.record() == {"bmv2_binary": "simple_switch_grpc-perf"}
    assert bmv2.describe() == "BMv2 (simple_switch_grpc-perf)"
    assert "no-such-switch" in (Bmv2Target("no-such-switch").missing() or "")
    assert EmbeddedTarget().missing() is None
    # the regime hint's note: the standard build is the cost to change, the -perf one not
    assert "-perf" in (Bmv2Target.cost_note({"bmv2_binary": "simple_switch_grpc"}) or "")
    assert Bmv2Target.cost_note({"bmv2_binary": "simple_switch_grpc-perf"}) is None
    assert EmbeddedTarget.log_path(EmbeddedTarget(), Path("/l"), "s1") == Path("/l/s1.log")


def test_an_unknown_target_names_the_registered_ones() -> None:
    with pytest.raises(UnknownTarget, match="embedded, bmv2"):
        target_class("tofino")
    with pytest.raises(ValueError, match="unknown target 'tofino'"):
        SwitchProcess("s1", {}, target="tofino", grpc_port=1)


def test_a_registered_target_is_accepted_everywhere_without_other_changes(
    toy: type[ToyTarget], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from experiment import runner  # imports Mininet: only this test needs it

    # the run's options, and their check before anything is built
    argv = ["run", "--target", "toy", "--topo", "star:2", "--runs-dir", str(tmp_path)]
    cfg = config_of(build_parser().parse_args(argv))
    assert cfg.target == "toy"
    assert len(check(cfg).workers) == 2
    # the runner's preflight makes the testbed of it (root and Mininet taken as there)
    monkeypatch.setattr("os.geteuid", lambda: 0)
    monkeypatch.setattr(runner, "missing_prerequisites", lambda: None)
    bed = runner.preflight(cfg)
    assert isinstance(bed.target, ToyTarget)
    assert "-toy-seed1-" in runner.Experiment(cfg, bed).make_run_dir().name
    # the sweep passes it to every run
    parser = argparse.ArgumentParser()
    sweep.add_arguments(parser)
    point = sweep.Point(2, 1.1, 256, 0.0, 2.0, 1, 1)
    argv = sweep.run_arguments(point, parser.parse_args(["--target", "toy"]), tmp_path)
    assert argv[argv.index("--target") + 1] == "toy"
    # the report names it, and its cost note is the regime hint's
    config = {**cfg.as_dict(), "link_bandwidth_mbps": [2.0]}
    assert config_line({"config": config}).startswith("config: toy target, ")
    hint = regime_hint({"fidelity": {"bottlenecks": {"offload": "switch"}}, "config": config})
    assert hint == "a faster toy, or a lower BW= than 2"
    # `make stop` looks for its processes too
    assert "toy-switch" in switch_programs()


def test_a_registered_target_starts_and_is_ready_as_its_class_says(
    toy: type[ToyTarget], tmp_path: Path
) -> None:
    switch = SwitchProcess("s1", {1: "veth1"}, target="toy", log_dir=tmp_path)
    assert switch.target == "toy" and isinstance(switch.kind, ToyTarget)
    with switch:  # start() returns once the class's readiness says so
        assert switch.proc is not None and switch.proc.poll() is None
        assert switch.argv()[-2:] == [switch.grpc_addr, "toy-switch"]
    assert switch.proc.poll() is not None
    assert switch.log_path == tmp_path / "s1.log"
