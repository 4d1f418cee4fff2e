"""`make sweep`: a grid of normal runs, one results table, plots against the analytical bound.

    python -m experiment sweep [--workers 4,8,16] [--skew 1.1,1.3] [--hot-slots 256]
        [--loss 0] [--bw 2] [--seeds 1,2] [--shards 1] [--iterations 30] [--target ...]
        [--keys N] [--workload W] [--hotset dynamic] [--drift ...] (FIXED_RUN_OPTIONS:
        make run's options, given to every run as they are)

Each point of the grid (the product of the lists) is a `python -m experiment run` of its
own, on a generated star with as many workers as the point has (`star:N`, or `star:N:S` for
S PS shards), so each point is exactly what `make run` would measure. sweeps/<id>/ gets:

- runs/: every run's directory, as make run writes it;
- results.csv: one row per run, every field of its summary.json flattened (a.b.c columns),
  plus the point's parameters and the model's bound;
- speedup_vs_workers.png, speedup_vs_skew.png: measured iteration p50 speed-up (mean over
  seeds, the band spanning the seeds) and the model's bound (dashed), configuration in the
  title; ps_packets.png: PS packets per iteration of both modes; shards.png where --shards
  has 2 or more: server-only with S PS shards against one PS plus the switch;
- report.md: the table and the plots, and for every faithful point whether the measured
  speed-up is within 15% of the model.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiment.runner import PreflightError
from topologies.switches import REPO_ROOT

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
}


@dataclass(frozen=True)
class Point:
    workers: int
    skew: float
    hot_slots: int
    loss: float
    bw: float
    seed: int
    shards: int

    @property
    def topo(self) -> str:
        return f"star:{self.workers}" + (f":{self.shards}" if self.shards > 1 else "")

    def label(self) -> str:
        return (
            f"W={self.workers} skew={self.skew:g} slots={self.hot_slots} loss={self.loss:g} "
            f"bw={self.bw:g} seed={self.seed} shards={self.shards}"
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


# `make run` options a sweep passes to every run as given (one value, not a list), by dest.
FIXED_RUN_OPTIONS = (
    "keys",
    "workload",
    "trace",
    "hotset",
    "hotset_source",
    "drift",
    "switch_restarts",
    "grpc_base_port",
    "intf_prefix",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    grid_options = parser.add_argument_group("the grid (comma-separated lists)")
    grid_options.add_argument(
        "--workers",
        type=_list(int),
        default=DEFAULTS["workers"],
        help="worker counts; each point runs on a generated star:N",
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
    every_run = parser.add_argument_group("every run")
    every_run.add_argument(
        "--iterations", type=int, default=30, help="measured iterations per mode and run"
    )
    every_run.add_argument(
        "--target",
        choices=("embedded", "bmv2"),
        default="embedded",
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
    from experiment.options import add_run_arguments

    runs = argparse.ArgumentParser(add_help=False)
    add_run_arguments(runs)
    return [a for a in runs._actions if a.dest in FIXED_RUN_OPTIONS]


def run_options(args: argparse.Namespace) -> list[str]:
    """The FIXED_RUN_OPTIONS given (those not at the run's default), as run arguments."""
    out = []
    for action in _fixed_run_actions():
        value = getattr(args, action.dest, action.default)
        if value != action.default:
            out += [action.option_strings[0], str(value)]
    return out


def run_arguments(point: Point, args: argparse.Namespace, runs_dir: Path) -> list[str]:
    """`python -m experiment run`'s arguments for one point."""
    return [
        "--target", args.target, "--topo", point.topo, "--workers", str(point.workers),
        "--iterations", str(args.iterations), "--skew", str(point.skew),
        "--hot-slots", str(point.hot_slots), "--loss", str(point.loss),
        "--bw", str(point.bw), "--seed", str(point.seed), "--runs-dir", str(runs_dir),
        *run_options(args),
    ]  # fmt: skip


def preflight(points: list[Point], args: argparse.Namespace) -> None:
    """Every point's run options, checked as `make run` checks them (each error naming its
    make variable), before the first run: a value no run can take stops the sweep now, not
    after a grid of failed runs. Raises PreflightError; a malformed value exits 2."""
    from experiment.options import OptionParser, add_run_arguments, check, config_of

    parser = OptionParser(prog="python -m experiment run")
    add_run_arguments(parser)
    for point in points:
        check(config_of(parser.parse_args(run_arguments(point, args, args.sweeps_dir))))


def grid(args: argparse.Namespace) -> list[Point]:
    for name in ("workers", "hot_slots", "seeds", "shards"):
        if any(v < 1 for v in getattr(args, name)):
            raise ValueError(f"--{name.replace('_', '-')}: values must be positive")
    if any(not 0 <= v < 1 for v in args.loss):
        raise ValueError("--loss: values must be in [0, 1)")
    if any(v <= 0 for v in args.bw) or any(not 0 <= v < 10 for v in args.skew):
        raise ValueError("--bw must be positive and --skew in [0, 10)")
    return [
        Point(*values)
        for values in itertools.product(
            args.workers, args.skew, args.hot_slots, args.loss, args.bw, args.seeds, args.shards
        )
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


def run_point(point: Point, args: argparse.Namespace, runs_dir: Path, log: Path) -> dict | None:
    """One normal run; its summary, or None (and the log says why) when it failed."""
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
    summary = json.loads(summary_path.read_text())
    summary["run_dir"] = str(summary_path.parent.resolve())
    summary_path.parent.parent.joinpath("latest").unlink()
    return summary


def row_of(point: Point, summary: dict) -> dict[str, Any]:
    model = summary.get("model") or {}
    measured = (summary.get("speedup") or {}).get("iteration_ms")
    bound = model.get("speedup")
    return {
        **{f"point.{k}": v for k, v in point.__dict__.items()},
        "measured_speedup": measured,
        "model_speedup": bound,
        "model_error": round(measured / bound - 1, 4) if measured and bound else None,
        "faithful": (summary.get("fidelity") or {}).get("faithful"),
        **flatten(summary),
    }


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


def _title(rows: list[dict[str, Any]], varying: Iterable[str], iterations: int) -> str:
    fixed = []
    for key, name in (
        ("point.hot_slots", "HOT_SLOTS"),
        ("point.loss", "LOSS"),
        ("point.bw", "BW"),
        ("point.shards", "shards"),
        ("point.skew", "SKEW"),
        ("point.workers", "WORKERS"),
    ):
        values = sorted({r[key] for r in rows})
        if key not in varying and len(values) == 1:
            fixed.append(f"{name}={values[0]:g}")
    seeds = sorted({r["point.seed"] for r in rows})
    target = rows[0].get("target", "")
    seed_list = ",".join(map(str, seeds))
    return f"{target}, {iterations} iterations, seeds {seed_list}\n" + " ".join(fixed)


def plot(rows: list[dict[str, Any]], out: Path, iterations: int) -> list[str]:
    """The sweep's figures; returns their file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    made = []
    one_ps = [r for r in rows if r["point.shards"] == 1]
    for x, group, name, xlabel in (
        ("point.workers", "point.skew", "speedup_vs_workers.png", "workers"),
        ("point.skew", "point.workers", "speedup_vs_skew.png", "Zipf skew"),
    ):
        if len({r[x] for r in one_ps}) < 2:
            continue
        fig, ax = plt.subplots(figsize=(7, 4.2))
        measured = _series(one_ps, x, group, lambda r: r["measured_speedup"])
        model = _series(one_ps, x, group, lambda r: r["model_speedup"])
        for i, key in enumerate(sorted(measured)):
            color = f"C{i}"
            xs = sorted(measured[key])
            mean = [sum(measured[key][v]) / len(measured[key][v]) for v in xs]
            ax.plot(xs, mean, "o-", color=color, label=f"measured, {group[6:]}={key:g}")
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
                ax.plot(bx, by, "--", color=color, label=f"PS-link bound, {group[6:]}={key:g}")
        ax.plot([], [], "x", color="grey", label="run not network-bound (fidelity)")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xlabel(xlabel)
        if x == "point.workers":
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("iteration p50 speed-up (server-only / offload)")
        ax.set_title(_title(one_ps, (x, group), iterations), fontsize=9)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / name, dpi=120)
        plt.close(fig)
        made.append(name)

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for mode, style in (("server", "o-"), ("offload", "s-")):
        per_iter = _series(
            one_ps,
            "point.workers",
            "point.skew",
            lambda r, m=mode: r[f"modes.{m}.ps_packets_in"] / r["iterations"],
        )
        for i, key in enumerate(sorted(per_iter)):
            xs = sorted(per_iter[key])
            ys = [sum(per_iter[key][v]) / len(per_iter[key][v]) for v in xs]
            ax.plot(xs, ys, style, color=f"C{i}", label=f"{mode}, skew={key:g}")
    ax.set_xlabel("workers")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("worker packets reaching the PS per iteration")
    ax.set_title(_title(one_ps, ("point.workers", "point.skew"), iterations), fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "ps_packets.png", dpi=120)
    plt.close(fig)
    made.append("ps_packets.png")

    shard_counts = sorted({r["point.shards"] for r in rows})
    if len(shard_counts) > 1:
        fig, ax = plt.subplots(figsize=(7, 4.2))
        for i, shards in enumerate(shard_counts):
            sel = [r for r in rows if r["point.shards"] == shards]
            for mode, style in (("server", "o-"), ("offload", "s--")):
                if shards > 1 and mode == "offload":
                    continue  # the comparison: S servers without a switch, one with it
                ys = _series(
                    sel,
                    "point.workers",
                    "point.shards",
                    lambda r, m=mode: r[f"modes.{m}.iteration_ms.p50"],
                )[shards]
                xs = sorted(ys)
                label = f"{shards} PS" + (" + switch" if mode == "offload" else ", server-only")
                ax.plot(
                    xs, [sum(ys[v]) / len(ys[v]) for v in xs], style, color=f"C{i}", label=label
                )
        ax.set_xlabel("workers")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("iteration p50 (ms)")
        ax.set_title(
            "a switch or another server? " + _title(rows, ("point.workers",), iterations),
            fontsize=9,
        )
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "shards.png", dpi=120)
        plt.close(fig)
        made.append("shards.png")
    return made


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
    keys = ("point.workers", "point.skew", "point.hot_slots", "point.loss", "point.bw",
            "point.shards")  # fmt: skip
    for r in rows:
        groups[tuple(r[k] for k in keys)].append(r)
    lines = [
        "Over seeds (median [min-max] of server-only / offload iteration times):",
        "",
        "| workers | skew | slots | loss | bw | shards | seeds | p50 speed-up | p99 speed-up |",
        "|---|---|---|---|---|---|---|---|---|",
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
        w, skew, slots, loss, bw, shards = group
        lines.append(
            f"| {w} | {skew:g} | {slots} | {loss:g} | {bw:g} | {shards} | {len(members)} | "
            f"{cells[0]} | {cells[1]} |"
        )
    return lines


def report(out: Path, rows: list[dict[str, Any]], figures: list[str], failed: list[str]) -> None:
    lines = [f"# Sweep {out.name}", "", "One row per run (runs/ has each run's own report).", ""]
    lines.append(
        "| workers | skew | slots | loss | bw | shards | seed | p50 speed-up | bound | "
        "within 15% | regime | exact |"
    )
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        err = r["model_error"]
        within = "-" if err is None else ("yes" if abs(err) <= MODEL_TOLERANCE else "no")
        if not r["faithful"]:
            within = "(not faithful)"
        lines.append(
            f"| {r['point.workers']} | {r['point.skew']:g} | {r['point.hot_slots']} | "
            f"{r['point.loss']:g} | {r['point.bw']:g} | {r['point.shards']} | {r['point.seed']} | "
            f"{r['measured_speedup']} | {r['model_speedup']} | {within} | "
            f"{r.get('fidelity.bottleneck')} | {r.get('exact')} |"
        )
    lines += ["", *spread_table(rows)]
    faithful = [r for r in rows if r["faithful"] and r["model_error"] is not None]
    close = [r for r in faithful if abs(r["model_error"]) <= MODEL_TOLERANCE]
    lines += [
        "",
        f"Faithful points within {MODEL_TOLERANCE:.0%} of the PS-link bound: "
        f"{len(close)} of {len(faithful)} (of {len(rows)} runs).",
        "",
    ]
    if failed:
        lines += ["Runs that failed (sweep.log says why):", ""]
        lines += [f"- {p}" for p in failed] + [""]
    for name in figures:
        lines += [f"![{name}]({name})", ""]
    (out / "report.md").write_text("\n".join(lines))


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
    rows, failed = [], []
    started = time.monotonic()
    for i, point in enumerate(points, 1):
        print(f"hotagg sweep: [{i}/{len(points)}] {point.label()} ...", end=" ", flush=True)
        try:
            summary = run_point(point, args, runs_dir, log)
        except KeyboardInterrupt:
            print("interrupted; the sweep stops here", flush=True)
            report(out, rows, [], [*failed, f"{point.label()} (interrupted)"])
            return 130
        if summary is None:
            failed.append(point.label())
            print("failed (sweep.log)", flush=True)
            continue
        row = row_of(point, summary)
        rows.append(row)
        elapsed = time.monotonic() - started
        print(
            f"speed-up {row['measured_speedup']}x, bound {row['model_speedup']}x, "
            f"{row.get('fidelity.bottleneck')}, exact {row.get('exact')} "
            f"({elapsed / i * (len(points) - i):.0f} s left)",
            flush=True,
        )
        write_csv(out / "results.csv", rows)  # after every run: a stopped sweep keeps its rows
    figures = plot(rows, out, args.iterations) if rows else []
    report(out, rows, figures, failed)
    print(f"hotagg sweep: results.csv, report.md and {len(figures)} plots in {out}")
    return 0 if rows and not failed and all(r.get("exact") for r in rows) else 3
