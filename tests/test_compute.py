"""Compute time and stragglers (hosts/compute.py), their options (experiment/options.py) and
the model with compute (experiment/model.py iteration_ms). No network: the real runs are in
tests/test_compute_e2e.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from experiment.agents import PhasePlan, worker_argv
from experiment.config import PreflightError, RunConfig
from experiment.model import (
    SHAPER_BURST_BYTES,
    compute_table,
    link_ms,
    predict,
    predict_iterations,
    time_scale,
)
from experiment.options import OptionParser, add_run_arguments, check, config_of
from hosts.compute import (
    ComputeError,
    ComputePlan,
    ComputeSpec,
    Distribution,
    Stragglers,
    parse_duration_ms,
    plan_of,
)
from hosts.worker import build_parser
from tests.test_model import FixedKeys
from topologies.generate import star
from topologies.topology import parse_topology

# --- COMPUTE= and STRAGGLERS= ----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ms"), [("20ms", 20.0), ("500us", 0.5), ("0.1s", 100.0), ("1.5e1ms", 15.0)]
)
def test_durations_take_a_unit(text: str, ms: float) -> None:
    assert parse_duration_ms(text) == pytest.approx(ms)


@pytest.mark.parametrize("text", ["20", "ms", "-5ms", "20 min", "nan ms"])
def test_a_duration_without_a_unit_or_a_number_is_refused(text: str) -> None:
    with pytest.raises(ComputeError, match="unit"):
        parse_duration_ms(text)


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("20ms", ComputeSpec(Distribution.FIXED, 20.0)),
        ("normal:20ms,5ms", ComputeSpec(Distribution.NORMAL, 20.0, 5.0)),
        ("lognormal:20ms,0.5", ComputeSpec(Distribution.LOGNORMAL, 20.0, 0.5)),
        ("real:2us", ComputeSpec(Distribution.FIXED, 0.002, real=True)),
        ("real:normal:2us,500us", ComputeSpec(Distribution.NORMAL, 0.002, 0.5, True)),
    ],
)
def test_compute_specs_parse_and_print_in_their_normal_form(text: str, spec: ComputeSpec) -> None:
    parsed = ComputeSpec.parse(text)
    assert parsed == spec
    assert ComputeSpec.parse(str(parsed)) == spec  # the normal form reads back the same


@pytest.mark.parametrize("text", ["", "0", "none", "  "])
def test_no_compute(text: str) -> None:
    assert ComputeSpec.parse(text) is None


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("gamma:2ms,1ms", "use a duration"),
        ("normal:20ms", "two values"),
        ("lognormal:20ms,wide", "sigma of the logarithm"),
        ("lognormal:20ms,-1", "not negative"),
        ("0ms", "positive"),
    ],
)
def test_bad_compute_says_how_to_write_it(text: str, why: str) -> None:
    with pytest.raises(ComputeError, match=why):
        ComputeSpec.parse(text)


@pytest.mark.parametrize(
    ("text", "slow"),
    [
        ("1:3", Stragglers(1, 3.0)),
        ("p=0.1:3", Stragglers(probability=0.1, iteration_factor=3.0)),
        ("2:1.5,p=0.05:4", Stragglers(2, 1.5, 0.05, 4.0)),
    ],
)
def test_stragglers_parse_and_print(text: str, slow: Stragglers) -> None:
    assert Stragglers.parse(text) == slow
    assert str(slow) == text


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("3", "write N:F"),
        ("1:0.5", "slower"),
        ("p=1.5:3", "in \\(0, 1\\)"),
        ("0:3", ">= 1"),
        ("1:3,2:2", "at most once"),
        ("1:fast", "write N:F"),
    ],
)
def test_bad_stragglers_say_how_to_write_them(text: str, why: str) -> None:
    with pytest.raises(ComputeError, match=why):
        Stragglers.parse(text)


# --- seeded draws -------------------------------------------------------------------------


def test_draws_are_reproducible_and_independent_of_the_order_asked() -> None:
    plan = ComputePlan(ComputeSpec.parse("lognormal:20ms,0.5"), seed=7)  # type: ignore[arg-type]
    table = plan.table(4, 30)
    assert np.array_equal(table, plan.table(4, 30))
    assert plan.ms(3, 30) == table[3, 29] and plan.ms(0, 1) == table[0, 0]
    other = ComputePlan(plan.spec, seed=8).table(4, 30)
    assert not np.array_equal(table, other)
    assert len(np.unique(table)) == table.size  # a fresh draw per worker and iteration


def test_distributions_have_the_moments_they_are_given() -> None:
    normal = ComputePlan(ComputeSpec(Distribution.NORMAL, 20.0, 5.0)).table(40, 100)
    assert normal.mean() == pytest.approx(20.0, abs=0.3)
    assert normal.std() == pytest.approx(5.0, abs=0.3)
    lognormal = ComputePlan(ComputeSpec(Distribution.LOGNORMAL, 20.0, 0.5)).table(40, 100)
    assert np.median(lognormal) == pytest.approx(20.0, rel=0.05)
    assert np.std(np.log(lognormal)) == pytest.approx(0.5, abs=0.02)
    wide = ComputePlan(ComputeSpec(Distribution.NORMAL, 1.0, 5.0)).table(10, 50)
    assert wide.min() == 0.0  # a negative draw is no compute, not a negative sleep


def test_stragglers_slow_exactly_whom_they_name() -> None:
    spec = ComputeSpec.parse("normal:20ms,5ms")
    assert spec is not None
    plain = ComputePlan(spec, seed=3).table(4, 50)
    slow = ComputePlan(spec, Stragglers.parse("1:3"), seed=3).table(4, 50)
    assert np.allclose(slow[0], 3 * plain[0]) and np.array_equal(slow[1:], plain[1:])
    sometimes = ComputePlan(spec, Stragglers.parse("p=0.2:4"), seed=3).table(40, 50)
    ratio = sometimes / ComputePlan(spec, seed=3).table(40, 50)
    slowed = np.isclose(ratio, 4.0)
    assert np.all(slowed | np.isclose(ratio, 1.0))
    assert slowed.mean() == pytest.approx(0.2, abs=0.03)


def test_real_time_compute_is_scaled_by_the_time_scale() -> None:
    spec = ComputeSpec.parse("real:normal:10us,2us")
    assert spec is not None
    assert spec.scaled(5000.0) == ComputeSpec(Distribution.NORMAL, 50.0, 10.0)
    with pytest.raises(ComputeError, match="REAL_BW"):
        spec.scaled(None)
    with pytest.raises(ComputeError, match="emulated time"):
        ComputePlan(spec)
    topology = parse_topology(star(4, 1), "star:4").with_bandwidth(2.0)
    assert time_scale(10_000.0, topology) == 5000.0
    assert time_scale(None, topology) is None


def test_the_workers_draw_what_the_model_draws(tmp_path: Path) -> None:
    """The experiment's worker command line, parsed as a worker parses it, gives the plan
    whose table the model uses: the model sees the times the workers sleep."""
    cfg = RunConfig(
        workers=3,
        iterations=5,
        seed=11,
        compute="real:lognormal:4us,0.3",
        stragglers="1:2,p=0.3:5",
        time_scale=5000.0,
    )
    plan = PhasePlan("server", tmp_path, 5, False, 0, True, False, 0, None, None, 60, compute=True)
    tables = []
    for w in range(cfg.workers):
        args = build_parser().parse_args(worker_argv(cfg, plan, w, "10.0.0.1", ["10.0.0.9"])[3:])
        worker_plan = plan_of(args.compute, args.stragglers, args.seed)
        assert worker_plan is not None
        tables.append([worker_plan.ms(w, t) for t in range(1, cfg.iterations + 1)])
    assert np.array_equal(np.array(tables), compute_table(cfg))
    warmup = PhasePlan("warmup", tmp_path, 5, False, 0, False, False, 0, None, None, 60)
    assert "--compute" not in worker_argv(cfg, warmup, 0, "10.0.0.1", ["10.0.0.9"])


# --- make run's options -------------------------------------------------------------------


def run_config(*argv: str) -> RunConfig:
    parser = OptionParser(prog="python -m experiment run")
    add_run_arguments(parser)
    return config_of(parser.parse_args(list(argv)))


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--compute", "20"], "COMPUTE (--compute)"),
        (["--stragglers", "1:0.5"], "STRAGGLERS (--stragglers)"),
        (["--real-bw", "fast"], "REAL_BW (--real-bw)"),
    ],
)
def test_malformed_values_name_the_make_variable(argv, named, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run_config(*argv)
    assert exit_info.value.code == 2
    assert named in capsys.readouterr().err


def test_real_bw_takes_units() -> None:
    assert run_config("--real-bw", "10G").real_bw == 10_000.0
    assert run_config("--real-bw", "100M").real_bw == 100.0
    assert run_config("--real-bw", "40").real_bw == 40.0


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        (["--stragglers", "1:3"], "STRAGGLERS=1:3 slows the workers' compute: give COMPUTE="),
        (["--compute", "real:2us"], "COMPUTE=real:2us is in real time: give REAL_BW="),
        (["--compute", "5ms", "--stragglers", "5:2"], "5 slow workers, but the run has 4"),
        (["--compute", "5ms", "--real-bw", "1", "--bw", "2"], "REAL_BW=1 Mbit/s is below"),
        (["--compute", "5ms", "--jobs", "2"], "COMPUTE=5ms: the model of several jobs"),
    ],
)
def test_options_that_do_not_go_together_are_refused(argv, why) -> None:
    with pytest.raises(PreflightError) as err:
        check(run_config(*argv))
    assert why in str(err.value)


def test_consistent_options_pass() -> None:
    cfg = run_config("--compute", "real:normal:2us,1us", "--stragglers", "1:3", "--real-bw", "10G")
    check(cfg)
    assert cfg.compute == "real:normal:2us,1us" and cfg.stragglers == "1:3"


# --- the model with compute ---------------------------------------------------------------

KEYS = list(range(200))  # 25 full packets per exchange: well beyond the shaper's burst
MBPS = 1.0


def prediction():
    return predict(FixedKeys(KEYS), workers=4, iterations=10, mbps=MBPS, hot=set(range(40)))


def burst_ms() -> float:
    return link_ms(SHAPER_BURST_BYTES, MBPS)


def iteration(compute: np.ndarray) -> dict:
    return predict_iterations(prediction(), compute).as_dict()


def test_without_compute_the_iteration_is_the_bound() -> None:
    p = prediction()
    model = iteration(np.zeros((4, 10)))
    for mode, load in (("server", p.server), ("offload", p.offload)):
        # one burst at the start of the run, spread over its iterations, at the most
        low = load.bound_ms - burst_ms() / 10 - 1e-9
        assert low <= model[mode]["mean_ms"] <= load.bound_ms + 1e-9


def test_equal_compute_adds_itself_less_what_the_pulls_overlap() -> None:
    base = iteration(np.zeros((4, 10)))
    model = iteration(np.full((4, 10), 80.0))
    for mode in ("server", "offload"):
        added = model[mode]["mean_ms"] - base[mode]["mean_ms"]
        # a worker whose pulls end first computes while the others' still run; idle links
        # regain their burst
        assert 80.0 - 0.5 * base[mode]["mean_ms"] <= added <= 80.0
    assert model["speedup"] < base["speedup"]  # the same saving on a longer iteration


def test_the_critical_path_runs_through_the_slowest_worker() -> None:
    """Worker 0 computing 3 times longer: the others' pushes overlap its compute, and its
    own push goes last, alone: the iteration is its pull, its compute, and about its own
    push's time on its own link, not the whole push phase again."""
    p = prediction()
    equal = iteration(np.full((4, 10), 100.0))
    slow = np.full((4, 10), 100.0)
    slow[0] = 300.0
    model = iteration(slow)
    for mode in ("server", "offload"):
        added = model[mode]["mean_ms"] - equal[mode]["mean_ms"]
        assert added < 200.0  # the others' pushes moved under worker 0's compute
        own_push = link_ms(p.phased[mode].push[0][0]["h1-s1"], MBPS)
        assert model[mode]["mean_ms"] >= 300.0 + own_push - burst_ms()
    # offload's saving is on the PS link; worker 0's lone push crosses its own link in full
    assert model["speedup"] < equal["speedup"]
    assert model["slowest_compute_ms"] == 300.0


# --- the fidelity verdict with compute ----------------------------------------------------


def verdict(bottleneck: str, ps_mean: float, cores: float) -> dict:
    """A phase verdict as experiment/fidelity.py writes it, cut to what with_compute reads."""
    link = {"link": "h5-s1", "to_ps": True, "utilization_mean": ps_mean}
    return {
        "bottleneck": bottleneck,
        "faithful": False,
        "why": "",
        "links": [link],
        "machine_cpu_busy_p90": cores,
    }


@pytest.mark.parametrize(
    ("bottleneck", "ps_mean", "duty", "cores", "judged"),
    [
        ("none", 0.40, 0.45, 0.5, "ps_link"),  # 89% of the model's busy share: the link
        ("ps_link", 0.52, 0.55, 0.5, "ps_link"),
        ("none", 0.20, 0.45, 0.5, "none"),  # 44%: the run waited on something else
        ("ps_link", 0.24, 0.60, 0.5, "none"),  # rule 4's 50% of the windows, 40% of the duty
        ("ps_link", 0.37, 0.45, 0.5, "none"),  # 82%: 22% slower than the model's pace
        ("cpu", 0.30, 0.45, 0.95, "cpu"),  # 67%: the machine's verdict stands
        ("cpu", 0.40, 0.45, 0.95, "ps_link"),  # 89%: rule 1 comes before the machine's
        ("link:s1-s2", 0.40, 0.45, 0.5, "link:s1-s2"),  # another saturated link stands
        ("ps_link", 0.30, 0.50, 0.95, "cpu"),  # rule 1 held only for the windows: cores first
    ],
)
def test_the_verdict_reads_the_ps_link_against_its_share_between_computes(
    bottleneck: str, ps_mean: float, duty: float, cores: float, judged: str
) -> None:
    from experiment.fidelity import summarize, with_compute

    phase = verdict(bottleneck, ps_mean, cores)
    assert with_compute(phase, duty)["bottleneck"] == judged
    assert with_compute(phase, 1.0)["bottleneck"] == bottleneck  # no compute: as measured
    fid = summarize({"server": phase}, duty={"server": duty})
    assert fid["faithful"] == (judged == "ps_link")
