"""PNG plots of a run: latency CDFs, PS load per iteration, skew and hot-set coverage,
the latency dissection, and the offload phase's hot set per iteration against the oracle
(with the keys moved per re-selection in dynamic mode)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display on a test VM or in CI
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from experiment.report import worker_rows
from experiment.runner import PhaseResult
from hosts.stats import read_frequency

COLORS = {"server": "tab:red", "offload": "tab:blue"}
LABELS = {"server": "server-only", "offload": "offload"}


def _cdf(ax, values: list[float], mode: str, style: str = "-") -> None:
    if not values:
        return
    xs = np.sort(values)
    ys = np.arange(1, len(xs) + 1) / len(xs)
    ax.plot(xs, ys, style, color=COLORS[mode], label=LABELS[mode])


def latency_cdfs(path: Path, phases: dict[str, PhaseResult], workers: int) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, kind in zip(axes, ("iteration", "push", "pull")):
        for mode, phase in phases.items():
            vals = [
                float(r["latency_us"]) / 1000
                for r in worker_rows(phase, workers)
                if r["kind"] == kind
            ]
            _cdf(ax, vals, mode)
        ax.set_xscale("log")
        # plain numbers, and no labels on minor ticks (they collide on narrow ranges)
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(f"{kind} latency (ms, log)")
        ax.set_ylabel("fraction")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right")
    fig.suptitle("Latency CDFs: server-only vs switch offload")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def ps_load(path: Path, summary: dict) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for mode in ("server", "offload"):
        series = summary["modes"][mode]["ps_packets_per_iteration"]
        ax.plot(
            range(1, len(series) + 1),
            series,
            marker="o",
            ms=3,
            color=COLORS[mode],
            label=LABELS[mode],
        )
    ax.set_xlabel("iteration")
    ax.set_ylabel("worker packets reaching the PS")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title("PS load per iteration")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def skew(path: Path, freq_files: list[Path], hot: dict) -> None:
    counts: dict[int, int] = {}
    for f in freq_files:
        freq = read_frequency(f)
        for key, n in zip(freq.keys.tolist(), freq.updates.tolist()):
            counts[key] = counts.get(key, 0) + n
    ranked = np.array(sorted(counts.values(), reverse=True), dtype=float)
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    if ranked.size:
        ranks = np.arange(1, ranked.size + 1)
        ax.loglog(ranks, ranked, color="black", lw=1, label="updates per key (warm-up)")
        cum = np.cumsum(ranked) / ranked.sum()
        ax2 = ax.twinx()
        ax2.semilogx(ranks, cum * 100, color="tab:green", lw=1, label="cumulative share (%)")
        ax2.set_ylabel("cumulative share of updates (%)")
        ax2.set_ylim(0, 100)
        n_hot = hot.get("keys", 0)
        if n_hot:
            ax.axvline(n_hot, color="tab:blue", ls="--")
            ax.text(
                n_hot,
                ranked[0],
                f" hot set: {n_hot} keys\n cover {hot['coverage']:.1%}",
                color="tab:blue",
                va="top",
            )
    ax.set_xlabel("key rank")
    ax.set_ylabel("updates")
    ax.set_title("Update-frequency skew and the hot set")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def dissection(path: Path, summary: dict) -> None:
    """Mean push and pull latency per mode, split into the PS's queueing, its service and
    the rest (network and switch), in ms; the PS's part is written above each bar, since in
    the emulated regime the PS's link, not its CPU, dominates and the PS's segments are
    thin. A line in the corner says which regime the run was in."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.9), sharey=False)
    parts = (
        ("mean_ps_queueing_us", "PS queueing", "tab:orange"),
        ("mean_ps_service_us", "PS service", "tab:purple"),
        ("mean_network_and_switch_us", "network + switch", "tab:gray"),
    )
    modes = ("server", "offload")
    for ax, kind in zip(axes, ("push", "pull")):
        bottom = np.zeros(2)
        ms = {
            key: np.array(
                [
                    (summary["modes"][m]["latency_dissection"][kind][key] or 0.0) / 1000
                    for m in modes
                ]
            )
            for key, _, _ in parts
        }
        for key, label, color in parts:
            ax.bar([LABELS[m] for m in modes], ms[key], bottom=bottom, color=color, label=label)
            bottom += ms[key]
        for i in range(len(modes)):
            ps = ms["mean_ps_queueing_us"][i] + ms["mean_ps_service_us"][i]
            ax.text(i, bottom[i], f"PS {ps:.2f} ms of {bottom[i]:.2f}", ha="center",
                    va="bottom", fontsize=8)  # fmt: skip
        ax.set_ylim(0, 1.18 * max(bottom.max(), 1e-3))
        ax.set_ylabel(f"mean {kind} latency (ms)")
        ax.set_title(f"{kind}: where the time goes")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right", ncol=3, fontsize=8, frameon=False)
    fid = summary.get("fidelity") or {}
    if fid.get("warning"):
        regime, color = f"WARNING, {fid['warning'][:90]}...", "tab:red"
    else:
        regime, color = f"regime: {fid.get('bottleneck', '?')} (both phases)", "black"
    fig.text(0.01, 0.99, regime, ha="left", va="top", fontsize=8, color=color)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def loss_curves(path: Path, summary: dict) -> None:
    """Training loss per iteration (lr workload): the two modes must draw the same curve."""
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for mode, style in (("server", "-"), ("offload", "--")):
        curve = summary["modes"][mode]["loss_curve"]
        ax.plot(range(1, len(curve) + 1), curve, style, color=COLORS[mode], label=LABELS[mode])
    ax.set_xlabel("iteration")
    ax.set_ylabel("mean logistic loss of the workers' batches")
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title("Training loss per iteration, both modes")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _drift_every(drift: str | None) -> int | None:
    if not drift:
        return None
    fields = dict(part.split("=", 1) for part in drift.split(","))
    return int(fields["every"]) if float(fields.get("fraction", 0)) > 0 else None


def coverage(path: Path, hotset: dict) -> None:
    """Achieved coverage per iteration against the hindsight oracle top-B and, where the
    workload knows its popularity, the expected oracle (experiment/hotset.py), the drift's
    epoch starts dotted; in dynamic mode a second panel: keys moved per
    re-selection (entered up, left down), at the iteration the PS files had reached; under
    drift a last one: coverage over the expected oracle by iteration since an epoch start
    (`coverage_ratio_by_epoch_offset`), how fast the set recovers when the head moves."""
    dynamic = hotset["mode"] == "dynamic"
    recovery = hotset.get("coverage_ratio_by_epoch_offset")
    heights = [2.0] + [1.0] * dynamic + [1.2] * bool(recovery)
    fig = plt.figure(figsize=(7, 3.6 if len(heights) == 1 else 2.4 * sum(heights)))
    grid = fig.add_gridspec(len(heights), 1, height_ratios=heights)
    ax = fig.add_subplot(grid[0])
    panels = [ax]  # the ones that share the iterations axis
    if dynamic:
        panels.append(fig.add_subplot(grid[1], sharex=ax))
        ax.tick_params(labelbottom=False)  # the moves panel below carries the iterations
    its = np.arange(1, len(hotset["coverage"]) + 1)
    oracle = 100 * np.array(hotset["oracle_coverage"])
    achieved = 100 * np.array(hotset["coverage"])
    best = f"oracle: best {hotset['budget']} keys of each iteration"
    ax.plot(its, oracle, color="black", ls="--", lw=1, label=best)
    expected = hotset.get("expected_oracle_coverage")
    if expected and None not in expected:
        likely = f"expected oracle: the {hotset['budget']} most likely keys of each iteration"
        ax.plot(its, 100 * np.array(expected), color="gray", ls="-.", lw=1, label=likely)
    how = ", keys found by the switch's sketch" if hotset.get("source") == "switch" else ""
    mine = f"achieved: summed in the switch ({hotset['mode']}{how})"
    ax.plot(its, achieved, marker="o", ms=3, color=COLORS["offload"], label=mine)
    every = _drift_every(hotset.get("drift"))
    if every:
        for t in range(every + 1, len(its) + 1, every):
            for a in panels:
                a.axvline(t - 0.5, color="gray", ls=":", lw=0.8)
    ax.set_ylabel("share of the iteration's updates (%)")
    # from 0, so that the lines' distances read as shares; room above for the legend
    ax.set_ylim(0, min(100.0, 1.4 * max(float(oracle.max(initial=0.0)), 1.0)))
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left", fontsize=8)
    ratio = hotset.get("coverage_ratio")
    title = f"Hot-set coverage per iteration: {hotset['mode']}"
    title += f", drift {hotset['drift']}" if hotset.get("drift") else ", no drift"
    if ratio is not None:
        mean = 100 * hotset["coverage_mean"]
        title += f"\nmean {mean:.1f}% of updates, {100 * ratio:.0f}% of the oracle's"
        if hotset.get("coverage_ratio_expected") is not None:
            title += f", {100 * hotset['coverage_ratio_expected']:.0f}% of the expected one"
    ax.set_title(title, fontsize=10)
    if dynamic:
        mv = panels[1]
        moves = [m for m in hotset["moves"] if m["iteration"] is not None]
        x = [m["iteration"] for m in moves]
        mv.bar(x, [m["added"] for m in moves], color="tab:green", label="entered")
        mv.bar(x, [-m["removed"] for m in moves], color="tab:red", label="left")
        mv.axhline(0, color="black", lw=0.8)
        mv.set_ylabel("keys per re-selection")
        mv.grid(alpha=0.3)
        mv.legend(loc="upper right", fontsize=8)
    panels[-1].set_xlabel("iteration (offload phase)")
    if recovery:
        rec = fig.add_subplot(grid[-1])
        offsets = np.arange(len(recovery))
        values = [np.nan if v is None else v for v in recovery]
        rec.bar(offsets, values, color=COLORS["offload"], alpha=0.8)
        rec.axhline(0.9, color="black", ls=":", lw=1, label="90% of the expected oracle")
        rec.set_xticks(offsets)
        rec.set_xlabel("iteration since an epoch start (epochs after the first, pooled)")
        rec.set_ylabel("coverage / expected")
        rec.set_ylim(0, 1.05)
        rec.grid(alpha=0.3, axis="y")
        rec.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def make_plots(run_dir: Path, summary: dict, phases: dict[str, PhaseResult], workers: int) -> None:
    measured = {m: phases[m] for m in ("server", "offload")}
    latency_cdfs(run_dir / "latency_cdf.png", measured, workers)
    ps_load(run_dir / "ps_load.png", summary)
    warm = phases.get("warmup")
    if warm is not None:
        skew(run_dir / "skew.png", sorted(warm.dir.glob("freq*.csv")), summary["hot_set"])
    dissection(run_dir / "latency_dissection.png", summary)
    if all("loss_curve" in summary["modes"][m] for m in ("server", "offload")):
        loss_curves(run_dir / "loss_curve.png", summary)
    if summary.get("hotset"):
        coverage(run_dir / "coverage.png", summary["hotset"])
