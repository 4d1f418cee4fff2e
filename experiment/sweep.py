"""`make sweep`: a grid of normal runs, one results table, plots against the analytical bound.

    python -m experiment sweep [--workers 4,8,16] [--skew 1.1,1.3] [--hot-slots 256]
        [--loss 0] [--bw 2] [--seeds 1,2] [--shards 1] [--iterations 30] [--target ...]
        [--keys N] [--workload W] [--hotset dynamic] [--drift ...] (FIXED_RUN_OPTIONS:
        make run's options, given to every run as they are)
    python -m experiment sweep --leaves 2,4 --hosts-per-leaf 2,4 --aggregate ps-leaf,leaves ...
    python -m experiment sweep --compute '0;20ms;normal:60ms,10ms' --stragglers 'none;1:3'
        --sync bsp,ssp:2,async ...  (COMPUTE's and STRAGGLERS' values hold commas: `;` lists)

Each point of the grid (the product of the lists) is a `python -m experiment run` of its
own, on a generated star with as many workers as the point has (`star:N`, or `star:N:S` for
S PS shards), or with --leaves on a generated `leafspine:L:H` with every worker host
(L*H - 1), aggregating where --aggregate says (ps-leaf, or leaves: docs/design.md
section 7), so each point is exactly what `make run` would measure. sweeps/<id>/ gets:

- runs/: every run's directory, as make run writes it;
- results.csv: one row per run, every field of its summary.json flattened (a.b.c columns),
  plus the point's parameters and the model's bound;
- speedup_vs_bound.png: each run's measured iteration p50 speed-up against the model's
  bound, the y = x diagonal and the 15% band; speedup_vs_workers.png, speedup_vs_skew.png:
  measured speed-up (mean over seeds, the band spanning the seeds) and the model's bound
  (dashed), of the star points only (a leaf-spine's workers follow from L and H, and
  its designs differ: those points are in speedup_vs_bound.png); ps_packets.png: PS
  packets per iteration of both modes (stars); shards.png where --shards has 2 or more: server-only
  with S PS shards against one PS plus the switch; speedup_vs_compute.png where --compute
  has two or more values: measured speed-up (mean over seeds, band over seeds) and the
  model with compute (dashed) against the emulated compute per iteration, a line per SYNC
  mode (and per other axis the grid varies); speedup_vs_staleness.png where --sync has two
  or more: each run's speed-up against offload's mean staleness of the PS's pull replies;
  every figure titled with the grid's configuration line;
- report.md, built as a run's: the grid's configuration line, the table, the fidelity
  verdicts (for every faithful point whether the measured speed-up is within 15% of the
  model, what to try for the others) and the figures with what to read from each.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import re
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, cast

import numpy as np

from experiment import options
from experiment.config import Aggregate, PreflightError
from experiment.configline import ConfigPart, config_parts, join_config
from experiment.jobs_summary import jobs_row
from experiment.options import OptionParser, add_run_arguments, check, config_of
from experiment.report import CAPTIONS, figure_markdown, regime_text, verdict_lines
from experiment.schema import (
    JobsSummary,
    Summary,
    SummaryError,
    check_summary,
    load_summary,
    model_speedup,
)
from hosts.compute import ComputeSpec
from topologies.switches import REPO_ROOT
from topologies.targets import TargetName, target_names

MODEL_TOLERANCE = 0.15  # the goal: measured speed-up within 15% of the bound
DEFAULTS = {
    "workers": "4,8,16",
    "skew": "1.1,1.3",
    "hot_slots": "256",
    "loss": "0",
    # 2 Mbit/s: on a 2-core machine every default point is PS-link-bound there (12 of 12,
    # each within 2.1% of the bound); at 10 Mbit/s every one was CPU-bound (0 of 12
    # faithful), so the sweep measured the machine, not offload. BW=10,... still works.
    "bw": "2",
    "seeds": "1,2",
    "shards": "1",
    "jobs": "1",
    "compute": "none",
    "stragglers": "none",
    "sync": "bsp",
}
# COMPUTE's and STRAGGLERS' values hold commas (normal:20ms,5ms; 1:3,p=0.1:3), so their
# lists take this separator; quoted, it passes the make command line and the shell intact.
VALUE_SEPARATOR = ";"


AGGREGATE_DESIGNS = tuple(a.value for a in Aggregate)


@dataclass(frozen=True)
class Point:
    workers: int
    skew: float
    hot_slots: int
    loss: float
    bw: float
    seed: int
    shards: int
    leaves: int = 0  # 0: a generated star; else leafspine:leaves:hosts_per_leaf
    hosts_per_leaf: int = 0
    aggregate: str = Aggregate.PS_LEAF.value
    jobs: int = 1  # J: J jobs of `workers` each share the star's switch (make run JOBS=J)
    compute: str = ""  # COMPUTE= in its normal form; empty: none
    stragglers: str = ""  # STRAGGLERS= in its normal form; empty: none (always, without compute)
    sync: str = "bsp"  # SYNC=

    @property
    def topo(self) -> str:
        if self.jobs > 1:
            return f"star:{self.jobs * self.workers}:{self.jobs}"  # the run builds it
        if self.leaves:
            return f"leafspine:{self.leaves}:{self.hosts_per_leaf}"
        return f"star:{self.workers}" + (f":{self.shards}" if self.shards > 1 else "")

    def label(self) -> str:
        where = f"{self.topo} {self.aggregate} " if self.leaves else ""
        where += f"jobs={self.jobs} " if self.jobs > 1 else ""
        training = f" compute={self.compute}" if self.compute else ""
        training += f" stragglers={self.stragglers}" if self.stragglers else ""
        training += f" sync={self.sync}" if self.sync != "bsp" else ""
        return (
            f"{where}W={self.workers} skew={self.skew:g} slots={self.hot_slots} "
            f"loss={self.loss:g} bw={self.bw:g} seed={self.seed} shards={self.shards}{training}"
        )


def _list(kind: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    def parse(text: str) -> list[Any]:
        try:
            values = [kind(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a list of numbers") from None
        if not values:
            raise argparse.ArgumentTypeError("an empty list")
        return values

    return parse


def _run_values(
    parse_one: Callable[[str], str | None], name: str, separators: str
) -> Callable[[str], list[str]]:
    """A list of one `make run` variable's values, each parsed and put in its normal form
    as the run's option does (`parse_one`; None, none, becomes ""), each value once."""

    def parse(text: str) -> list[str]:
        items = [item.strip() for item in re.split(f"[{re.escape(separators)}]", text)]
        if len(items) > 1 and not all(items):
            raise argparse.ArgumentTypeError(
                f"{name}={text!r}: an empty value in the list; write none for a point without it"
            )
        values = []
        for item in items:
            try:
                values.append(parse_one(item) or "")
            except argparse.ArgumentTypeError as e:
                parts = item.split(",")
                hint = ""
                if len(parts) > 1 and "," not in separators:
                    try:  # each comma-separated part a value of its own: a list, meant
                        [parse_one(part) for part in parts]
                        hint = (
                            f"; to give several values, separate them with "
                            f"'{VALUE_SEPARATOR}' ({name}='{VALUE_SEPARATOR.join(parts)}'), "
                            "as a value may hold commas"
                        )
                    except argparse.ArgumentTypeError:
                        pass
                where = f"{name}={text!r}" if len(items) > 1 else name  # e names the value
                raise argparse.ArgumentTypeError(f"{where}: {e}{hint}") from None
        return list(dict.fromkeys(values))

    return parse


class _Given(argparse.Action):
    """Stores the value and notes that it was given: --workers with --leaves is refused
    even when it repeats the default."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
        values: Any, option_string: str | None = None,
    ) -> None:  # fmt: skip
        setattr(namespace, self.dest, values)
        namespace.given = getattr(namespace, "given", frozenset()) | {self.dest}


# `make run` options a sweep passes to every run as given (one value, not a list), by dest.
FIXED_RUN_OPTIONS = (
    "keys",
    "workload",
    "trace",
    "workload_args",
    "hotset",
    "hotset_source",
    "drift",
    "switch_restarts",
    "grpc_base_port",
    "intf_prefix",
    "split",
    "real_bw",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    grid_options = parser.add_argument_group("the grid (comma-separated lists)")
    grid_options.add_argument(
        "--workers",
        type=_list(int),
        default=DEFAULTS["workers"],
        action=_Given,
        help="worker counts; each point runs on a generated star:N (not with --leaves)",
    )
    grid_options.add_argument(
        "--skew", type=_list(float), default=DEFAULTS["skew"], help="Zipf exponents"
    )
    grid_options.add_argument(
        "--hot-slots",
        type=_list(int),
        default=DEFAULTS["hot_slots"],
        help="switch slots for the hot set (its budget)",
    )
    grid_options.add_argument(
        "--loss", type=_list(float), default=DEFAULTS["loss"], help="drop probabilities"
    )
    grid_options.add_argument(
        "--bw",
        type=_list(float),
        default=DEFAULTS["bw"],
        help="link rates in Mbit/s (at 2, a 2-core machine stays PS-link-bound)",
    )
    grid_options.add_argument(
        "--seeds", type=_list(int), default=DEFAULTS["seeds"], help="seeds, one run each"
    )
    grid_options.add_argument(
        "--shards",
        type=_list(int),
        default=DEFAULTS["shards"],
        help="PS shards (star:N:S); 1,2 adds each point on 2 shards, a server-side baseline",
    )
    grid_options.add_argument(
        "--jobs",
        type=_list(int),
        default=DEFAULTS["jobs"],
        help="jobs sharing the switch (make run JOBS=J): J jobs of each point's workers and "
        "skew, seeds seed..seed+J-1; each job is a row of its own (stars only)",
    )
    grid_options.add_argument(
        "--leaves",
        type=_list(int),
        default=[],
        help="leaf counts: each point runs on a generated leafspine:L:H with every worker "
        "host (L*H - 1 workers) instead of a star (default: none, stars)",
    )
    grid_options.add_argument(
        "--hosts-per-leaf",
        type=_list(int),
        default=[],
        help="hosts per leaf, H of leafspine:L:H (required with --leaves)",
    )
    grid_options.add_argument(
        "--aggregate",
        type=_list(str),
        default=[Aggregate.PS_LEAF.value],
        help=f"where hot keys are summed: {', '.join(AGGREGATE_DESIGNS)} (leaves: every "
        "leaf, only with --leaves; docs/design.md section 7) (default: ps-leaf)",
    )
    grid_options.add_argument(
        "--compute",
        type=_run_values(options.compute, "COMPUTE", VALUE_SEPARATOR),
        default=DEFAULTS["compute"],
        metavar="C1;C2;...",
        help="each worker's compute per iteration (make run COMPUTE=), a list separated by "
        f"'{VALUE_SEPARATOR}' since a value may hold commas: '0;20ms;normal:60ms,10ms' (0 or "
        "none: no compute)",
    )
    grid_options.add_argument(
        "--stragglers",
        type=_run_values(options.stragglers, "STRAGGLERS", VALUE_SEPARATOR),
        default=DEFAULTS["stragglers"],
        metavar="S1;S2;...",
        help="slow workers (make run STRAGGLERS=), a list separated by "
        f"'{VALUE_SEPARATOR}': 'none;1:3;1:3,p=0.1:3'; stragglers slow compute, so a point "
        "without compute runs without them",
    )
    grid_options.add_argument(
        "--sync",
        type=_run_values(options.sync, "SYNC", ",;"),
        default=DEFAULTS["sync"],
        help="consistency modes (make run SYNC=): bsp,ssp:2,async",
    )
    every_run = parser.add_argument_group("every run")
    every_run.add_argument(
        "--iterations", type=int, default=30, help="measured iterations per mode and run"
    )
    every_run.add_argument(
        "--target",
        choices=target_names(),
        default=TargetName.EMBEDDED,
        help="the switch (BMv2's binary from $BMV2_BINARY)",
    )
    every_run.add_argument(
        "--sweeps-dir",
        type=Path,
        default=REPO_ROOT / "sweeps",
        metavar="DIR",
        help="where the sweep's directory goes (default: sweeps/ of this checkout)",
    )
    for action in _fixed_run_actions():
        every_run._add_action(action)


def _fixed_run_actions() -> list[argparse.Action]:
    """FIXED_RUN_OPTIONS as `python -m experiment run` defines them: type, help, default."""
    runs = argparse.ArgumentParser(add_help=False)
    add_run_arguments(runs)
    return [a for a in runs._actions if a.dest in FIXED_RUN_OPTIONS]


def run_options(args: argparse.Namespace) -> list[str]:
    """The FIXED_RUN_OPTIONS given (those not at the run's default), as run arguments."""
    out = []
    for action in _fixed_run_actions():
        value = getattr(args, action.dest, action.default)
        if value != action.default:
            # --workload-args=--flag: a value that starts with a dash is not an option
            # a per-job option (experiment/options.py per_job) parses to a list
            text = ",".join(map(str, value)) if isinstance(value, list) else str(value)
            flag = action.option_strings[0]
            out += [f"{flag}={text}"] if text.startswith("-") else [flag, text]
    return out


def run_arguments(point: Point, args: argparse.Namespace, runs_dir: Path) -> list[str]:
    """`python -m experiment run`'s arguments for one point. J jobs: each of `workers`
    workers and the point's skew, job j seeded seed + j - 1 (so that the jobs draw different
    streams), on the star the run builds."""
    where = ["--topo", point.topo]
    seed = str(point.seed)
    if point.jobs > 1:
        where = ["--jobs", str(point.jobs)]
        seed = ",".join(str(point.seed + j) for j in range(point.jobs))
    return [
        "--target", args.target, *where, "--workers", str(point.workers),
        "--aggregate", point.aggregate, "--iterations", str(args.iterations),
        "--skew", str(point.skew), "--hot-slots", str(point.hot_slots), "--loss", str(point.loss),
        "--bw", str(point.bw), "--seed", seed, "--runs-dir", str(runs_dir),
        *(["--compute", point.compute] if point.compute else []),
        *(["--stragglers", point.stragglers] if point.stragglers else []),
        "--sync", point.sync, *run_options(args),
    ]  # fmt: skip


def preflight(points: list[Point], args: argparse.Namespace) -> None:
    """Every point's run options, checked as `make run` checks them (each error naming its
    make variable), before the first run: a value no run can take stops the sweep now, not
    after a grid of failed runs. Raises PreflightError; a malformed value exits 2."""
    parser = OptionParser(prog="python -m experiment run")
    add_run_arguments(parser)
    for point in points:
        check(config_of(parser.parse_args(run_arguments(point, args, args.sweeps_dir))))


def grid(args: argparse.Namespace) -> list[Point]:
    """The product of the lists: stars, or with --leaves leaf-spines; ValueError for a grid
    no sweep can run, naming the option."""
    for name in ("workers", "hot_slots", "seeds", "shards", "leaves", "hosts_per_leaf", "jobs"):
        if any(v < 1 for v in getattr(args, name)):
            raise ValueError(f"--{name.replace('_', '-')}: values must be positive")
    if any(not 0 <= v < 1 for v in args.loss):
        raise ValueError("--loss: values must be in [0, 1)")
    if any(v <= 0 for v in args.bw) or any(not 0 <= v < 10 for v in args.skew):
        raise ValueError("--bw must be positive and --skew in [0, 10)")
    if unknown := [a for a in args.aggregate if a not in AGGREGATE_DESIGNS]:
        raise ValueError(f"--aggregate: {unknown[0]!r}; use {' or '.join(AGGREGATE_DESIGNS)}")
    designs = list(dict.fromkeys(args.aggregate))  # each design once, in the order given
    rest = (args.skew, args.hot_slots, args.loss, args.bw, args.seeds)
    training = _training(args)
    if not args.leaves:
        if args.hosts_per_leaf:
            raise ValueError("--hosts-per-leaf is H of leafspine:L:H; give --leaves too")
        if Aggregate.LEAVES.value in designs:
            raise ValueError(
                "--aggregate leaves needs a leaf-spine (the generated stars have one switch); "
                "give --leaves and --hosts-per-leaf"
            )
        if any(j > 1 for j in args.jobs) and args.shards != [1]:
            raise ValueError("--jobs: each job has one PS; leave --shards at 1")
        return [
            Point(w, skew, slots, loss, bw, seed, shards, aggregate=a, jobs=j, **train)
            for w, skew, slots, loss, bw, seed, shards, a, j, train in itertools.product(
                args.workers, *rest, args.shards, designs, args.jobs, training
            )
        ]
    given: frozenset[str] = getattr(args, "given", frozenset())
    if not args.hosts_per_leaf:
        raise ValueError("--leaves needs --hosts-per-leaf (H of leafspine:L:H)")
    if "workers" in given:
        raise ValueError(
            "--workers is for stars: with --leaves each point runs every worker host of "
            "leafspine:L:H (L*H - 1); leave --workers out"
        )
    if args.shards != [1]:
        raise ValueError("--shards: a generated leaf-spine has one PS; leave --shards at 1")
    if args.jobs != [1]:
        raise ValueError("--jobs: several jobs share one star's switch; not with --leaves")
    if too_small := [(n, h) for n in args.leaves for h in args.hosts_per_leaf if n * h < 2]:
        raise ValueError(f"leafspine:{too_small[0][0]}:{too_small[0][1]} has no worker host")
    return [
        Point(
            n * h - 1,
            skew,
            slots,
            loss,
            bw,
            seed,
            1,
            leaves=n,
            hosts_per_leaf=h,
            aggregate=a,
            **train,
        )
        for n, h, skew, slots, loss, bw, seed, a, train in itertools.product(
            args.leaves, args.hosts_per_leaf, *rest, designs, training
        )
    ]


def _training(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The product of --compute, --stragglers and --sync: each point's compute, stragglers
    and sync, each combination once. Stragglers slow compute (a run refuses them without),
    so a point without compute takes none: with --compute '0;20ms' --stragglers 'none;1:3'
    the no-compute point runs once, not twice."""
    combos = [
        (compute, stragglers if compute else "", sync)
        for compute, stragglers, sync in itertools.product(
            getattr(args, "compute", [""]),
            getattr(args, "stragglers", [""]),
            getattr(args, "sync", ["bsp"]),
        )
    ]
    return [
        {"compute": compute, "stragglers": stragglers, "sync": sync}
        for compute, stragglers, sync in dict.fromkeys(combos)
    ]


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """summary.json as flat columns: nested keys joined with '.', lists as JSON."""
    out: dict[str, Any] = {}
    if isinstance(data, dict):
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}{key}."))
    elif isinstance(data, list):
        out[prefix[:-1]] = json.dumps(data)
    else:
        out[prefix[:-1]] = data
    return out


def run_point(
    point: Point, args: argparse.Namespace, runs_dir: Path, log: Path
) -> list[tuple[Summary, Path, dict[str, Any]]] | None:
    """One normal run: its summary, directory and extra columns (a run of J jobs: one each
    per job, its Summary under the run's split, the run's jobs_row as `jobs.` columns), or
    None (and the log says why) when it failed."""
    argv = [sys.executable, "-m", "experiment", "run", *run_arguments(point, args, runs_dir)]
    with open(log, "a") as out:
        out.write(f"\n=== {point.label()}\n")
        out.flush()
        rc = subprocess.run(argv, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT).returncode
    if rc == 130:  # interrupted (Ctrl-C, or `make stop`): the sweep stops too
        raise KeyboardInterrupt
    summary_path = runs_dir / "latest" / "summary.json"
    if rc not in (0, 1) or not summary_path.exists():  # 1: ran, but the modes differ
        return None
    run_dir = summary_path.parent.resolve()
    summary_path.parent.parent.joinpath("latest").unlink()
    try:
        if point.jobs > 1:
            return job_rows(json.loads((run_dir / "summary.json").read_text()), run_dir)
        return [(load_summary(run_dir / "summary.json"), run_dir, {})]
    except (SummaryError, KeyError, json.JSONDecodeError) as e:
        with open(log, "a") as out:
            out.write(f"hotagg sweep: {run_dir / 'summary.json'}: {e!r}\n")
        return None


def job_rows(js: dict[str, Any], run_dir: Path) -> list[tuple[Summary, Path, dict[str, Any]]]:
    """A JOBS=J run's rows: each job's Summary under the split it ran (its first), checked
    as a run's, with the run's totals and checks beside it."""
    extra = {f"jobs.{k}": v for k, v in jobs_row(cast(JobsSummary, js)).items()}
    split = js["splits"][0]
    return [
        (check_summary(job["summaries"][split], f"{run_dir} job {job['job_id']}"), run_dir,
         {"point.job": job["job_id"], **extra})
        for job in js["job_summaries"]
    ]  # fmt: skip


def row_of(
    point: Point,
    summary: Summary,
    run_dir: Path | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """results.csv's row of a run: the point, the speed-ups measured and bound, and every
    field of its summary.json (flattened), then `extra` (a job's) and where the run is."""
    model = summary.get("model")
    measured = (summary.get("speedup") or {}).get("iteration_ms")
    bound = model_speedup(model)  # with compute the iteration model's, else every link's
    return {
        **{f"point.{k}": v for k, v in point.__dict__.items()},
        "point.topo": point.topo,
        "measured_speedup": measured,
        "model_speedup": bound,
        "model_error": round(measured / bound - 1, 4) if measured and bound else None,
        "faithful": (summary.get("fidelity") or {}).get("faithful"),
        "regime": regime_text(summary.get("fidelity") or {}),
        "compute_ms": compute_ms(summary),
        "offload_staleness": mean_staleness(_staleness(summary, "offload")),
        **flatten(summary),
        **(extra or {}),
        **({"run_dir": str(run_dir)} if run_dir is not None else {}),
    }


def compute_ms(summary: Summary) -> float:
    """The mean compute per iteration COMPUTE= asks for, in the run's emulated time (a
    real: one times the run's time scale), in ms; 0 without compute. Stragglers not
    counted: this is the grid's axis, the same for every seed."""
    block = summary.get("compute")
    spec = ComputeSpec.parse(block["emulated"] if block else "")
    return round(spec.mean_ms(), 3) if spec else 0.0


def _staleness(summary: Summary, mode: str) -> dict[str, int] | None:
    measured = (summary.get("modes") or {}).get(mode)
    return measured.get("staleness") if measured else None


def mean_staleness(counts: dict[str, int] | None) -> float | None:
    """The mean staleness of the pulls the PS answered (modes.<mode>.staleness: iterations
    lacking -> pulls); None where the run recorded none."""
    if not counts or not sum(counts.values()):
        return None
    return round(sum(int(k) * n for k, n in counts.items()) / sum(counts.values()), 4)


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    columns: list[str] = []
    for row in rows:
        columns += [c for c in row if c not in columns]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, columns)
        writer.writeheader()
        writer.writerows(rows)


def _series(
    rows: list[dict[str, Any]], x: str, group: str, y: Callable[[dict], float | None]
) -> dict[Any, dict[Any, list[float]]]:
    out: dict[Any, dict[Any, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        value = y(r)
        if value is not None:
            out[r[group]][r[x]].append(value)
    return out


def _column(name: str, per: str | None = None) -> Callable[[dict], float | None]:
    """A row's value of results.csv column `name` (divided by column `per`'s)."""

    def value(row: dict) -> float | None:
        return row[name] / row[per] if per is not None else row[name]

    return value


def _values(points: Iterable[Point], attr: str) -> str:
    return ",".join(f"{v:g}" for v in sorted({getattr(p, attr) for p in points}))


def _texts(points: Iterable[Point], attr: str, separator: str) -> str:
    """A text axis's values in the grid's order, none for an empty one."""
    return separator.join(dict.fromkeys(getattr(p, attr) or "none" for p in points))


def _design(row: dict[str, Any]) -> str:
    """A row's topology (and job, in a run of several) and where it aggregates, for the
    tables."""
    return f"{_where(row)} | {row['point.aggregate']}"


def _where(row: dict[str, Any]) -> str:
    job = row.get("point.job")
    return f"{row['point.topo']} job {job} of {row['point.jobs']}" if job else row["point.topo"]


def grid_config(summaries: list[Summary], points: list[Point]) -> list[ConfigPart]:
    """The sweep's configuration line, as a run's (experiment.configline.config_parts): the items
    every run shares as they are, the ones the grid varies as their lists of values."""
    per_run = [{part.name: part for part in config_parts(s)} for s in summaries]
    names: list[str] = []
    for parts in per_run:
        names += [n for n in parts if n not in names]
    first = per_run[0] if per_run else {}
    config = (summaries[0].get("config") or {}) if summaries else {}
    shards = ":S" if any(p.shards > 1 for p in points) else ""
    workload = f"{config.get('workload', 'zipf')} workload"
    bws = _values(points, "bw")
    spines = [p for p in points if p.leaves]
    topology = (
        ConfigPart(
            "topology",
            "topology leafspine:L:H (a generated leaf-spine per point, "
            f"L {_values(spines, 'leaves')}, H {_values(spines, 'hosts_per_leaf')})",
            "leafspine:L:H",
        )
        if spines
        else ConfigPart(
            "topology", f"topology star:W{shards} (a generated star per point)", f"star:W{shards}"
        )
    )
    designs = ",".join(dict.fromkeys(p.aggregate for p in points))
    grid = {
        "topology": topology,
        "aggregate": ConfigPart("aggregate", f"aggregation {designs}", designs),
        "workers": ConfigPart("workers", f"workers {_values(points, 'workers')}", ""),
        "workload": ConfigPart(
            "workload",
            f"{workload} (skew {_values(points, 'skew')}, {config.get('keys', '?')} keys)",
            f"{config.get('workload', 'zipf')} skew {_values(points, 'skew')}",
        ),
        "links": ConfigPart(
            "links", f"links {bws} Mbit/s (BW={bws}: set)", f"{bws} Mbit/s (BW={bws})"
        ),
        "hot_slots": ConfigPart("hot_slots", f"hot slots {_values(points, 'hot_slots')}", ""),
        "loss": ConfigPart("loss", f"loss {_values(points, 'loss')}", ""),
        "seed": ConfigPart("seed", f"seeds {_values(points, 'seed')}", ""),
        "compute": ConfigPart(
            "compute",
            f"compute {_texts(points, 'compute', VALUE_SEPARATOR)}",
            f"compute {_texts(points, 'compute', VALUE_SEPARATOR)}",
        ),
        "stragglers": ConfigPart(
            "stragglers", f"stragglers {_texts(points, 'stragglers', VALUE_SEPARATOR)}", ""
        ),
        "sync": ConfigPart(
            "sync", f"SYNC={_texts(points, 'sync', ',')}", _texts(points, "sync", ",")
        ),
    }
    merged = []
    for name in names:
        texts = {parts[name].text if name in parts else None for parts in per_run}
        if name == "seed" or len(texts) > 1:
            merged.append(grid.get(name, ConfigPart(name, f"{name} varies", "")))
        else:
            merged.append(first.get(name) or next(p[name] for p in per_run if name in p))
    return merged


def speedup_vs_bound(rows: list[dict[str, Any]], path: Path, config: str) -> None:
    """Each run's measured iteration p50 speed-up against its bound: the y = x
    diagonal and the +-MODEL_TOLERANCE band around it; faithful runs filled, the others
    hollow; colour by workers, marker by skew."""
    # matplotlib takes seconds to import: only a sweep that draws pays for it
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    from experiment.plots import finish_figure

    fig, ax = plt.subplots(figsize=(6.5, 5.6))
    shown = [r for r in rows if r["measured_speedup"] and r["model_speedup"]]
    values = [v for r in shown for v in (r["measured_speedup"], r["model_speedup"])] or [1.0]
    low, high = min(1.0, min(values)) * 0.95, max(values) * 1.08
    line = np.array([low, high])
    ax.fill_between(line, line * (1 - MODEL_TOLERANCE), line * (1 + MODEL_TOLERANCE),
                    color="0.85", lw=0)  # fmt: skip
    ax.plot(line, line, color="black", lw=1)
    workers = sorted({r["point.workers"] for r in shown})
    # a marker per skew, and per design where the grid has two (ps-leaf and leaves)
    kinds = sorted({(r["point.skew"], r["point.aggregate"]) for r in shown})
    designs = {design for _, design in kinds}
    markers = "osD^vP*X"
    for r in shown:
        color = f"C{workers.index(r['point.workers']) % 10}"
        marker = markers[kinds.index((r["point.skew"], r["point.aggregate"])) % len(markers)]
        ax.plot(r["model_speedup"], r["measured_speedup"], marker, ms=7, color=color,
                mfc=color if r["faithful"] else "none", mew=1.5)  # fmt: skip
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    ax.set_aspect("equal")
    ax.set_xlabel("bound's speed-up (experiment/model.py)")
    ax.set_ylabel("measured iteration p50 speed-up (server-only / offload)")
    ax.grid(alpha=0.3)
    handles = [
        plt.Line2D([], [], color="black", lw=1, label="measured = bound"),
        Patch(color="0.85", label=f"within {MODEL_TOLERANCE:.0%} of the bound"),
        *(
            plt.Line2D([], [], ls="", marker="s", color=f"C{i % 10}", label=f"{w} workers")
            for i, w in enumerate(workers)
        ),
        *(
            plt.Line2D(
                [],
                [],
                ls="",
                marker=markers[i % len(markers)],
                color="0.3",
                label=f"skew {s:g}" + (f", {design}" if len(designs) > 1 else ""),
            )
            for i, (s, design) in enumerate(kinds)
        ),
        plt.Line2D([], [], ls="", marker="o", color="0.3", label="faithful (filled)"),
        plt.Line2D(
            [], [], ls="", marker="o", color="0.3", mfc="none", label="not network-bound (hollow)"
        ),
    ]
    faithful = [r for r in shown if r["faithful"]]
    close = [r for r in faithful if abs(r["model_error"]) <= MODEL_TOLERANCE]
    title = (
        "Measured speed-up against the bound\n"
        f"{len(close)} of {len(faithful)} faithful runs within {MODEL_TOLERANCE:.0%}"
        f" ({len(rows)} runs)"
    )
    finish_figure(fig, path, title, config, handles, ncol=3)


def _grid_ticks(ax: Any, rows: list[dict[str, Any]], column: str) -> None:
    """Ticks at the grid's values, and only there."""
    values = sorted({r[column] for r in rows})
    ax.set_xticks(values, [f"{v:g}" for v in values])


def plot(rows: list[dict[str, Any]], out: Path, config: str = "") -> list[str]:
    """The sweep's figures, headline first; returns their file names. `config`: the grid's
    configuration line, short (grid_config), in every title."""
    # matplotlib takes seconds to import: only a sweep that draws pays for it
    import matplotlib

    matplotlib.use("Agg")  # no display on a test VM or in CI
    import matplotlib.pyplot as plt

    from experiment.plots import finish_figure

    made = ["speedup_vs_bound.png"]
    speedup_vs_bound(rows, out / made[0], config)
    # the series figures are the stars' (a leaf-spine's workers follow from L and H, and its
    # designs are not one series): leaf-spine points are in speedup_vs_bound.png
    stars = [r for r in rows if not r["point.leaves"] and r.get("point.jobs", 1) == 1]
    one_ps = [r for r in stars if r["point.shards"] == 1]
    for x, group, name, xlabel in (
        ("point.workers", "point.skew", "speedup_vs_workers.png", "workers"),
        ("point.skew", "point.workers", "speedup_vs_skew.png", "Zipf skew"),
    ):

        def named(value: float, group: str = group) -> str:
            return f"skew {value:g}" if group == "point.skew" else f"{value:g} workers"

        if len({r[x] for r in one_ps}) < 2:
            continue
        fig, ax = plt.subplots(figsize=(7, 4.8))
        measured = _series(one_ps, x, group, lambda r: r["measured_speedup"])
        model = _series(one_ps, x, group, lambda r: r["model_speedup"])
        for i, key in enumerate(sorted(measured)):
            color = f"C{i}"
            xs = sorted(measured[key])
            mean = [sum(measured[key][v]) / len(measured[key][v]) for v in xs]
            ax.plot(xs, mean, "o-", color=color, label=f"measured, {named(key)}")
            ax.fill_between(
                xs,
                [min(measured[key][v]) for v in xs],
                [max(measured[key][v]) for v in xs],
                color=color,
                alpha=0.2,
            )
            unfaithful = [
                (r[x], r["measured_speedup"])
                for r in one_ps
                if r[group] == key and not r["faithful"] and r["measured_speedup"] is not None
            ]
            if unfaithful:
                ax.plot(*zip(*unfaithful), "x", color=color, ms=9)
            bx = sorted(model.get(key, {}))
            if bx:
                by = [sum(model[key][v]) / len(model[key][v]) for v in bx]
                ax.plot(bx, by, "--", color=color, label=f"bound, {named(key)}")
        if not all(r["faithful"] for r in one_ps):
            ax.plot([], [], "x", color="grey", label="run not network-bound (fidelity)")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xlabel(xlabel)
        _grid_ticks(ax, one_ps, x)
        ax.set_ylabel("iteration p50 speed-up (server-only / offload)")
        ax.grid(alpha=0.3)
        handles, _ = ax.get_legend_handles_labels()
        finish_figure(fig, out / name, f"Speed-up by {xlabel}", config, handles)
        made.append(name)

    # one job per run: several jobs' model counts no compute (make run refuses it)
    single = [r for r in rows if "point.job" not in r]
    if len({r["point.compute"] for r in single}) > 1:
        speedup_vs_compute(single, out / "speedup_vs_compute.png", config)
        made.append("speedup_vs_compute.png")
    if len({r["point.sync"] for r in single}) > 1:
        speedup_vs_staleness(single, out / "speedup_vs_staleness.png", config)
        made.append("speedup_vs_staleness.png")

    if not one_ps:
        return made
    fig, ax = plt.subplots(figsize=(7, 4.8))
    for mode, style in (("server", "o-"), ("offload", "s-")):
        per_iter = _series(
            one_ps,
            "point.workers",
            "point.skew",
            _column(f"modes.{mode}.ps_packets_in", per="iterations"),
        )
        for i, key in enumerate(sorted(per_iter)):
            xs = sorted(per_iter[key])
            ys = [sum(per_iter[key][v]) / len(per_iter[key][v]) for v in xs]
            label = f"{'server-only' if mode == 'server' else mode}, skew {key:g}"
            ax.plot(xs, ys, style, color=f"C{i}", label=label)
    ax.set_xlabel("workers")
    _grid_ticks(ax, one_ps, "point.workers")
    ax.set_ylabel("worker packets reaching the PS per iteration")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    handles, _ = ax.get_legend_handles_labels()
    finish_figure(fig, out / "ps_packets.png", "PS load by number of workers", config, handles)
    made.append("ps_packets.png")

    shard_counts = sorted({r["point.shards"] for r in stars})
    if len(shard_counts) > 1:
        fig, ax = plt.subplots(figsize=(7, 4.8))
        for i, shards in enumerate(shard_counts):
            sel = [r for r in stars if r["point.shards"] == shards]
            for mode, style in (("server", "o-"), ("offload", "s--")):
                if shards > 1 and mode == "offload":
                    continue  # the comparison: S servers without a switch, one with it
                p50s = _series(
                    sel, "point.workers", "point.shards", _column(f"modes.{mode}.iteration_ms.p50")
                )[shards]
                xs = sorted(p50s)
                label = f"{shards} PS" + (" + switch" if mode == "offload" else ", server-only")
                ax.plot(
                    xs, [sum(p50s[v]) / len(p50s[v]) for v in xs], style, color=f"C{i}", label=label
                )
        ax.set_xlabel("workers")
        _grid_ticks(ax, stars, "point.workers")
        ax.set_ylabel("iteration p50 (ms)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        handles, _ = ax.get_legend_handles_labels()
        title = "A switch or another server? Iteration time by workers"
        finish_figure(fig, out / "shards.png", title, config, handles)
        made.append("shards.png")
    return made


# A series of speedup_vs_compute.png: every point field but the compute and the seed, each
# named (in the legend) by its short name where the grid varies it.
SERIES_FIELDS = {
    "point.sync": "",
    "point.stragglers": "stragglers ",
    "point.topo": "",
    "point.aggregate": "",
    "point.workers": "W=",
    "point.skew": "skew ",
    "point.hot_slots": "slots ",
    "point.loss": "loss ",
    "point.bw": "bw ",
}


def speedup_vs_compute(rows: list[dict[str, Any]], path: Path, config: str) -> None:
    """Where offload's gain goes as compute grows: the measured iteration p50 speed-up
    (mean over seeds, the band spanning them; x where a run was not network-bound) and the
    model with compute (dashed) against the emulated compute per iteration, a line per SYNC
    mode and per any other axis the grid varies."""
    import matplotlib.pyplot as plt

    from experiment.plots import finish_figure

    shown = [r for r in rows if r["measured_speedup"] is not None]
    varied, series = compute_series(shown)
    fig, ax = plt.subplots(figsize=(7, 4.8))
    handles = []
    for i, (key, members) in enumerate(series.items()):
        color = f"C{i % 10}"
        seeds: dict[float, list[float]] = defaultdict(list)  # compute -> a value per seed
        for r in members:
            seeds[r["compute_ms"]].append(r["measured_speedup"])
        xs = sorted(seeds)
        ax.plot(xs, [float(np.mean(seeds[x])) for x in xs], "o-", color=color)
        ax.fill_between(xs, [min(seeds[x]) for x in xs], [max(seeds[x]) for x in xs],
                        color=color, alpha=0.2, lw=0)  # fmt: skip
        unfaithful = [(r["compute_ms"], r["measured_speedup"]) for r in members
                      if not r["faithful"]]  # fmt: skip
        if unfaithful:
            ax.plot(*zip(*unfaithful), "x", color=color, ms=9, mew=1.5)
        # each SYNC mode has its own model (experiment/model.py predict_iterations)
        model: dict[float, list[float]] = defaultdict(list)
        for r in members:
            if r["model_speedup"] is not None:
                model[r["compute_ms"]].append(r["model_speedup"])
        if model:
            mx = sorted(model)
            ax.plot(mx, [float(np.mean(model[x])) for x in mx], "--", color=color)
        name = ", ".join(f"{SERIES_FIELDS[c]}{_axis_value(v)}" for c, v in zip(varied, key))
        handles.append(plt.Line2D([], [], color=color, marker="o", label=name or "measured"))
    handles += [
        plt.Line2D([], [], color="0.3", label="measured (band: the seeds' range)"),
        plt.Line2D([], [], color="0.3", ls="--", label="model with compute (its SYNC mode's)"),
    ]
    if not all(r["faithful"] for r in shown):
        handles.append(
            plt.Line2D([], [], ls="", marker="x", color="0.3", label="run not network-bound")
        )
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("compute per iteration (ms, emulated; COMPUTE's mean, before stragglers)")
    _grid_ticks(ax, shown, "compute_ms")
    ax.set_ylabel("iteration p50 speed-up (server-only / offload)")
    ax.grid(alpha=0.3)
    title = "Where offload's gain goes as compute grows"
    finish_figure(fig, path, title, config, handles, ncol=3)


def compute_series(
    rows: list[dict[str, Any]],
) -> tuple[list[str], dict[tuple, list[dict[str, Any]]]]:
    """speedup_vs_compute.png's lines: the SERIES_FIELDS the rows vary, and the rows of each
    line by their values of those fields, in the grid's order."""
    varied = [c for c in SERIES_FIELDS if len({r[c] for r in rows}) > 1]
    series: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r["point.compute"]:
            series[tuple(r[c] for c in varied)].append(r)
    # a point without compute runs without stragglers (grid): it starts every stragglers'
    # line alike, so it joins each line that differs from it in stragglers alone
    for r in rows:
        if not r["point.compute"]:
            own = tuple(r[c] for c in varied)
            alike = [key for key in series if _same_but_stragglers(key, own, varied)]
            for key in alike or [own]:
                series[key].append(r)
    return varied, dict(series)


def _same_but_stragglers(key: tuple, other: tuple, fields: list[str]) -> bool:
    return all(a == b for c, a, b in zip(fields, key, other) if c != "point.stragglers")


def speedup_vs_staleness(rows: list[dict[str, Any]], path: Path, config: str) -> None:
    """Each run's measured iteration p50 speed-up against offload's mean staleness of the
    PS's pull replies: a marker per SYNC mode, a colour per compute (and stragglers where
    the grid varies them); faithful runs filled, the others hollow."""
    import matplotlib.pyplot as plt

    from experiment.plots import finish_figure

    shown = [
        r for r in rows if r["measured_speedup"] is not None and r["offload_staleness"] is not None
    ]
    syncs = list(dict.fromkeys(r["point.sync"] for r in rows))
    kinds = sorted({(r["compute_ms"], r["point.compute"], r["point.stragglers"]) for r in shown})
    stragglers = len({k[2] for k in kinds}) > 1
    markers = "osD^vP*X"
    fig, ax = plt.subplots(figsize=(7, 4.8))
    for r in shown:
        color = f"C{kinds.index((r['compute_ms'], r['point.compute'], r['point.stragglers']))}"
        ax.plot(r["offload_staleness"], r["measured_speedup"],
                markers[syncs.index(r["point.sync"]) % len(markers)], ms=8, color=color,
                mfc=color if r["faithful"] else "none", mew=1.5)  # fmt: skip
    handles = [
        *(
            plt.Line2D([], [], ls="", marker=markers[i % len(markers)], color="0.3", label=sync)
            for i, sync in enumerate(syncs)
        ),
        *(
            plt.Line2D(
                [],
                [],
                ls="",
                marker="s",
                color=f"C{i % 10}",
                label=f"compute {_axis_value(compute)}"
                + (f", stragglers {_axis_value(slow)}" if stragglers else ""),
            )
            for i, (_, compute, slow) in enumerate(kinds)
        ),
        plt.Line2D(
            [], [], ls="", marker="o", color="0.3", mfc="none", label="not network-bound (hollow)"
        ),
    ]
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("offload's mean staleness of the PS's pull replies (iterations)")
    ax.set_ylabel("iteration p50 speed-up (server-only / offload)")
    ax.set_xlim(left=-0.05)
    ax.grid(alpha=0.3)
    finish_figure(fig, path, "Speed-up against staleness", config, handles, ncol=3)


def _axis_value(value: Any) -> str:
    """A point's value in a legend: none for an empty text, numbers as %g."""
    if isinstance(value, float):
        return f"{value:g}"
    return str(value) if value != "" else "none"


def _ratio(r: dict[str, Any], q: str) -> float | None:
    server, offload = (
        r.get(f"modes.server.iteration_ms.{q}"),
        r.get(f"modes.offload.iteration_ms.{q}"),
    )
    return round(server / offload, 3) if server and offload else None


def spread_table(rows: list[dict[str, Any]]) -> list[str]:
    """Per configuration, the speed-ups over its seeds: a single run's p99 is close to its
    slowest iteration and moves between runs, so the spread is what to quote."""
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    keys = ("point.aggregate", "point.workers", "point.skew", "point.hot_slots",
            "point.loss", "point.bw", "point.shards")  # fmt: skip
    varied = _varied_axes(rows)
    for r in rows:  # a job of several is a configuration of its own
        key = (_where(r), *[r[k] for k in keys], *[r.get(c) for c, _ in TRAINING_AXES])
        groups[key].append(r)
    lines = [
        "Over seeds (median [min-max] of server-only / offload iteration times):",
        "",
        "| topology | aggregate | workers | skew | slots | loss | bw | shards | "
        + "".join(f"{header} | " for _, header in varied)
        + "seeds | p50 speed-up | p99 speed-up |",
        "|---|---|---|---|---|---|---|---|" + "---|" * len(varied) + "---|---|---|",
    ]
    for group, members in groups.items():
        cells = []
        for q in ("p50", "p99"):
            values = sorted(v for v in (_ratio(r, q) for r in members) if v is not None)
            if not values:
                cells.append("-")
                continue
            median = values[len(values) // 2] if len(values) % 2 else (
                values[len(values) // 2 - 1] + values[len(values) // 2]) / 2  # fmt: skip
            cells.append(f"{median:.2f}x [{values[0]:.2f}-{values[-1]:.2f}]")
        topo, design, w, skew, slots, loss, bw, shards = group[:8]
        lines.append(
            f"| {topo} | {design} | {w} | {skew:g} | {slots} | {loss:g} | {bw:g} | {shards} | "
            f"{_training_cells(members[0], varied)}{len(members)} | {cells[0]} | {cells[1]} |"
        )
    return lines


# The training axes (--compute, --stragglers, --sync): results.csv column, table header
TRAINING_AXES = (
    ("point.compute", "compute"),
    ("point.stragglers", "stragglers"),
    ("point.sync", "sync"),
)


def _varied_axes(rows: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The training axes the rows vary, which the tables then name (the others are in the
    configuration line)."""
    return [(c, h) for c, h in TRAINING_AXES if len({r.get(c) for r in rows}) > 1]


def _training_cells(row: dict[str, Any], varied: list[tuple[str, str]]) -> str:
    return "".join(f"{row.get(c) or 'none'} | " for c, _ in varied)


def report(
    out: Path,
    rows: list[dict[str, Any]],
    figures: list[str],
    failed: list[str],
    summaries: list[Summary],
    config: str = "",
) -> Path:
    """sweeps/<id>/report.md, built as a run's (experiment/report.py): the grid's
    configuration line, the table, the fidelity verdicts, the figures with what to read."""
    lines = [f"# Sweep {out.name}", ""]
    if config:
        lines += [config, ""]
    varied = _varied_axes(rows)
    # where SYNC varies, offload's mean staleness of the PS's pull replies beside each run
    stale = any(c == "point.sync" for c, _ in varied)
    lines += [
        "One row per run (runs/ has each run's own report.md).",
        "",
        "| topology | aggregate | workers | skew | slots | loss | bw | shards | "
        + "".join(f"{header} | " for _, header in varied)
        + "seed | p50 speed-up | bound | within 15% | regime | exact |"
        + (" offload staleness |" if stale else ""),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
        + "---|" * (len(varied) + stale),
    ]
    for r in rows:
        err = r["model_error"]
        within = "-" if err is None else ("yes" if abs(err) <= MODEL_TOLERANCE else "no")
        if not r["faithful"]:
            within = "(not faithful)"
        staleness = r.get("offload_staleness")
        lines.append(
            f"| {_design(r)} | {r['point.workers']} | {r['point.skew']:g} | "
            f"{r['point.hot_slots']} | {r['point.loss']:g} | {r['point.bw']:g} | "
            f"{r['point.shards']} | {_training_cells(r, varied)}{r['point.seed']} | "
            f"{r['measured_speedup']} | {r['model_speedup']} | {within} | "
            f"{r['regime']} | {r.get('exact')} |"
            + (f" {'-' if staleness is None else f'{staleness:.2f}'} |" if stale else "")
        )
    lines += ["", *spread_table(rows)]
    faithful = [r for r in rows if r["faithful"] and r["model_error"] is not None]
    close = [r for r in faithful if abs(r["model_error"]) <= MODEL_TOLERANCE]
    lines += [
        "",
        "## Fidelity and the bound",
        "",
        f"Faithful points within {MODEL_TOLERANCE:.0%} of the bound: "
        f"{len(close)} of {len(faithful)} (of {len(rows)} runs).",
        "",
    ]
    unfaithful = [
        (_label(r), verdict_lines(s)) for r, s in zip(rows, summaries) if not r["faithful"]
    ]
    if unfaithful:
        lines += ["Runs that were not network-bound (their numbers measure this machine):", ""]
        lines += [f"- {label}: {'; '.join(verdict)}" for label, verdict in unfaithful]
    else:
        lines.append("Every run was network-bound where its model is (faithful).")
    lines.append("")
    if failed:
        lines += ["Runs that failed (sweep.log says why):", ""]
        lines += [f"- {p}" for p in failed] + [""]
    if figures:
        lines += ["## Figures", ""]
        lines += figure_markdown([(name, CAPTIONS.get(name, "")) for name in figures])
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path


def _label(row: dict[str, Any]) -> str:
    """A row's point, as Point.label() names it."""
    return Point(*(row[f"point.{f.name}"] for f in fields(Point))).label()


def main(args: argparse.Namespace) -> int:
    try:
        points = grid(args)
        preflight(points, args)
    except (ValueError, PreflightError) as e:
        print(f"hotagg sweep: error: {e}", file=sys.stderr)
        return 2
    out = args.sweeps_dir / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True)
    latest = args.sweeps_dir / "latest"
    if latest.is_symlink() or latest.exists():
        latest.unlink()
    latest.symlink_to(out.name)
    runs_dir = out / "runs"
    log = out / "sweep.log"
    print(f"hotagg sweep: {len(points)} runs into {out} (progress in sweep.log)", flush=True)
    rows: list[dict[str, Any]] = []
    summaries: list[Summary] = []
    failed: list[str] = []
    started = time.monotonic()
    for i, point in enumerate(points, 1):
        print(f"hotagg sweep: [{i}/{len(points)}] {point.label()} ...", end=" ", flush=True)
        try:
            ran = run_point(point, args, runs_dir, log)
        except KeyboardInterrupt:
            print("interrupted; the sweep stops here", flush=True)
            failed.append(f"{point.label()} (interrupted)")
            line = join_config(grid_config(summaries, points)) if rows else ""
            report(out, rows, [], failed, summaries, line)
            return 130
        if ran is None:
            failed.append(point.label())
            print("failed (sweep.log)", flush=True)
            continue
        said = []
        for summary, run_dir, extra in ran:
            row = row_of(point, summary, run_dir, extra)
            rows.append(row)
            summaries.append(summary)
            job = f"job {extra['point.job']}: " if "point.job" in extra else ""
            said.append(
                f"{job}speed-up {row['measured_speedup']}x, bound {row['model_speedup']}x, "
                f"{row['regime']}, exact {row.get('exact')}"
            )
        elapsed = time.monotonic() - started
        left = f"({elapsed / i * (len(points) - i):.0f} s left)"
        print("; ".join([*said, left]), flush=True)
        write_csv(out / "results.csv", rows)  # after every run: a stopped sweep keeps its rows
    parts = grid_config(summaries, points)
    figures = plot(rows, out, join_config(parts, short=True)) if rows else []
    line = join_config(parts) if rows else ""
    path = report(out, rows, figures, failed, summaries, line)
    if line:
        print(f"hotagg sweep: {line}")
    print(f"hotagg sweep: report in {path} (the table, verdicts and {len(figures)} figures); "
          "results.csv has every run's numbers")  # fmt: skip
    return 0 if rows and not failed and all(r.get("exact") for r in rows) else 3
