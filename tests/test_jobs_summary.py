"""A run of several jobs on one switch: the jobs' Summaries turned into the run's block,
table, report lines, figure and sweep row (experiment/jobs_summary.py). Pure: the Summaries
are built as experiment/summary.py shapes them, their link rows and fidelity verdicts by its
own functions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from experiment import fidelity
from experiment.jobs_summary import (
    EQUAL,
    JOBS_FIGURE,
    SAVINGS,
    WORSE_TOLERANCE,
    JobOutcome,
    JobsSummaryError,
    build_jobs_summary,
    jain_index,
    jobs_markdown,
    jobs_plot,
    jobs_row,
    jobs_table,
)
from experiment.schema import SCHEMA_VERSION, Summary
from experiment.summary import link_bytes, p50_ratio, quantiles
from hosts.stats import dumps_strict

SWITCH = "s1"
ITERATIONS = 10


def mode(
    p50_ms: float | None, links: dict[str, float] | None, model: dict[str, float] | None
) -> dict[str, Any]:
    """A measured phase as summary.mode_summary writes it: `links`, directed link -> bytes
    over the phase (the verdict's rows), `model`: bytes per iteration."""
    verdict = (
        None
        if links is None
        else {"links": [{"directions": {name: {"bytes": n} for name, n in links.items()}}]}
    )
    times = [] if p50_ms is None else [p50_ms] * ITERATIONS
    return {
        "seconds": 1.0,
        "updates_total": 0,
        "updates_in_switch": 0,
        "ps_packets_in": 0,
        "ps_control_exchanges": 0,
        "retransmissions": 0,
        "pulls_answered_by_switch": 0,
        "ps_packets_per_iteration": [],
        "latency_dissection": {},
        "switch_stats": {},
        "iteration_ms": quantiles(times),
        "push_ms": quantiles([]),
        "pull_ms": quantiles([]),
        "link_bytes_per_iteration": link_bytes(verdict, ITERATIONS, model),
    }


def job_summary(
    ps: str,
    server_ms: float | None = 20.0,
    offload_ms: float | None = 10.0,
    server_bytes: tuple[float, float] | None = (50_000, 30_000),
    offload_bytes: tuple[float, float] | None = (20_000, 10_000),
    model_speedup: float | None = 2.0,
    model_bytes: tuple[tuple[float, float], tuple[float, float]] | None = (
        (5_000, 3_000),
        (2_000, 1_000),
    ),
    hot_keys: int = 8,
    coverage: float = 0.5,
    exact: bool = True,
    bottleneck: str = "ps_link",
) -> Summary:
    """One job's Summary of one split: its PS link's bytes over the phase (toward the PS,
    from it), server-only then offload; the model's per iteration. Another job's PS link
    (h99) carries bytes too, which must not count for this one."""
    to_ps, from_ps = f"{SWITCH}-{ps}", f"{ps}-{SWITCH}"
    other = {f"{SWITCH}-h99": 1e9, f"h99-{SWITCH}": 1e9}

    def measured(pair: tuple[float, float] | None) -> dict[str, float] | None:
        return None if pair is None else {to_ps: pair[0], from_ps: pair[1], **other}

    def modelled(i: int) -> dict[str, float] | None:
        return None if model_bytes is None else dict(zip((to_ps, from_ps), model_bytes[i]))

    modes = {
        "server": mode(server_ms, measured(server_bytes), modelled(0)),
        "offload": mode(offload_ms, measured(offload_bytes), modelled(1)),
    }
    model = None
    if model_speedup is not None:
        model = {"bound_speedup": model_speedup, "server": {"bottleneck": to_ps}}
    verdicts = {m: {"bottleneck": bottleneck, "why": "test"} for m in modes}
    summary = {
        "schema_version": SCHEMA_VERSION,
        "target": "embedded",
        "topology": "star.json",
        "workers": 2,
        "iterations": ITERATIONS,
        "seed": 1,
        "workload": "zipf",
        "loss": 0.0,
        "hot_slots": 16,
        "link_bandwidth_mbps": [2.0],
        "exact": exact,
        "params_sha256": {"server": "a" * 64, "offload": ("a" if exact else "b") * 64},
        "warmup_hot_set": {
            "keys": hot_keys,
            "coverage": coverage,
            "covered": 0,
            "total": 0,
            "candidates": 0,
        },
        "config": {"target": "embedded", "topo": "topologies/star.json", "iterations": 10},
        "modes": modes,
        "speedup": {
            "iteration_ms": p50_ratio(
                modes["server"]["iteration_ms"], modes["offload"]["iteration_ms"]
            )
        },
        "ps_packet_reduction": None,
        "offloaded_update_share": None,
        "model": model,
        "offload_hot_set": None,
        "fidelity": fidelity.summarize(verdicts),
    }
    return summary  # type: ignore[return-value]


def outcome(
    job: int, ps: str, slots: dict[str, int], summaries: dict[str, Summary], skew: float = 1.1
) -> JobOutcome:
    config = {"skew": skew, "seed": job, "workers": 2, "keys": 1000, "workload": "zipf"}
    return JobOutcome(job, ps, SWITCH, config, slots, summaries)


RUN = {"target": "embedded", "topo": "topologies/star.json", "iterations": 10, "hot_slots": 16}


def two_jobs(
    savings: tuple[dict[str, Any], dict[str, Any]] = ({}, {}),
    equal: tuple[dict[str, Any], dict[str, Any]] = ({}, {}),
    slots: tuple[dict[str, int], dict[str, int]] = (
        {SAVINGS: 12, EQUAL: 8},
        {SAVINGS: 4, EQUAL: 8},
    ),
) -> list[JobOutcome]:
    """Two jobs (PS h9 and h10), each measured under both splits, with the given changes to
    job_summary's defaults."""
    return [
        outcome(
            i + 1,
            ps,
            slots[i],
            {SAVINGS: job_summary(ps, **savings[i]), EQUAL: job_summary(ps, **equal[i])},
            skew=(1.1, 1.3)[i],
        )
        for i, ps in enumerate(("h9", "h10"))
    ]


# -- Jain's index ------------------------------------------------------------------------


@pytest.mark.parametrize("values", [[1.0, 1.0], [2.5, 2.5, 2.5], [0.3]])
def test_jain_of_equal_values_is_one(values: list[float]) -> None:
    assert jain_index(values) == 1.0


def test_jain_of_one_holding_everything_is_one_over_n() -> None:
    assert jain_index([1.0, 0.0]) == 0.5
    assert jain_index([0.0, 3.0, 0.0, 0.0]) == 0.25
    assert 0.5 < jain_index([1.0, 2.0]) < 1.0  # type: ignore[operator]


def test_jain_of_nothing_is_undefined_and_of_negatives_an_error() -> None:
    assert jain_index([]) is None
    assert jain_index([0.0, 0.0]) is None
    with pytest.raises(ValueError, match="finite values >= 0"):
        jain_index([1.0, -1.0])
    with pytest.raises(ValueError):
        jain_index([1.0, float("nan")])


# -- per job and totals --------------------------------------------------------------------


def test_a_jobs_ps_link_savings_are_both_its_directions_only() -> None:
    js = build_jobs_summary(RUN, two_jobs())
    job = js["jobs"][0]
    assert job["ps_links"] == ["s1-h9", "h9-s1"]
    b = job["splits"][SAVINGS]["ps_link_bytes"]
    # the verdict's bytes over the phase, per iteration; h99's link left out
    assert b["server"] == {"measured": 8_000.0, "model": 8_000.0}
    assert b["offload"] == {"measured": 3_000.0, "model": 3_000.0}
    assert b["saved"] == {"measured": 5_000.0, "model": 5_000.0}


def test_totals_sum_the_jobs_and_jain_reads_their_speedups() -> None:
    js = build_jobs_summary(
        RUN,
        two_jobs(savings=({"offload_ms": 10.0, "model_speedup": 2.2}, {"offload_ms": 20.0})),
    )
    t = js["totals"][SAVINGS]
    assert js["jobs"][0]["splits"][SAVINGS]["speedup"] == 2.0
    assert js["jobs"][1]["splits"][SAVINGS]["speedup"] == 1.0
    assert t["speedup_sum"] == 3.0
    assert t["model_speedup_sum"] == 4.2
    assert t["jain"] == round(9 / (2 * 5), 4)
    assert t["ps_link_saved"] == 10_000.0
    assert js["totals"][EQUAL]["jain"] == 1.0
    assert js["splits"] == [SAVINGS, EQUAL]
    assert js["kind"] == "jobs" and js["schema_version"] == SCHEMA_VERSION


def test_the_block_keeps_every_summary_and_is_strict_json() -> None:
    outcomes = two_jobs()
    js = build_jobs_summary(RUN, outcomes)
    assert [j["summaries"] for j in js["job_summaries"]] == [o.summaries for o in outcomes]
    assert json.loads(dumps_strict(js))["jobs"][1]["ps_host"] == "h10"


# -- the checks ----------------------------------------------------------------------------


def test_check_one_follows_the_measured_totals_and_reports_the_models() -> None:
    more = {"offload_bytes": (10_000, 5_000)}  # the savings split takes more off
    less = {"offload_bytes": (40_000, 25_000)}
    beats = build_jobs_summary(RUN, two_jobs(savings=(more, more)))
    check = beats["checks"]["beats_baseline"][0]
    assert (check["split"], check["baseline"]) == (SAVINGS, EQUAL)
    assert check["passed"] is True and check["measured"] == 13_000.0
    assert check["baseline_measured"] == 10_000.0
    assert check["model_passed"] is False  # the model's bytes were the same in both
    loses = build_jobs_summary(RUN, two_jobs(savings=(less, less)))
    assert loses["checks"]["beats_baseline"][0]["passed"] is False
    model_more = {"model_bytes": ((5_000, 3_000), (1_000, 500))}
    model_says = build_jobs_summary(RUN, two_jobs(savings=(model_more, model_more)))
    assert model_says["checks"]["beats_baseline"][0]["model_passed"] is True


def test_check_one_is_undecided_where_both_splits_gave_the_same_slots() -> None:
    same = ({SAVINGS: 8, EQUAL: 8}, {SAVINGS: 8, EQUAL: 8})
    more = {"offload_bytes": (10_000, 5_000)}
    check = build_jobs_summary(RUN, two_jobs(savings=(more, more), slots=same))["checks"][
        "beats_baseline"
    ][0]
    assert check["same_slots"] and check["passed"] is None and "slots" in check["why"]
    # 16 slots held both jobs' 8 keys: the report says the slots were not scarce
    assert "fitted in 16 of the 16 slots" not in check["why"]
    roomy = build_jobs_summary({**RUN, "hot_slots": 64}, two_jobs(savings=(more, more), slots=same))
    [loose] = roomy["checks"]["beats_baseline"]
    assert "every job's keys fitted in 16 of the 64 slots" in loose["why"]


def test_check_two_allows_the_loss_the_model_predicts_and_no_more() -> None:
    # job 2 is 10% slower under the savings split, and the model says it loses 10% there
    predicted = build_jobs_summary(
        RUN, two_jobs(savings=({}, {"offload_ms": 11.0, "model_speedup": 1.8}))
    )
    check = predicted["checks"]["no_job_worse"][0]
    job2 = check["jobs"][1]
    assert job2["measured"] == 0.909 and job2["model"] == 0.9
    assert job2["floor"] == round(0.9 * (1 - WORSE_TOLERANCE), 3)
    assert check["passed"] is True
    # 30% slower where the model says it keeps its speed: beyond the tolerance
    unpredicted = build_jobs_summary(RUN, two_jobs(savings=({}, {"offload_ms": 14.0})))
    check = unpredicted["checks"]["no_job_worse"][0]
    assert check["jobs"][1]["passed"] is False and check["passed"] is False
    assert check["jobs"][0]["passed"] is True


def test_check_two_asks_no_gain_the_model_predicts_only_no_loss() -> None:
    # the model says job 1 gains 50%; measured, it neither gains nor loses: not worse
    js = build_jobs_summary(RUN, two_jobs(savings=({"model_speedup": 3.0}, {})))
    ratio = js["checks"]["no_job_worse"][0]["jobs"][0]
    assert ratio["model"] == 1.5 and ratio["measured"] == 1.0 and ratio["passed"] is True


def test_check_three_and_fidelity_name_the_job_that_failed() -> None:
    js = build_jobs_summary(RUN, two_jobs(equal=({}, {"exact": False, "bottleneck": "cpu"})))
    assert js["exact"] is False and js["checks"]["exact"] is False
    assert js["checks"]["fidelity"][SAVINGS]["faithful"] is True
    equal = js["checks"]["fidelity"][EQUAL]
    assert equal["faithful"] is False and js["faithful"] is False
    assert [(j["job_id"], j["faithful"], j["bottleneck"]) for j in equal["jobs"]] == [
        (1, True, "ps_link"),
        (2, False, "cpu"),
    ]
    assert "job 2 cpu (not faithful)" in jobs_table(js)
    assert build_jobs_summary(RUN, two_jobs())["exact"] is True


# -- missing measurements ------------------------------------------------------------------

NOTHING = {
    "server_ms": None,
    "offload_ms": None,
    "server_bytes": None,
    "offload_bytes": None,
    "model_speedup": None,
    "model_bytes": None,
}


def test_missing_measurements_leave_totals_and_checks_undecided(tmp_path: Path) -> None:
    js = build_jobs_summary(RUN, two_jobs(savings=({}, NOTHING)))
    job2 = js["jobs"][1]["splits"][SAVINGS]
    assert job2["speedup"] is None and job2["ps_link_bytes"]["saved"]["measured"] is None
    t = js["totals"][SAVINGS]
    assert t["speedup_sum"] is None and t["jain"] is None and t["ps_link_saved"] is None
    assert js["totals"][EQUAL]["speedup_sum"] == 4.0  # the other split is whole
    assert js["checks"]["beats_baseline"][0]["passed"] is None
    assert js["checks"]["no_job_worse"][0]["passed"] is None
    assert "undecided" in jobs_table(js)
    assert any("undecided" in line for line in jobs_markdown(js))
    jobs_plot(tmp_path / JOBS_FIGURE, js)
    assert (tmp_path / JOBS_FIGURE).stat().st_size > 0
    assert jobs_row(js)["savings.speedup_sum"] is None


def test_a_run_without_any_model_still_reports() -> None:
    unmodelled: dict[str, Any] = {"model_speedup": None, "model_bytes": None}
    saves_more = {**unmodelled, "offload_bytes": (10_000, 5_000)}
    js = build_jobs_summary(RUN, two_jobs((saves_more, saves_more), (unmodelled, unmodelled)))
    assert js["totals"][SAVINGS]["model_speedup_sum"] is None
    assert js["checks"]["beats_baseline"][0]["passed"] is True  # measured still decides
    assert js["checks"]["beats_baseline"][0]["model_passed"] is None
    assert js["checks"]["no_job_worse"][0]["passed"] is None  # nothing to hold it against


# -- bad input -----------------------------------------------------------------------------


def test_outcomes_that_are_not_one_run_are_refused() -> None:
    with pytest.raises(JobsSummaryError, match="no job"):
        build_jobs_summary(RUN, [])
    a, b = two_jobs()
    with pytest.raises(JobsSummaryError, match="repeat"):
        build_jobs_summary(RUN, [a, a])
    partial = JobOutcome(2, "h10", SWITCH, b.config, {SAVINGS: 4}, {SAVINGS: b.summaries[SAVINGS]})
    with pytest.raises(JobsSummaryError, match="job 2: splits"):
        build_jobs_summary(RUN, [a, partial])
    elsewhere = JobOutcome(2, "h10", "s2", b.config, b.slots, b.summaries)
    with pytest.raises(JobsSummaryError, match="no one switch: s1, s2"):
        build_jobs_summary(RUN, [a, elsewhere])


# -- the outputs ---------------------------------------------------------------------------


def test_the_table_has_a_row_per_job_and_split_then_totals_and_checks() -> None:
    js = build_jobs_summary(RUN, two_jobs())
    lines = jobs_table(js).splitlines()
    rows = [line.split() for line in lines[2:6]]
    assert [(r[0], r[1]) for r in rows] == [
        ("1", SAVINGS),
        ("2", SAVINGS),
        ("1", EQUAL),
        ("2", EQUAL),
    ]
    assert rows[0][2:4] == ["12", "8"]  # slots, hot keys
    assert any(line.startswith("  savings split: sum of speed-ups 4.00x") for line in lines)
    assert any("every job exact under every split: yes" in line for line in lines)


def test_the_markdown_table_is_well_formed() -> None:
    lines = jobs_markdown(build_jobs_summary(RUN, two_jobs()))
    table = [line for line in lines if line.startswith("|")]
    columns = {line.count("|") for line in table}
    assert len(columns) == 1 and len(table) == 2 + 4
    assert f"![{JOBS_FIGURE}]({JOBS_FIGURE})" in lines
    assert "- job 2: h10, 2 workers, zipf skew 1.3, seed 2" in lines


def test_the_figure_is_a_png(tmp_path: Path) -> None:
    loses = {"offload_bytes": (60_000, 40_000)}  # a job whose PS link carried more
    js = build_jobs_summary(RUN, two_jobs(savings=({}, loses)))
    path = tmp_path / JOBS_FIGURE
    jobs_plot(path, js)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_sweep_row_is_flat_and_carries_the_totals_and_checks() -> None:
    js = build_jobs_summary(RUN, two_jobs())
    row = jobs_row(js)
    assert all(not isinstance(v, (dict, list)) for v in row.values())
    assert row["jobs"] == 2 and row["exact"] is True
    assert row["savings.ps_link_saved"] == js["totals"][SAVINGS]["ps_link_saved"]
    assert row["savings.beats_equal"] is False  # the same bytes saved in both: not beaten
    assert row["job2.savings.slots"] == 4 and row["job1.equal.slots"] == 8
    assert row["job1.savings.ratio_to_equal"] == 1.0
