"""PNG plots of a run: each mode's iteration time against the bound (the headline), the
busiest links' bytes measured against the model, latency CDFs, PS load per iteration, skew
and the hot set, the latency dissection, the training loss (lr) and the offload phase's
hot set per iteration against the oracle.

Every figure has the same frame (`finish_figure`): a title, the run's configuration shortened
(experiment.configline.short_config), the legend in a row of its own above the axes, where it
cannot hide data, and a note below them where the figure needs one to be read."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on a test VM or in CI
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.container import Container
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from contract.freqfile import read_frequency
from experiment.config import HotSetMode, HotSetSource
from experiment.configline import short_config
from experiment.dissection import basis_text as dissection_basis_text
from experiment.results import PhaseResult, worker_rows
from experiment.schema import OffloadHotSet, Summary
from experiment.summary import MODE_LABELS as LABELS
from experiment.summary import busiest_links

COLORS = {"server": "tab:red", "offload": "tab:blue"}
DPI = 110
# A linear axis reads better than a log one over less than this ratio of largest to smallest.
LOG_AXIS_RANGE = 8.0
LINK_LOAD_SHOWN = 6  # links per mode in link_load.png


def _wrap(text: str, fig: Figure, fontsize: float) -> list[str]:
    """Lines of `text` that fit the figure's width at `fontsize` (about 0.55 em a char)."""
    width = fig.get_size_inches()[0] * 72 / (0.55 * fontsize)
    return textwrap.wrap(text, max(int(width), 20)) if text else []


def finish_figure(
    fig: Figure,
    path: Path,
    title: str,
    config: str,
    handles: Sequence[Artist | Container] = (),
    ncol: int = 2,
    note: str = "",
    note_color: str = "black",
) -> None:
    """The common frame, laid out from the top down in inches so that nothing overlaps:
    title, configuration, legend row(s); the axes in what is left; a note at the bottom."""
    _, height = fig.get_size_inches()
    top = 0.08  # inches used so far from the top
    title_lines = title.count("\n") + 1
    fig.text(0.5, 1 - top / height, title, ha="center", va="top", fontsize=11)
    top += 0.2 * title_lines + 0.04
    config_lines = _wrap(config, fig, 8)
    if config_lines:
        fig.text(0.5, 1 - top / height, "\n".join(config_lines), ha="center", va="top",
                 fontsize=8, color="0.3")  # fmt: skip
        top += 0.145 * len(config_lines) + 0.04
    if handles:
        ncol = min(ncol, len(handles))
        fig.legend(
            handles=list(handles),
            loc="upper center",
            bbox_to_anchor=(0.5, 1 - top / height),
            ncol=ncol,
            fontsize=8.5,
            frameon=False,
            columnspacing=1.5,
        )
        top += 0.19 * math.ceil(len(handles) / ncol) + 0.06
    bottom = 0.0
    note_lines = _wrap(note, fig, 8)
    if note_lines:
        bottom = 0.145 * len(note_lines) + 0.1
        fig.text(0.01, 0.05 / height, "\n".join(note_lines), ha="left", va="bottom",
                 fontsize=8, color=note_color)  # fmt: skip
    fig.tight_layout(rect=(0, bottom / height, 1, 1 - top / height))
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def _latency_axis(ax: Axes, values: list[float]) -> None:
    """Log scale with plain numbers where the values span a wide range, else linear."""
    positive = [v for v in values if v > 0]
    if positive and max(positive) / min(positive) > LOG_AXIS_RANGE:
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())  # minor labels collide on short ranges


def latency_cdfs(
    path: Path, phases: dict[str, PhaseResult], workers: int, config: str = ""
) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.4))
    what = {
        "iteration": ("iteration time (ms)", "iterations"),
        "push": ("push: request to acknowledgement (ms)", "pushes"),
        "pull": ("pull: request to reply (ms)", "pulls"),
    }
    for ax, (kind, (xlabel, unit)) in zip(axes, what.items()):
        shown: list[float] = []
        for mode, phase in phases.items():
            values = [
                float(r["latency_us"]) / 1000
                for r in worker_rows(phase, workers)
                if r["kind"] == kind
            ]
            if values:
                xs = np.sort(values)
                ys = np.arange(1, len(xs) + 1) / len(xs)
                ax.plot(xs, ys, color=COLORS[mode], drawstyle="steps-post")
                shown += values
        _latency_axis(ax, shown)
        ax.axhline(0.5, color="0.5", ls=":", lw=0.8)
        ax.set_xlabel(xlabel + (", log scale" if ax.get_xscale() == "log" else ""))
        ax.set_ylabel(f"fraction of {unit}")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    handles = [plt.Line2D([], [], color=COLORS[m], label=LABELS[m]) for m in phases]
    handles.append(plt.Line2D([], [], color="0.5", ls=":", label="median"))
    finish_figure(fig, path, "Latency CDFs: server-only against switch offload", config, handles, 3)


def ps_load(path: Path, summary: Summary) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    handles = []
    for mode in ("server", "offload"):
        series = summary["modes"][mode]["ps_packets_per_iteration"]
        mean = float(np.mean(series)) if series else 0.0
        (line,) = ax.plot(
            range(1, len(series) + 1),
            series,
            marker="o",
            ms=3,
            color=COLORS[mode],
            label=f"{LABELS[mode]} (mean {mean:.0f})",
        )
        handles.append(line)
    ax.set_xlabel("iteration (measured phase)")
    ax.set_ylabel("worker packets reaching the PS")
    highest = max(summary["modes"]["server"]["ps_packets_per_iteration"], default=1)
    ax.set_ylim(0, 1.1 * max(highest, 1))
    ax.grid(alpha=0.3)
    finish_figure(fig, path, "PS load per iteration", short_config(summary), handles)


def skew(path: Path, freq_files: list[Path], summary: Summary) -> None:
    """Warm-up updates per key by rank, with what bounds the hot set: the slot budget, and
    the floor of one update per warm-up iteration (controller/hotset.py choose). The
    counts stop at workers x warm-up iterations, since a worker pushes a key at most once
    per iteration (its keys are unique, hosts/workloads/); the note says both."""
    hot = summary["warmup_hot_set"]
    config = summary.get("config") or {}
    warmup = int(config.get("warmup", 5))
    workers = int(summary.get("workers") or config.get("workers") or 1)
    budget = int(summary.get("hot_slots") or config.get("hot_slots") or 0)
    counts: dict[int, int] = {}
    for f in freq_files:
        freq = read_frequency(f)
        for key, n in zip(freq.keys.tolist(), freq.updates.tolist()):
            counts[key] = counts.get(key, 0) + n
    ranked = np.array(sorted(counts.values(), reverse=True), dtype=float)
    fig, ax = plt.subplots(figsize=(7, 5.2))
    handles: list[Artist] = []
    n_hot = hot.get("keys", 0)
    if ranked.size:
        ranks = np.arange(1, ranked.size + 1)
        handles += ax.loglog(
            ranks, ranked, color="black", lw=1.2, label="updates per key (left axis)"
        )
        share = ax.twinx()
        handles += share.semilogx(
            ranks,
            100 * np.cumsum(ranked) / ranked.sum(),
            color="tab:green",
            lw=1,
            label="cumulative share of updates (right axis)",
        )
        share.set_ylabel("cumulative share of the warm-up's updates (%)")
        share.set_ylim(0, 100)
        ceiling = workers * warmup
        handles.append(
            ax.axhline(ceiling, color="0.4", ls=":", lw=1, label=f"ceiling: {ceiling} updates")
        )
        handles.append(
            ax.axhline(warmup, color="tab:orange", ls="--", lw=1, label=f"floor: {warmup} updates")
        )
        if n_hot:
            handles.append(
                ax.axvline(
                    n_hot,
                    color="tab:blue",
                    ls="--",
                    label=f"hot set: {n_hot} keys, {hot['coverage']:.1%} of updates",
                )
            )
        if budget and budget != n_hot:
            handles.append(
                ax.axvline(
                    budget, color="tab:purple", ls="-.", lw=1, label=f"budget: {budget} slots"
                )
            )
        ax.set_xlim(0.8, 1.5 * max(ranked.size, budget))
        ax.set_ylim(0.8, 1.6 * ceiling)
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
    seen = hot.get("candidates", ranked.size)
    ax.set_xlabel(f"key rank by warm-up updates (log; {seen} keys updated)")
    ax.set_ylabel("updates in the warm-up (log)")
    ax.grid(alpha=0.3, which="major")
    why_size = (
        f"{n_hot} of the {budget} slots hold keys: a key needs {warmup} updates (one per "
        f"warm-up iteration) to be hot; rarer ones stay on the PS, since a hot slot is "
        f"collected every iteration (controller/hotset.py choose)."
        if n_hot < budget
        else f"The {budget} slots (HOT_SLOTS), not the floor, bound the hot set."
    )
    note = (
        f"The counts stop at {workers * warmup} = {workers} workers \N{MULTIPLICATION SIGN} "
        f"{warmup} warm-up iterations: a worker pushes a key at most once per iteration. "
        f"{why_size}"
    )
    finish_figure(fig, path, "Update-frequency skew and the hot set (warm-up)",
            short_config(summary), handles, note=note)  # fmt: skip


# The dissection's components (experiment/dissection.py), bottom to top, as the figure
# stacks and names them.
COMPONENT_STYLE = {
    "window": ("wait for the window (worker)", "#bcbd22"),
    "to_switch": ("to the switch (serialization, derived)", "#17becf"),
    "switch": ("in the switch (derived)", "#2ca02c"),
    "ps_link": ("PS link: queue and transmission (the rest)", "#8c564b"),
    "ps_socket": ("PS socket queue", "tab:orange"),
    "ps_held": ("held by the PS for its iteration", "#e377c2"),
    "ps_service": ("PS service", "tab:purple"),
    "back": ("back to the worker", "0.6"),
    "unsplit": ("resent or unmatched (not split)", "0.25"),
    "network_and_switch": ("network + switch", "0.55"),  # a summary without components
}


def _components(split: Mapping[str, Any], field: str) -> dict[str, float]:
    """A LatencySplit's mean components (µs) in stacking order; a summary written without
    them gives the three-part split it has."""
    comps = split.get(field)
    if comps is None:
        comps = {
            "network_and_switch": split["mean_network_and_switch_us"],
            "ps_socket": split["mean_ps_queueing_us"],
            "ps_service": split["mean_ps_service_us"],
        }
    return {name: float(comps[name] or 0.0) for name in COMPONENT_STYLE if name in comps}


def _stack(ax: Axes, xs: list[float], bars: list[dict[str, float]]) -> set[str]:
    """Stacked bars of components (ms); returns the components drawn."""
    bottom = np.zeros(len(xs))
    drawn = set()
    for name, (_, color) in COMPONENT_STYLE.items():
        heights = np.array([b.get(name, 0.0) for b in bars]) / 1000
        if not heights.any():
            continue
        ax.bar(xs, heights, bottom=bottom, color=color, width=0.8)
        bottom += heights
        drawn.add(name)
    for x, total in zip(xs, bottom):
        ax.text(x, total, f"{total:.2f}", ha="center", va="bottom", fontsize=8)
    ax.set_ylim(0, 1.15 * max(float(bottom.max()), 1e-3))
    return drawn


def dissection(path: Path, summary: Summary) -> None:
    """Where a request's time goes, per mode and kind (the IMC 2020 split, from ready to
    reply): left, the mean over every request (a request the switch answered spends no
    time at the PS); middle, the requests the PS answered, sent once; right, the PS's
    requests in flight over each phase, at the PS and toward it."""
    fig, (every, ps_path, flight) = plt.subplots(
        1, 3, figsize=(15, 5.2), gridspec_kw={"width_ratios": [1, 1, 1.3]}
    )
    modes, kinds = ("server", "offload"), ("push", "pull")
    xs, labels, whole, served = [], [], [], []
    for i, kind in enumerate(kinds):
        for j, mode in enumerate(modes):
            d = summary["modes"][mode]["latency_dissection"][kind]
            xs.append(i * 2.6 + j)
            share = d["answered_by_switch"] / d["requests"] if d["requests"] else 0.0
            labels.append(f"{kind}\n{LABELS[mode]}" + (f"\n({share:.0%} switch)" if share else ""))
            whole.append(_components(d, "components_us"))
            served.append(_components(d, "ps_served_components_us"))
    drawn = _stack(every, xs, whole) | _stack(ps_path, xs, served)
    every.set_title("every request (mean)", fontsize=10)
    ps_path.set_title("requests the PS answered, sent once (mean)", fontsize=10)
    for ax in (every, ps_path):
        ax.set_xticks(xs, labels, fontsize=8.5)
        ax.set_ylabel("ms per request, ready to reply")
        ax.grid(alpha=0.3, axis="y")
    handles: list[Artist] = [
        Patch(color=color, label=label)
        for name, (label, color) in COMPONENT_STYLE.items()
        if name in drawn
    ]
    for mode in modes:
        series = summary["modes"][mode].get("ps_in_flight")
        if not series:
            continue
        t = np.arange(len(series["at_ps"])) * series["bin_s"]
        flight.plot(t, series["to_ps"], color=COLORS[mode], lw=1.2, ls="--")
        flight.plot(t, series["at_ps"], color=COLORS[mode], lw=1.2)
        handles.append(Line2D([], [], color=COLORS[mode], label=f"{LABELS[mode]}: at the PS"))
        handles.append(
            Line2D([], [], color=COLORS[mode], ls="--", label=f"{LABELS[mode]}: toward the PS")
        )
    flight.set_xlabel("time since the phase's first request (s)")
    flight.set_ylabel("requests in flight (mean per bin)")
    flight.set_title("the PS's requests in flight", fontsize=10)
    flight.grid(alpha=0.3)
    basis = summary["modes"]["offload"].get("latency_dissection_basis")
    how = f"{dissection_basis_text(basis)} " if basis else ""
    fid = summary.get("fidelity") or {}
    if fid.get("warning"):
        regime, color = f"WARNING, {fid['warning']}", "tab:red"
    else:
        regime, color = f"regime: {fid.get('bottleneck', '?')} (both phases)", "black"
    note = (
        f"{regime}. One clock (CLOCK_REALTIME) for workers, PS and kernel. {how}"
        "At the PS: received, not yet answered; toward the PS: sent, not yet answered by it."
    )
    finish_figure(fig, path, "Where a request's time goes", short_config(summary), handles, 5,
            note=note, note_color=color)  # fmt: skip


def iteration_vs_bound(path: Path, summary: Summary) -> None:
    """The headline: each mode's iteration time (bar p50, whisker to p99) beside its bound,
    the busiest link's time (experiment/model.py, the link named on the bar), the speed-ups
    measured and bound in the title."""
    model = summary.get("model")
    modes = ("server", "offload")
    fig, ax = plt.subplots(figsize=(6.5, 4.6))
    width = 0.36
    top = 0.0
    for i, mode in enumerate(modes):
        it = summary["modes"][mode]["iteration_ms"]
        p50, p99 = it["p50"] or 0.0, it["p99"] or it["p50"] or 0.0
        x = i - width / 2 if model else i
        ax.bar(x, p50, width, color=COLORS[mode])
        ax.errorbar(x, p50, yerr=[[0.0], [max(p99 - p50, 0.0)]], color="black", capsize=5, lw=1)
        label = f"p50 {p50:.1f}\np99 {p99:.1f}"
        top = max(top, p99)
        if model:
            load = model["server"] if mode == "server" else model["offload"]
            bound = load["bound_ms"]
            above = f"{100 * (p50 / bound - 1):+.1f}% vs bound" if bound else ""
            label = f"p50 {p50:.1f}\n{above}" if bound else label
            ax.bar(i + width / 2, bound, width, color="white", edgecolor=COLORS[mode],
                   hatch="//", lw=1.2)  # fmt: skip
            ax.text(i + width / 2, bound, f"bound\n{bound:.1f}\n{load['bottleneck']}",
                    ha="center", va="bottom", fontsize=8)  # fmt: skip
            top = max(top, bound)
        ax.text(x, p99, label, ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(modes)), [LABELS[m] for m in modes])
    ax.set_xlim(-0.6, len(modes) - 0.4)
    ax.set_ylim(0, 1.3 * max(top, 1e-3))
    ax.set_ylabel("iteration time (ms)")
    ax.grid(alpha=0.3, axis="y")
    handles: list[Artist] = [
        Patch(facecolor="0.5", label="measured (solid): bar p50, whisker to p99"),
    ]
    speedup = (summary.get("speedup") or {}).get("iteration_ms")
    measured = f"measured {speedup:.2f}x (p50)" if speedup else "measured -"
    if model:
        handles.append(
            Patch(facecolor="white", edgecolor="0.3", hatch="//", label="bound (hatched)")
        )
        title = f"speed-up {measured}, bound {model['bound_speedup']:.2f}x"
        note = (
            "Bound: the busiest link (named over the bar, <sender>-<receiver>), its bytes per "
            "iteration over its rate (experiment/model.py); percentages are p50 against it."
        )
    else:
        title, note = f"speed-up {measured}", "No bound: the links have no rate."
    finish_figure(fig, path, f"Iteration time against the bound\n{title}",
            short_config(summary), handles, note=note)  # fmt: skip


def link_load(path: Path, summary: Summary) -> None:
    """Bytes per iteration on each mode's busiest links, measured beside the model's, the
    model's bottleneck first (its name marked) and the measured busiest marked too."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6), sharex=True)
    details = summary["fidelity"].get("details") or {}
    model = summary.get("model")
    bottlenecks: dict[str, str] = (
        {"server": model["server"]["bottleneck"], "offload": model["offload"]["bottleneck"]}
        if model
        else {}
    )
    height = 0.38
    for ax, mode in zip(axes, ("server", "offload")):
        table = summary["modes"][mode].get("link_bytes_per_iteration") or {}
        names = busiest_links(summary, mode, LINK_LOAD_SHOWN)
        busiest = (details.get(mode) or {}).get("busiest_link")
        for y, name in enumerate(names):
            row = table.get(name) or {"measured": None, "model": None}
            measured, modelled = row["measured"] or 0.0, row["model"] or 0.0
            ax.barh(y - height / 2, measured / 1e3, height, color=COLORS[mode])
            ax.barh(y + height / 2, modelled / 1e3, height, color="white",
                    edgecolor=COLORS[mode], hatch="//", lw=1.0)  # fmt: skip
            if measured and modelled:
                ax.text(max(measured, modelled) / 1e3, y, f" {measured / modelled:.2f}",
                        va="center", fontsize=8)  # fmt: skip
        marks = []
        for name in names:
            notes = [
                *(["model's bottleneck"] if name == bottlenecks.get(mode) else []),
                *(["busiest measured"] if name == busiest else []),
            ]
            marks.append("\n".join([name, ", ".join(notes)]) if notes else name)
        ax.set_yticks(range(len(names)), marks, fontsize=8)
        ax.invert_yaxis()  # the bottleneck on top
        ax.set_xlabel("KB per iteration")
        ax.set_title(LABELS[mode], fontsize=10)
        ax.grid(alpha=0.3, axis="x")
        ax.margins(x=0.15)
    handles: list[Artist] = [
        Patch(facecolor="0.5", label="measured (solid)"),
        Patch(facecolor="white", edgecolor="0.3", hatch="//", label="model (hatched)"),
    ]
    note = (
        "A link is <sender>-<receiver>; measured: its sender's interface's bytes over the "
        "phase, over its iterations; the number beside each pair is measured/model."
    )
    finish_figure(fig, path, "Bytes per iteration on the busiest links",
                  short_config(summary), handles, note=note)  # fmt: skip


def loss_curves(path: Path, summary: Summary) -> None:
    """Training loss per iteration (lr workload): the two modes draw the same curve where
    they push the same updates (equal parameters); under SYNC=ssp:S or async they do not."""
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    handles = []
    for mode, style in (("server", "-"), ("offload", "--")):
        curve = summary["modes"][mode]["loss_curve"]
        handles += ax.plot(
            range(1, len(curve) + 1), curve, style, color=COLORS[mode], label=LABELS[mode]
        )
    ax.set_xlabel("iteration (measured phase)")
    ax.set_ylabel("mean logistic loss of the minibatches")
    ax.grid(alpha=0.3)
    sha = summary["params_sha256"]
    same = (
        "the curves coincide" if sha["server"] == sha["offload"] else "the modes' parameters differ"
    )
    finish_figure(fig, path, f"Training loss per iteration: {same}", short_config(summary), handles)


def _drift_every(drift: str | None) -> int | None:
    if not drift:
        return None
    fields = dict(part.split("=", 1) for part in drift.split(","))
    return int(fields["every"]) if float(fields.get("fraction", 0)) > 0 else None


def coverage(path: Path, hotset: OffloadHotSet, config: str = "") -> None:
    """Achieved coverage per iteration against the hindsight oracle top-B and, where the
    workload knows its popularity, the expected oracle (experiment/hotset.py), the drift's
    epoch starts dotted; in dynamic mode a second panel: keys moved per
    re-selection (entered up, left down), at the iteration the PS files had reached; under
    drift a last one: coverage over the expected oracle by iteration since an epoch start
    (`coverage_ratio_by_epoch_offset`), how fast the set recovers when the head moves."""
    dynamic = hotset["mode"] == HotSetMode.DYNAMIC
    recovery = hotset.get("coverage_ratio_by_epoch_offset")
    heights = [2.0] + [1.0] * dynamic + [1.2] * bool(recovery)
    fig = plt.figure(figsize=(7.5, 2.0 + 1.5 * sum(heights)))
    grid = fig.add_gridspec(len(heights), 1, height_ratios=heights)
    ax = fig.add_subplot(grid[0])
    panels = [ax]  # the ones that share the iterations axis
    if dynamic:
        panels.append(fig.add_subplot(grid[1], sharex=ax))
        ax.tick_params(labelbottom=False)  # the moves panel below carries the iterations
    its = np.arange(1, len(hotset["coverage"]) + 1)
    oracle = 100 * np.array(hotset["oracle_coverage"])
    achieved = 100 * np.array(hotset["coverage"])
    handles: list[Artist | Container] = []
    best = f"oracle: best {hotset['budget']} keys of each iteration"
    handles += ax.plot(its, oracle, color="black", ls="--", lw=1, label=best)
    expected = hotset.get("expected_oracle_coverage")
    if expected and None not in expected:
        likely = f"expected oracle: the {hotset['budget']} most likely keys"
        handles += ax.plot(its, 100 * np.array(expected), color="gray", ls="-.", lw=1,
                           label=likely)  # fmt: skip
    sketch = hotset.get("source") == HotSetSource.SWITCH
    how = ", keys found by the switch's sketch" if sketch else ""
    mine = f"achieved: summed in the switch ({hotset['mode']}{how})"
    handles += ax.plot(its, achieved, marker="o", ms=3, color=COLORS["offload"], label=mine)
    every = _drift_every(hotset.get("drift"))
    if every:
        for t in range(every + 1, len(its) + 1, every):
            for a in panels:
                a.axvline(t - 0.5, color="gray", ls=":", lw=0.8)
        handles.append(plt.Line2D([], [], color="gray", ls=":", lw=0.8, label="drift epoch start"))
    ax.set_ylabel("share of the iteration's updates (%)")
    # from 0, so that the lines' distances read as shares
    ax.set_ylim(0, min(100.0, 1.15 * max(float(oracle.max(initial=0.0)), 1.0)))
    ax.grid(alpha=0.3)
    ratio = hotset.get("coverage_ratio")
    title = f"Hot-set coverage per iteration: {hotset['mode']}"
    title += f", drift {hotset['drift']}" if hotset.get("drift") else ", no drift"
    if ratio is not None:
        mean = 100 * hotset["coverage_mean"]
        title += f"\nmean {mean:.1f}% of updates, {100 * ratio:.0f}% of the oracle's"
        if (expected_ratio := hotset.get("coverage_ratio_expected")) is not None:
            title += f", {100 * expected_ratio:.0f}% of the expected one"
    if dynamic:
        mv = panels[1]
        moves = [m for m in hotset["moves"] if m["iteration"] is not None]
        x = [float(m["iteration"] or 0) for m in moves]
        handles.append(mv.bar(x, [m["added"] for m in moves], color="tab:green",
                              label="keys entered per re-selection"))  # fmt: skip
        handles.append(mv.bar(x, [-m["removed"] for m in moves], color="tab:red",
                              label="keys left per re-selection"))  # fmt: skip
        mv.axhline(0, color="black", lw=0.8)
        mv.set_ylabel("keys moved\n(in up, out down)")
        mv.grid(alpha=0.3)
    panels[-1].set_xlabel("iteration (offload phase)")
    if recovery:
        rec = fig.add_subplot(grid[-1])
        offsets = np.arange(len(recovery))
        values = [np.nan if v is None else v for v in recovery]
        rec.bar(offsets, values, color=COLORS["offload"], alpha=0.8)
        handles.append(rec.axhline(0.9, color="black", ls=":", lw=1,
                                   label="90% of the expected oracle"))  # fmt: skip
        rec.set_xticks(offsets)
        rec.set_xlabel("iteration since an epoch start (epochs after the first, pooled)")
        rec.set_ylabel("coverage /\nexpected oracle")
        rec.set_ylim(0, 1.05)
        rec.grid(alpha=0.3, axis="y")
    finish_figure(fig, path, title, config, handles, ncol=2)


def make_plots(
    run_dir: Path, summary: Summary, phases: dict[str, PhaseResult], workers: int
) -> list[str]:
    """Every figure of a run, headline first; returns their file names (experiment/report.py
    CAPTIONS says what to read from each)."""
    config = short_config(summary)
    made = ["iteration_vs_bound.png"]
    iteration_vs_bound(run_dir / made[-1], summary)
    if any(summary["modes"][m].get("link_bytes_per_iteration") for m in ("server", "offload")):
        made.append("link_load.png")
        link_load(run_dir / made[-1], summary)
    made.append("latency_cdf.png")
    latency_cdfs(run_dir / made[-1], {m: phases[m] for m in ("server", "offload")}, workers,
                 config)  # fmt: skip
    made.append("ps_load.png")
    ps_load(run_dir / made[-1], summary)
    made.append("latency_dissection.png")
    dissection(run_dir / made[-1], summary)
    warm = phases.get("warmup")
    if warm is not None:
        made.append("skew.png")
        skew(run_dir / made[-1], sorted(warm.dir.glob("freq*.csv")), summary)
    if all("loss_curve" in summary["modes"][m] for m in ("server", "offload")):
        made.append("loss_curve.png")
        loss_curves(run_dir / made[-1], summary)
    if offload_hot_set := summary.get("offload_hot_set"):
        made.append("coverage.png")
        coverage(run_dir / made[-1], offload_hot_set, config)
    return made
