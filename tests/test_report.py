"""experiment/report.py: the configuration line, what the table says to try when a run was
not PS-link-bound, and report.md with its figures (experiment/plots.py) from a run's logs."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from contract.freqfile import write_frequency
from experiment.config import RunConfig
from experiment.configline import config_line, short_config
from experiment.report import (
    bound_comparison,
    bound_line,
    comparison_table,
    links_line,
    regime_hint,
    verdict_lines,
    write_outputs,
)
from experiment.results import PhaseResult
from experiment.schema import SCHEMA_VERSION, SummaryError, dumps_summary, load_summary
from experiment.summary import build_summary
from hosts.ps_log import LOG_COLUMNS as PS_COLUMNS
from hosts.stats import CsvLog
from hosts.worker import LOG_COLUMNS as WORKER_COLUMNS


def summary(bottlenecks: dict[str, str], **config: object) -> dict:
    return {"fidelity": {"bottlenecks": bottlenecks}, "config": config}


def test_a_cpu_bound_run_at_a_fixed_rate_is_pointed_to_the_calibration() -> None:
    hint = regime_hint(
        summary({"server": "ps_link", "offload": "cpu"}, bw=None, link_bandwidth_mbps=[10.0])
    )
    assert hint is not None and hint.startswith("BW=auto (make run's default)")
    assert "a lower BW= than 10" in hint


def test_bmv2s_standard_build_is_named_when_the_switch_set_the_pace() -> None:
    hint = regime_hint(
        summary(
            {"server": "switch", "offload": "switch"},
            bw=None,
            link_bandwidth_mbps=[10.0],
            target="bmv2",
            bmv2_binary="simple_switch_grpc",
        )
    )
    assert hint is not None and hint.startswith("BMV2_BINARY=simple_switch_grpc-perf")
    # the performance build is not sent to itself: the rate is what is left to change
    perf = regime_hint(
        summary(
            {"offload": "switch"},
            bw=None,
            link_bandwidth_mbps=[10.0],
            target="bmv2",
            bmv2_binary="simple_switch_grpc-perf",
        )
    )
    assert perf is not None and "BMV2_BINARY" not in perf and "BW=auto" in perf


def test_a_calibrated_run_that_missed_says_the_machine_was_busier() -> None:
    hint = regime_hint(
        summary(
            {"server": "cpu"}, bw="auto", link_bandwidth_mbps=[5.0], bw_auto={"chosen_mbps": 5.0}
        )
    )
    assert hint is not None and "network-bound at 5 Mbit/s" in hint and "than 5" in hint
    # no rate was network-bound: the lowest was used, and only a quieter machine helps
    lowest = regime_hint(
        summary(
            {"server": "cpu"}, bw="auto", link_bandwidth_mbps=[1.0], bw_auto={"chosen_mbps": 1.0}
        )
    )
    assert lowest is not None and "quieter machine" in lowest


# -- the configuration line, report.md and the figures ------------------------------------


def run_config(**changes: object) -> dict:
    """config.json of a run as experiment/__main__.py writes it: WORKERS resolved against
    the topology (options.check), here the default star's 4."""
    config = RunConfig(**{"workers": 4, **changes}).as_dict()  # type: ignore[arg-type]
    config.update(link_bandwidth_mbps=[10.0], topology_shape="star")
    return config


@pytest.mark.parametrize(
    ("links", "expected"),
    [
        (
            {"bw": "auto", "link_bandwidth_mbps": [5.0],
             "bw_auto": {"chosen_mbps": 5.0, "trials": [{"mbps": 5.0, "saturated": True}]}},
            "links 5 Mbit/s (BW=auto: calibrated, highest rate at which a link saturated "
            "in both modes)",
        ),
        (
            {"bw": "auto", "link_bandwidth_mbps": [1.0],
             "bw_auto": {"chosen_mbps": 1.0, "trials": [{"mbps": 1.0, "saturated": False}]}},
            "links 1 Mbit/s (BW=auto: calibrated, no rate tried saturated the PS link, so the "
            "lowest)",
        ),
        ({"bw": 2.0, "link_bandwidth_mbps": [2.0]}, "links 2 Mbit/s (BW=2: set)"),
        ({"bw": None, "link_bandwidth_mbps": [10.0]}, "links 10 Mbit/s (the topology's own)"),
        (
            {"bw": None, "link_bandwidth_mbps": [10.0, None]},
            "links 10 Mbit/s and unlimited (the topology's own)",
        ),
    ],
)  # fmt: skip
def test_the_config_line_says_the_link_rate_and_how_it_was_chosen(
    links: dict, expected: str
) -> None:
    config = {**run_config(seed=7), **links}
    line = config_line({"config": config})
    assert line.startswith("config: embedded target, topology star.json (star), 4 workers, ")
    assert ", zipf workload (skew 1.1, 100000 keys), " in line
    assert f", {expected}, seed 7" in line
    assert "\n" not in line
    # the short form, for figure titles, still names the rate and how it was chosen
    bw = links["bw"]
    how = "BW=auto" if bw == "auto" else "topology's" if bw is None else f"BW={bw:g}"
    assert f" ({how})" in short_config({"config": config})


def test_the_config_line_names_what_is_not_at_its_default() -> None:
    default = config_line({"config": run_config()})
    for absent in ("hot set", "drift", "loss", "slots", "bmv2"):
        assert absent not in default
    changed = config_line(
        {
            "config": {
                **run_config(
                    target="bmv2", hotset="dynamic", drift="every=5,fraction=0.2,head=256",
                    loss=0.01, hot_slots=128, workload="trace",
                    extra_workload_args=["--trace", "/data/clicks.csv"],
                ),
                "bmv2_binary": "simple_switch_grpc-perf",
            }
        }
    )  # fmt: skip
    assert changed.startswith("config: bmv2 target (simple_switch_grpc-perf), ")
    assert "trace workload (clicks.csv, 100000 keys)" in changed
    assert "dynamic hot set (every 1 iteration, from the PS's counters)" in changed
    for item in ("drift every=5,fraction=0.2,head=256", "loss 0.01", "128 hot slots"):
        assert item in changed


def model_bound(
    server_ms: float,
    offload_ms: float,
    bottleneck: tuple[str, str] = ("s1-h3", "s1-h3"),
    bound_ms: tuple[float, float] | None = None,
) -> dict:
    """A `model` block (experiment/schema.py ModelBound) of star:2 (PS h3) at 2 Mbit/s: the
    PS link's load in each mode, with bottlenecks and bounds as given (the PS link's own)."""
    bounds = bound_ms or (server_ms, offload_ms)
    to_ps = {"server": 1400.0, "offload": 980.0}

    def mode(name: str, i: int) -> dict:
        links = {"h1-s1": 300.0, "s1-h3": to_ps[name], "h3-s1": 700.0}
        return {"to_ps": to_ps[name], "from_ps": 700.0, "links": links,
                "bottleneck": bottleneck[i], "bound_ms": bounds[i]}  # fmt: skip

    return {
        "aggregate": "ps-leaf",
        "server": mode("server", 0),
        "offload": mode("offload", 1),
        "mbps": 2.0,
        "hot_keys": 4,
        "hot_coverage": 0.4,
        "server_ms": server_ms,
        "offload_ms": offload_ms,
        "speedup": round(server_ms / offload_ms, 3),
        "bound_speedup": round(bounds[0] / bounds[1], 3),
    }


def worker_row(kind: str, t: int, seq: int, latency_us: float, from_switch: int) -> tuple:
    """A worker log row (hosts/worker.py LOG_COLUMNS) of 8 entries, sent at 1.0 s."""
    row = {"kind": kind, "iteration": t, "seq": seq, "shard": 0, "entries": 8, "hot": 0}
    row |= {"sent": 1.0, "reply": 1.1, "latency_us": latency_us, "retransmits": 0}
    row |= {"from_switch": from_switch, "mask": 0}
    return tuple(row.get(column, "") for column in WORKER_COLUMNS)


def write_phase(
    directory: Path, iteration_ms: float, by_switch: bool, keys: int = 0
) -> PhaseResult:
    """A phase's logs as its agents write them: two workers, two iterations, a push and a
    pull each; the PS's records of the requests the switch did not answer."""
    directory.mkdir()
    ps = CsvLog(directory / "ps0.csv", PS_COLUMNS)
    for w in range(2):
        log = CsvLog(directory / f"w{w}.csv", WORKER_COLUMNS)
        seq = 0
        for t in (1, 2):
            for kind, ms in (("pull", iteration_ms / 4), ("push", iteration_ms / 3)):
                seq += 1
                switch = by_switch and kind == "pull" and t == 2
                log.write(worker_row(kind, t, seq, 1000 * ms, int(switch)))
                if not switch:
                    ps.write((1.0, 1.0002, 1.0005, kind.upper(), w, seq, t, 8, 0, "accepted", ""))
            log.write(worker_row("iteration", t, 0, 1000 * iteration_ms, 0))
        log.close()
    ps.close()
    np.save(directory / "params0.npy", np.arange(16, dtype=np.int64))
    if keys:  # the warm-up: the PS's update counts of `keys` keys, falling as Zipf's
        counts = np.zeros(keys, np.int64)
        counts[:] = np.maximum(1, 8 // np.arange(1, keys + 1))
        write_frequency(directory / "freq0.csv", counts, np.zeros(keys, np.int64),
                        {"shard": 0, "iterations": 2})  # fmt: skip
    # the PS link h3-s1 as the testbed probes it (at s1): 2 iterations' bytes each way
    to_ps, from_ps = (1000.0, 600.0) if by_switch else (1400.0, 800.0)
    link = {
        "link": "h3-s1",
        "to_ps": True,
        "directions": {"s1-h3": {"bytes": 2 * to_ps}, "h3-s1": {"bytes": 2 * from_ps}},
    }
    verdict = {
        "faithful": True,
        "bottleneck": "ps_link",
        "why": "the PS link ran at 95%",
        "busiest_link": "s1-h3",
        "busiest_link_utilization": 0.95,
        "links": [link],
    }
    summaries = [{"losses": [None, None]}] * 2
    return PhaseResult(directory.name, directory, 1.0, summaries, [], {"s1": {}}, verdict)


def test_a_run_writes_report_md_with_its_table_and_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import experiment.plots as plots

    framed: list[tuple[str, str, str]] = []
    real = plots.finish_figure

    def spy(fig, path, title, config, *args, **kwargs):  # type: ignore[no-untyped-def]
        framed.append((path.name, config, kwargs.get("note", "")))
        return real(fig, path, title, config, *args, **kwargs)

    monkeypatch.setattr(plots, "finish_figure", spy)
    phases = {
        "warmup": write_phase(tmp_path / "warmup", 40.0, False, keys=30),
        "server": write_phase(tmp_path / "server", 40.0, False),
        "offload": write_phase(tmp_path / "offload", 30.0, True),
    }
    config = run_config(workers=2, iterations=2, bw=2.0, warmup=2, hot_slots=16)
    config["link_bandwidth_mbps"] = [2.0]
    model = model_bound(39.0, 30.5)
    hot = {"keys": 4, "coverage": 0.4, "covered": 40, "total": 100, "candidates": 30}
    summary = build_summary(config, phases, hot, 2, 1, ["s1"], model=model)
    write_outputs(tmp_path, summary, phases, 2)
    # each link's bytes per iteration, measured (the verdict's, over 2 iterations) and modelled
    links = summary["modes"]["offload"]["link_bytes_per_iteration"]
    assert links["s1-h3"] == {"measured": 1000.0, "model": 980.0}
    assert links["h1-s1"] == {"measured": None, "model": 300.0}  # not probed, modelled
    assert summary["fidelity"]["faithful"]
    assert load_summary(tmp_path / "summary.json") == summary  # the schema's round trip

    text = (tmp_path / "report.md").read_text()
    assert text.splitlines()[2] == config_line(summary)
    assert "links 2 Mbit/s (BW=2: set)" in text
    assert comparison_table(summary, with_config=False) in text
    assert "regime: ps_link" in text and bound_line(summary) in text
    # the model's bottleneck beside the busiest link measured, in the table and report.md
    assert "busiest link (model / measured): server-only s1-h3 / s1-h3 95%, " in text
    assert "| offload | s1-h3 | 980 | 1,000 | 1.02 |" in text
    images = re.findall(r"!\[([^]]+)\]\(([^)]+)\)", text)
    names = [target for _, target in images]
    assert names[0] == "iteration_vs_bound.png"  # the headline first
    for name in (
        "link_load.png", "latency_cdf.png", "ps_load.png", "latency_dissection.png", "skew.png"
    ):  # fmt: skip
        assert name in names
    for name in names:
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"![{name}]({name})\n\n*" in text  # with its caption
    # every figure names the configuration, and its names are the ones the report links
    assert sorted(name for name, _, _ in framed) == sorted(names)
    assert {config for _, config, _ in framed} == {short_config(summary)}
    # skew.png says why its counts stop where they do and why 4 keys fill 16 slots
    skew_note = next(note for name, _, note in framed if name == "skew.png")
    assert "4 = 2 workers" in skew_note and "4 of the 16 slots" in skew_note
    assert (tmp_path / "summary.json").exists()
    # the printed table starts with the configuration line
    assert comparison_table(summary).splitlines()[0] == config_line(summary)


def test_the_headline_figure_draws_with_and_without_a_bound(tmp_path: Path) -> None:
    from experiment.plots import iteration_vs_bound

    mode = {"iteration_ms": {"p50": 40.0, "p99": 44.0, "mean": 41.0}}
    summary = {
        "config": run_config(),
        "modes": {"server": mode, "offload": {"iteration_ms": {"p50": 32.0, "p99": 35.0}}},
        "speedup": {"iteration_ms": 1.25},
        "model": model_bound(39.0, 31.0),
    }
    iteration_vs_bound(tmp_path / "bound.png", summary)
    iteration_vs_bound(tmp_path / "none.png", {**summary, "model": None})
    for name in ("bound.png", "none.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = bound_comparison(summary)
    assert "server-only 40.00 ms (+2.6% vs the bound)" in lines[2]
    assert "speed-up 1.25x against the bound's 1.26x" in lines[2]
    assert bound_comparison({**summary, "model": None})[0].startswith("No bound")


def test_a_bound_set_by_another_link_names_it_beside_the_ps_links() -> None:
    """leafspine: the spine into the PS's leaf bounds offload, the PS link server-only."""
    model = model_bound(414.35, 271.04, ("s1-h4", "s5-s1"), (414.35, 335.87))
    line = bound_line({"model": model})
    assert line == (
        "bound: 414.35 ms server-only (link s1-h4), 335.87 ms offload (link s5-s1), 1.23x; "
        "PS-link bound 414.35 ms server-only, 271.04 ms offload, 1.53x (experiment/model.py)"
    )
    # where the PS link is the bottleneck in both modes, the line reads as on a star
    assert bound_line({"model": model_bound(39.0, 31.0)}).startswith("PS-link bound: 39.00 ms")
    details = {
        "server": {"busiest_link": "s1-h4", "busiest_link_utilization": 0.97},
        "offload": {"busiest_link": "s5-s1", "busiest_link_utilization": 0.95},
    }
    summary = {
        "model": model,
        "fidelity": {
            "faithful": True,
            "bottleneck": "mixed",
            "bottlenecks": {"server": "ps_link", "offload": "link:s5-s1"},
            "details": details,
        },
    }
    assert links_line(summary) == (
        "busiest link (model / measured): server-only s1-h4 / s1-h4 97%, offload s5-s1 / s5-s1 95%"
    )
    assert verdict_lines(summary) == [
        "regime: server-only ps_link, offload link:s5-s1 (both phases network-bound, as emulated)"
    ]


def test_a_link_the_model_does_not_name_gets_its_own_advice() -> None:
    fidelity = {
        "faithful": False,
        "bottlenecks": {"server": "ps_link", "offload": "link:s5-s1"},
        "details": {"server": {"faithful": True}, "offload": {"faithful": False}},
        "warning": "bound by a link the model does not name: offload: link:s5-s1 (...)",
    }
    summary = {"fidelity": fidelity, "config": {"link_bandwidth_mbps": [1.0]}}
    hint = regime_hint(summary)
    assert hint is not None and "link_bytes_per_iteration" in hint and "BW" not in hint
    lines = verdict_lines(summary)
    assert lines[0].startswith("WARNING, bound by a link") and lines[1].startswith("what to try")
    # beside a faithful link regime, a CPU-bound phase gets the machine's advice
    fidelity["details"] = {"server": {"faithful": False}, "offload": {"faithful": True}}
    fidelity["bottlenecks"] = {"server": "cpu", "offload": "link:s5-s1"}
    hint = regime_hint(summary)
    assert hint is not None and "a lower BW= than 1" in hint


def test_a_summary_of_another_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    path.write_text(dumps_summary({"schema_version": SCHEMA_VERSION - 1}))  # type: ignore[typeddict-item]
    with pytest.raises(SummaryError, match=f"version {SCHEMA_VERSION - 1}, this hotagg reads"):
        load_summary(path)
