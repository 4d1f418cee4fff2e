"""`make sweep`'s pieces without running the grid: options, flattening, table, plots, report."""

from __future__ import annotations

import argparse
import csv
import math
import re
from pathlib import Path

import pytest

from contract.constants import MAX_WORKERS
from experiment import sweep
from experiment.config import RunConfig
from experiment.configline import join_config
from experiment.report import CAPTIONS


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sweep.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_defaults_are_a_grid_of_twelve_runs() -> None:
    points = sweep.grid(parse())
    assert len(points) == 3 * 2 * 2  # workers x skew x seeds
    assert {p.topo for p in points} == {"star:4", "star:8", "star:16"}
    assert sweep.Point(8, 1.1, 256, 0.0, 10.0, 1, 2).topo == "star:8:2"


@pytest.mark.parametrize(
    "argv",
    [("--workers", "0"), ("--loss", "1.5"), ("--bw", "-1"), ("--skew", "nan"), ("--seeds", "x")],
)
def test_bad_grids_are_refused(argv: tuple[str, ...]) -> None:
    try:
        args = parse(*argv)
    except SystemExit as e:
        assert e.code == 2
        return
    with pytest.raises(ValueError):
        sweep.grid(args)


def test_flatten_keeps_every_field() -> None:
    flat = sweep.flatten({"a": {"b": 1, "c": [1, 2]}, "d": None})
    assert flat == {"a.b": 1, "a.c": "[1, 2]", "d": None}


def fake_summary(workers: int, skew: float, seed: int, speedup: float) -> dict:
    mode = {
        "ps_packets_in": 100 * workers,
        "iteration_ms": {"p50": 10.0 * speedup, "p99": 20.0 * speedup},
    }
    config = RunConfig(
        topo=Path(f"star:{workers}"), workers=workers, iterations=30, skew=skew, seed=seed, bw=10.0
    ).as_dict()
    config.update(link_bandwidth_mbps=[10.0], topology_shape="star")
    fidelity: dict = {"faithful": seed == 1, "bottleneck": "ps_link" if seed == 1 else "cpu"}
    if seed == 1 and workers == 8 and skew == 1.3:  # the spine into the PS's leaf, as modelled
        fidelity["bottleneck"] = "mixed"
        fidelity["bottlenecks"] = {"server": "ps_link", "offload": "link:s3-s1"}
    if seed != 1:
        fidelity["bottlenecks"] = {"server": "cpu"}
        fidelity["warning"] = "not network-bound: server: cpu (the cores were 95% busy)"
    return {
        "target": "embedded",
        "iterations": 30,
        "exact": True,
        "config": config,
        "speedup": {"iteration_ms": speedup},
        "model": {"speedup": 1.3 + 0.1 * skew, "bound_speedup": 1.25 + 0.1 * skew},
        "fidelity": fidelity,
        "modes": {
            "server": mode,
            "offload": {
                "ps_packets_in": 70 * workers,
                "iteration_ms": {"p50": 10.0, "p99": 20.0 + seed},
            },
        },
    }


def test_rows_plots_and_report(tmp_path: Path) -> None:
    rows, summaries, points = [], [], []
    for workers in (4, 8):
        for skew in (1.1, 1.3):
            for seed in (1, 2):
                point = sweep.Point(workers, skew, 256, 0.0, 10.0, seed, 1)
                measured = 1.3 if workers == 4 else 1.8
                summaries.append(fake_summary(workers, skew, seed, measured))
                rows.append(sweep.row_of(point, summaries[-1]))
                points.append(point)
    assert rows[0]["model_error"] == pytest.approx(1.3 / 1.36 - 1, abs=1e-3)
    sweep.write_csv(tmp_path / "results.csv", rows)
    with open(tmp_path / "results.csv") as f:
        table = list(csv.DictReader(f))
    assert len(table) == 8 and "modes.offload.ps_packets_in" in table[0]
    parts = sweep.grid_config(summaries, points)
    figures = sweep.plot(rows, tmp_path, join_config(parts, short=True))
    assert figures == [
        "speedup_vs_bound.png",  # the headline first
        "speedup_vs_workers.png",
        "speedup_vs_skew.png",
        "ps_packets.png",
    ]
    assert all((tmp_path / f).stat().st_size > 10_000 for f in figures)
    line = join_config(parts)
    sweep.report(tmp_path, rows, figures, ["W=16 ... (failed)"], summaries, line)
    text = (tmp_path / "report.md").read_text()
    assert text.splitlines()[2] == line
    # the unfaithful runs (seed 2) each with their warning and what to try
    unfaithful = [r for r in text.splitlines() if r.startswith("- W=") and "seed=2" in r]
    assert len(unfaithful) == 4
    assert all("WARNING, not network-bound" in r and "; what to try: " in r for r in unfaithful)
    for name in figures:  # each figure linked, with its caption
        assert f"![{name}]({name})\n\n*{CAPTIONS[name]}*" in text
    # Only seed 1's points are faithful; of those, the 4-worker ones are within 15%.
    assert "within 15% of the bound: 2 of 4 (of 8 runs)" in text
    # the regime column names each phase's where they differ
    assert "| 1.8 | 1.38 | no | server-only ps_link, offload link:s3-s1 | True |" in text
    assert text.count("| ps_link | True |") == 3
    assert "(not faithful)" in text and "W=16 ... (failed)" in text
    assert "![ps_packets.png](ps_packets.png)" in text
    # Spread over seeds: p99 speed-ups 20*1.3/21 and 20*1.3/22 for 4 workers.
    assert f"| 4 | 1.1 | 256 | 0 | 10 | 1 | 2 | 1.30x [1.30-1.30] | {26 / 21.5:.2f}x" in text


# --- make run's options, passed to every run as given ---------------------------------------


def test_fixed_run_options_reach_every_run_and_defaults_add_nothing(tmp_path: Path) -> None:
    plain = parse("--workers", "4,8")
    for point in sweep.grid(plain):
        assert sweep.run_options(plain) == []
        assert "--hotset" not in sweep.run_arguments(point, plain, tmp_path)
    args = parse("--workers", "4,8", "--hotset", "dynamic", "--keys", "5000", "--drift",
                 "every=5,fraction=0.3", "--hotset-source", "switch", "--switch-restarts", "1",
                 "--intf-prefix", "sw", "--grpc-base-port", "6000")  # fmt: skip
    expected = {
        "--hotset": "dynamic",
        "--keys": "5000",
        "--drift": "every=5,fraction=0.3,head=256",  # the run's own form of it
        "--hotset-source": "switch",
        "--switch-restarts": "1",
        "--intf-prefix": "sw",
        "--grpc-base-port": "6000",
    }
    for point in sweep.grid(args):
        argv = sweep.run_arguments(point, args, tmp_path)
        given = dict(zip(argv[::2], argv[1::2]))
        assert {k: given.get(k) for k in expected} == expected
        assert given["--workers"] == str(point.workers) and given["--topo"] == point.topo
    # every option it takes is one `python -m experiment run` takes, under the same name
    from experiment.__main__ import build_parser

    run = build_parser().parse_args(["run", *sweep.run_arguments(point, args, tmp_path)])
    assert (run.hotset, run.keys, run.workers) == ("dynamic", [5000], [point.workers])


def test_a_value_no_run_can_take_stops_the_sweep_before_it_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from experiment.__main__ import main

    sweeps = tmp_path / "sweeps"
    # HOTSET_SOURCE=switch without HOTSET=dynamic: each run would refuse it
    argv = ["sweep", "--workers", "4", "--seeds", "1", "--sweeps-dir", str(sweeps)]
    assert main([*argv, "--hotset-source", "switch"]) == 2
    assert "HOTSET=static runs none" in capsys.readouterr().err
    # a head as large as the key space, and a worker count the run refuses
    assert main([*argv, "--keys", "200", "--drift", "every=5,fraction=0.3"]) == 2
    assert "DRIFT=every=5,fraction=0.3,head=256" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["sweep", "--workers", str(MAX_WORKERS + 1), "--sweeps-dir", str(sweeps)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and f"WORKERS (--workers): {MAX_WORKERS + 1}" in err
    assert not sweeps.exists()  # nothing ran, not even the sweep's directory
    # a grid every run can take passes
    sweep.preflight(sweep.grid(parse("--hotset", "dynamic", "--keys", "5000")), parse())


def test_sweep_help_shows_the_grid_and_the_run_options() -> None:
    from experiment.__main__ import build_parser

    [sub] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    text = " ".join(sub.choices["sweep"].format_help().split())
    for name, value in sweep.DEFAULTS.items():
        assert f"--{name.replace('_', '-')}" in text and f"(default: {value})" in text
    for dest in sweep.FIXED_RUN_OPTIONS:
        assert f"--{dest.replace('_', '-')}" in text


def test_the_grid_config_line_lists_what_varies_and_keeps_what_does_not() -> None:
    summaries = [fake_summary(w, skew, seed, 1.3) for w in (4, 8) for skew in (1.1, 1.3)
                 for seed in (1,)]  # fmt: skip
    points = [sweep.Point(w, skew, 256, 0.0, 10.0, 1, 1) for w in (4, 8) for skew in (1.1, 1.3)]
    line = join_config(sweep.grid_config(summaries, points))
    assert line.startswith("config: embedded target, topology star:W (a generated star per ")
    assert ", workers 4,8, 30 iterations, zipf workload (skew 1.1,1.3, 100000 keys), " in line
    assert line.endswith(", links 10 Mbit/s (BW=10: set), seeds 1")
    # one worker count: the runs' own items, as a run's line says them
    same = join_config(sweep.grid_config(summaries[:1], points[:1]))
    assert ", topology star:4 (star), 4 workers, " in same
    # a budget that varies is named even though the default one is not shown for a run
    slots = [{**s, "config": {**s["config"], "hot_slots": n}} for s, n in
             zip(summaries[:2], (128, 256))]  # fmt: skip
    slot_points = [sweep.Point(4, 1.1, n, 0.0, 10.0, 1, 1) for n in (128, 256)]
    assert "hot slots 128,256" in join_config(sweep.grid_config(slots, slot_points))


# --- leaf-spine points: --leaves, --hosts-per-leaf, --aggregate ---------------------------


def test_leaves_grid_runs_every_worker_host_of_each_leafspine_in_each_design(
    tmp_path: Path,
) -> None:
    args = parse("--leaves", "2,4", "--hosts-per-leaf", "2,3", "--aggregate", "ps-leaf,leaves",
                 "--skew", "1.1", "--seeds", "1,2")  # fmt: skip
    points = sweep.grid(args)
    assert len(points) == 2 * 2 * 2 * 2  # leaves x hosts per leaf x seeds x designs
    by_topo = {(p.topo, p.aggregate, p.seed): p for p in points}
    assert len(by_topo) == len(points)  # each point once
    for n, h in ((2, 2), (2, 3), (4, 2), (4, 3)):
        for design in ("ps-leaf", "leaves"):
            point = by_topo[(f"leafspine:{n}:{h}", design, 1)]
            assert (point.workers, point.shards) == (n * h - 1, 1)  # the PS is the last host
            argv = sweep.run_arguments(point, args, tmp_path)
            given = dict(zip(argv[::2], argv[1::2]))
            assert given["--topo"] == f"leafspine:{n}:{h}"
            assert given["--workers"] == str(n * h - 1) and given["--aggregate"] == design
    assert "leafspine:4:3 leaves W=11 " in by_topo[("leafspine:4:3", "leaves", 2)].label()
    # every point is one `make run` takes: the run's own checks pass for each
    sweep.preflight(points, args)
    from experiment.__main__ import build_parser

    run = build_parser().parse_args(["run", *sweep.run_arguments(points[-1], args, tmp_path)])
    assert (run.topo, run.aggregate, run.workers) == (Path("leafspine:4:3"), "leaves", [11])


def test_stars_keep_their_grid_and_run_on_ps_leaf() -> None:
    points = sweep.grid(parse("--workers", "4,8", "--seeds", "1"))
    assert [p.topo for p in points] == ["star:4", "star:4", "star:8", "star:8"]  # two skews
    assert {p.aggregate for p in points} == {"ps-leaf"} and not any(p.leaves for p in points)
    assert points[0].label() == "W=4 skew=1.1 slots=256 loss=0 bw=2 seed=1 shards=1"


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (("--aggregate", "leaves"), "--aggregate leaves needs a leaf-spine"),
        (("--aggregate", "ps-leaf,everywhere"), "--aggregate: 'everywhere'; use ps-leaf or leaves"),
        (("--leaves", "2"), "--leaves needs --hosts-per-leaf"),
        (("--hosts-per-leaf", "2"), "give --leaves too"),
        # given, even as the default's value: a leaf-spine point runs every worker host
        (("--leaves", "2", "--hosts-per-leaf", "2", "--workers", "4,8,16"), "leave --workers out"),
        (("--leaves", "2", "--hosts-per-leaf", "2", "--shards", "1,2"), "leave --shards at 1"),
        (("--leaves", "1", "--hosts-per-leaf", "1"), "leafspine:1:1 has no worker host"),
        (("--leaves", "0", "--hosts-per-leaf", "2"), "--leaves: values must be positive"),
    ],
)
def test_leafspine_grids_that_cannot_run_are_refused(argv: tuple[str, ...], says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        sweep.grid(parse(*argv))


def test_a_leafspine_the_run_refuses_stops_the_sweep_before_it_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from experiment.__main__ import main

    sweeps = tmp_path / "sweeps"
    # one leaf: every host on the PS's switch, which ps-leaf already aggregates at
    argv = ["sweep", "--leaves", "1", "--hosts-per-leaf", "3", "--aggregate", "leaves",
            "--sweeps-dir", str(sweeps)]  # fmt: skip
    assert main(argv) == 2
    assert "AGGREGATE=leaves: TOPO=leafspine:1:3 has hosts on one switch only" in (
        capsys.readouterr().err
    )
    assert main(["sweep", "--aggregate", "leaves", "--sweeps-dir", str(sweeps)]) == 2
    assert "hotagg sweep: error: --aggregate leaves needs a leaf-spine" in capsys.readouterr().err
    assert not sweeps.exists()


def leafspine_summary(leaves: int, hosts: int, design: str, speedup: float) -> dict:
    summary = fake_summary(leaves * hosts - 1, 1.1, 1, speedup)
    summary["config"].update(topo=f"leafspine:{leaves}:{hosts}", aggregate=design,
                             topology_shape=f"{leaves + 1} switches")  # fmt: skip
    return summary


def test_the_config_line_table_and_csv_name_the_topology_and_design(tmp_path: Path) -> None:
    points = [
        sweep.Point(n * 2 - 1, 1.1, 256, 0.0, 10.0, 1, 1, leaves=n, hosts_per_leaf=2, aggregate=a)
        for n in (2, 4)
        for a in ("ps-leaf", "leaves")
    ]
    summaries = [leafspine_summary(p.leaves, 2, p.aggregate, 1.2 + p.leaves / 10) for p in points]
    rows = [sweep.row_of(p, s) for p, s in zip(points, summaries)]
    line = join_config(sweep.grid_config(summaries, points))
    assert ", topology leafspine:L:H (a generated leaf-spine per point, L 2,4, H 2), " in line
    assert ", workers 3,7, " in line and ", aggregation ps-leaf,leaves" in line
    # one design throughout: the run's own words for it
    leaves_only = [i for i, p in enumerate(points) if p.aggregate == "leaves"]
    one = sweep.grid_config([summaries[i] for i in leaves_only], [points[i] for i in leaves_only])
    assert ", aggregation at every leaf" in join_config(one)
    sweep.write_csv(tmp_path / "results.csv", rows)
    with open(tmp_path / "results.csv") as f:
        table = list(csv.DictReader(f))
    assert [(r["point.topo"], r["point.aggregate"]) for r in table] == [
        (p.topo, p.aggregate) for p in points
    ]
    # the bound a leaf-spine point is plotted and judged against is the every-link bound
    assert [r["model_speedup"] for r in rows] == [s["model"]["bound_speedup"] for s in summaries]
    figures = sweep.plot(rows, tmp_path, join_config(sweep.grid_config(summaries, points), True))
    assert figures == ["speedup_vs_bound.png"]  # the series figures are the stars'
    sweep.report(tmp_path, rows, figures, [], summaries, line)
    text = (tmp_path / "report.md").read_text()
    assert text.splitlines()[2] == line
    assert "| leafspine:4:2 | leaves | 7 | 1.1 | 256 | 0 | 10 | 1 | 1 | 1.6 | 1.36 |" in text
    assert "| leafspine:2:2 | ps-leaf | 3 | 1.1 | 256 | 0 | 10 | 1 | 1 | 1.40x" in text


# --- the training axes: --compute, --stragglers, --sync -----------------------------------


def test_compute_stragglers_and_sync_are_axes_of_the_grid(tmp_path: Path) -> None:
    args = parse("--workers", "4", "--skew", "1.1", "--seeds", "1", "--compute",
                 "0;20ms;normal:60ms,10ms", "--stragglers", "none;1:3,p=0.1:2",
                 "--sync", "bsp,ssp:2,async,ssp:0")  # fmt: skip
    assert args.compute == ["", "20ms", "normal:60ms,10ms"]
    assert args.stragglers == ["", "1:3,p=0.1:2"]
    assert args.sync == ["bsp", "ssp:2", "async"]  # ssp:0 is bsp: once
    points = sweep.grid(args)
    # 3 compute x 2 stragglers x 3 sync, but the point without compute takes no stragglers
    # (a run refuses them without compute), so it runs once per sync mode, not twice
    assert len(points) == (1 + 2 * 2) * 3 == len(set(points))
    assert {(p.compute, p.stragglers) for p in points} == {
        ("", ""), ("20ms", ""), ("20ms", "1:3,p=0.1:2"),
        ("normal:60ms,10ms", ""), ("normal:60ms,10ms", "1:3,p=0.1:2"),
    }  # fmt: skip
    for point in points:
        argv = sweep.run_arguments(point, args, tmp_path)
        given = dict(zip(argv[::2], argv[1::2]))
        assert given["--sync"] == point.sync
        assert given.get("--compute") == (point.compute or None)
        assert given.get("--stragglers") == (point.stragglers or None)
    slow = next(p for p in points if p.stragglers and p.sync == "async")
    assert slow.label().endswith(" compute=20ms stragglers=1:3,p=0.1:2 sync=async")
    sweep.preflight(points, args)  # every point is one make run takes
    from experiment.__main__ import build_parser

    run = build_parser().parse_args(["run", *sweep.run_arguments(slow, args, tmp_path)])
    assert (run.compute, run.stragglers, run.sync) == ("20ms", "1:3,p=0.1:2", "async")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        # commas are part of a value: the error says to separate values with ;
        (("--compute", "20ms,60ms"), "separate them with ';' (COMPUTE='20ms;60ms')"),
        (("--stragglers", "1:3,2:3"), "separate them with ';' (STRAGGLERS='1:3;2:3')"),
        (("--compute", "20ms;;60ms"), "COMPUTE='20ms;;60ms': an empty value in the list"),
        (("--compute", "20ms;fast"), "COMPUTE='20ms;fast': 'fast' is not a duration"),
        (("--stragglers", "1:0.5"), "STRAGGLERS: '1:0.5': a straggler is slower"),
        (("--sync", "bsp,ssp"), "SYNC='bsp,ssp': sync mode 'ssp': expected bsp, ssp:S"),
    ],
)
def test_bad_training_axes_are_refused_naming_the_variable(
    argv: tuple[str, ...], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        parse(*argv)
    assert e.value.code == 2
    assert says in " ".join(capsys.readouterr().err.split())


def test_a_training_point_the_run_refuses_stops_the_sweep_before_it_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from experiment.__main__ import main

    sweeps = tmp_path / "sweeps"
    argv = ["sweep", "--workers", "4", "--seeds", "1", "--sweeps-dir", str(sweeps)]
    # two PS shards cannot take ssp: the run's own check, before anything runs
    assert main([*argv, "--shards", "1,2", "--sync", "bsp,ssp:2"]) == 2
    assert "SYNC=ssp:2: every PS shard would read all of the switch's slots" in (
        capsys.readouterr().err
    )
    assert main([*argv, "--jobs", "2", "--compute", "0;20ms"]) == 2
    assert "COMPUTE=20ms: the model of several jobs counts no compute" in capsys.readouterr().err
    assert not sweeps.exists()


def training_summary(compute: str, stragglers: str, sync: str, seed: int) -> dict:
    """A 4-worker run's summary with compute, stragglers and a sync mode: the speed-up
    falls with compute (faster with a straggler) and rises with staleness."""
    compute_ms = float(compute[:-2]) if compute else 0.0
    slowdown = 2 if stragglers else 1
    stale = {"bsp": 0, "ssp:2": 1, "async": 2}[sync]
    summary = fake_summary(4, 1.1, seed, 1.3 - compute_ms * slowdown / 200 + stale / 20)
    summary["config"].update(compute=compute or None, stragglers=stragglers or None, sync=sync)
    if compute:
        summary["compute"] = {"compute": compute, "emulated": compute, "stragglers": stragglers}
        summary["model"]["iteration"] = {"speedup": 1.3 - compute_ms * slowdown / 180}
    summary["modes"]["offload"]["staleness"] = {"0": 8, "1": 2 * stale, "2": stale}
    return summary


def training_rows() -> tuple[list[dict], list[dict], list[sweep.Point]]:
    args = parse("--workers", "4", "--skew", "1.1", "--seeds", "1,2", "--bw", "10",
                 "--compute", "0;20ms;60ms", "--stragglers", "none;1:3",
                 "--sync", "bsp,ssp:2,async")  # fmt: skip
    points = sweep.grid(args)
    summaries = [training_summary(p.compute, p.stragglers, p.sync, p.seed) for p in points]
    return [sweep.row_of(p, s) for p, s in zip(points, summaries)], summaries, points


def test_rows_name_the_compute_and_the_staleness() -> None:
    rows, _, _ = training_rows()
    for r in rows:
        assert r["compute_ms"] == {"": 0.0, "20ms": 20.0, "60ms": 60.0}[r["point.compute"]]
        # 8 fresh pulls, 2*S a sum behind and S two behind: (2S + 2S) / (8 + 3S)
        stale = {"bsp": 0, "ssp:2": 1, "async": 2}[r["point.sync"]]
        assert r["offload_staleness"] == pytest.approx(4 * stale / (8 + 3 * stale), abs=1e-4)
    # a real-time compute is plotted in the run's emulated time; a distribution by its mean
    real = {"compute": {"compute": "real:10us", "emulated": "50ms"}}
    lognormal = {"compute": {"compute": "lognormal:20ms,0.5", "emulated": "lognormal:20ms,0.5"}}
    assert sweep.compute_ms(real) == 50.0  # type: ignore[arg-type]
    mean = 20 * math.exp(0.5**2 / 2)
    assert sweep.compute_ms(lognormal) == pytest.approx(mean, abs=1e-3)  # type: ignore[arg-type]
    assert sweep.mean_staleness({}) is None and sweep.mean_staleness({"0": 0}) is None


def test_compute_lines_start_every_stragglers_line_at_no_compute() -> None:
    rows, _, _ = training_rows()
    varied, series = sweep.compute_series(rows)
    assert varied == ["point.sync", "point.stragglers"]
    assert set(series) == {(s, slow) for s in ("bsp", "ssp:2", "async") for slow in ("", "1:3")}
    for (sync, slow), members in series.items():
        assert {r["point.sync"] for r in members} == {sync}
        # the no-compute points (2 seeds) start both lines; then 2 computes x 2 seeds
        assert sorted(r["compute_ms"] for r in members) == [0, 0, 20, 20, 60, 60]
        assert {r["point.stragglers"] for r in members if r["compute_ms"]} == {slow}


def test_training_figures_tables_and_config_line(tmp_path: Path) -> None:
    rows, summaries, points = training_rows()
    parts = sweep.grid_config(summaries, points)
    line = join_config(parts)
    assert ", SYNC=bsp,ssp:2,async" in line and ", compute none;20ms;60ms" in line
    assert ", stragglers none;1:3" in line
    figures = sweep.plot(rows, tmp_path, join_config(parts, short=True))
    assert figures == [
        "speedup_vs_bound.png",
        "speedup_vs_compute.png",
        "speedup_vs_staleness.png",
        "ps_packets.png",
    ]
    assert all((tmp_path / f).stat().st_size > 10_000 for f in figures)
    sweep.report(tmp_path, rows, figures, [], summaries, line)
    text = (tmp_path / "report.md").read_text()
    for name in ("speedup_vs_compute.png", "speedup_vs_staleness.png"):
        assert f"![{name}]({name})\n\n*{CAPTIONS[name]}*" in text
    # the varied axes are columns of both tables, the staleness beside each run
    assert "| shards | compute | stragglers | sync | seed | p50 speed-up |" in text
    assert "| 1 | 60ms | 1:3 | async | 2 | " in text
    assert text.count(" | 0.00 |") == 5 * 2  # bsp's 5 points, 2 seeds each: never stale
    assert "| shards | compute | stragglers | sync | seeds | p50 speed-up |" in text
    # each sync mode is a configuration of its own over the seeds, not merged
    spread = [r for r in text.splitlines() if r.startswith("| star:4 |") and "x [" in r]
    assert len(spread) == len(points) // 2 == 15
    assert "| 1 | none | none | ssp:2 | 2 | " in text
    # one sync mode and one compute: no such figures, no such columns
    bsp = [r for r in rows if r["point.sync"] == "bsp" and r["point.compute"] == "20ms"]
    (tmp_path / "one").mkdir()
    assert sweep.plot(bsp, tmp_path / "one", "") == ["speedup_vs_bound.png", "ps_packets.png"]
