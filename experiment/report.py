"""A run's outputs from its summary (experiment/summary.py): summary.json, latency.csv, the
figures (experiment/plots.py), the comparison table printed at the end, and report.md.
Everything here reads the summary as experiment/schema.py describes it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from experiment.config import HotSetMode, HotSetSource
from experiment.configline import config_line
from experiment.results import PhaseResult
from experiment.schema import OffloadHotSet, Summary, dumps_summary
from experiment.summary import write_latency_csv
from topologies.targets import TARGETS

# What to read from each figure: report.md's caption under it (run and sweep figures).
CAPTIONS = {
    "iteration_vs_bound.png": "Each mode's iteration time (bar p50, whisker to p99) beside "
    "its PS-link bound: in the ps_link regime each bar is within a few percent of its bound, "
    "and the measured speed-up (title) is close to the bound's.",
    "latency_cdf.png": "Distribution of iteration, push and pull latency per mode: offload's "
    "curves lie left of server-only's where the switch answers or the PS link is less "
    "loaded; the dotted line marks the median.",
    "ps_load.png": "Worker packets reaching the PS per iteration: offload's line sits below "
    "by the packets of hot keys that the switch aggregates.",
    "skew.png": "Warm-up updates per key by rank and their cumulative share: the hot set is "
    "the head up to the budget or the one-update-per-iteration floor, whichever comes first.",
    "latency_dissection.png": "Where a request's mean time goes: left, the whole request "
    "(mostly the network and switch, where offload saves time); right, the PS's queueing "
    "and service on their own scale.",
    "loss_curve.png": "Training loss per iteration: the two modes must draw one curve, since "
    "offload changes where updates are summed, not their result.",
    "coverage.png": "Share of each iteration's updates the switch summed, against the best "
    "possible hot set of that size (the oracle); in dynamic mode, keys moved per "
    "re-selection.",
    "speedup_vs_bound.png": "Each run's measured p50 speed-up against its PS-link bound: "
    "faithful points within the shaded band are within 15% of the bound.",
    "speedup_vs_workers.png": "Measured p50 speed-up (band: the seeds' range) and the "
    "PS-link bound (dashed) as the workers grow.",
    "speedup_vs_skew.png": "Measured p50 speed-up (band: the seeds' range) and the PS-link "
    "bound (dashed) as the skew grows.",
    "ps_packets.png": "Worker packets reaching the PS per iteration in both modes, by workers "
    "and skew.",
    "shards.png": "Iteration p50 of server-only with S PS shards against one PS plus the "
    "switch: does a switch do what another server would?",
}


def regime_hint(summary: Mapping[str, Any]) -> str | None:
    """What to change when a measured phase was not PS-link-bound (one line for the table).
    The run's numbers then measure this machine: the links must be slow enough for the PS's
    link to set the pace (README, "Which regime")."""
    fid = summary.get("fidelity") or {}
    config = summary.get("config") or {}
    kinds = set((fid.get("bottlenecks") or {}).values()) - {"ps_link"}
    rates = [r for r in config.get("link_bandwidth_mbps") or [] if r]
    lower = f"a lower BW= than {min(rates):g}" if rates else "BW= (the links have no rate)"
    target = TARGETS.get(str(config.get("target")))
    if "switch" in kinds and target is not None and (note := target.cost_note(config)):
        return f"{note}, or {lower}"  # the switch's build costs more than the link rate
    if config.get("bw") == "auto":
        chosen = (config.get("bw_auto") or {}).get("chosen_mbps")
        return (
            f"BW=auto's short calibration phases were network-bound at {chosen:g} Mbit/s but "
            f"this run's phases were not (the machine was busier): rerun, or {lower}"
            if chosen and rates and chosen == min(rates) and chosen > 1
            else f"{lower}, or a quieter machine (fewer WORKERS, no other runs)"
        )
    return f"BW=auto (make run's default), which picks the rate by a calibration, or {lower}"


def verdict_lines(summary: Mapping[str, Any]) -> list[str]:
    """The fidelity verdict: the regime, or the WARNING and what to try."""
    fid = summary.get("fidelity") or {}
    if fid.get("warning"):
        lines = [f"WARNING, {fid['warning']}"]
        if hint := regime_hint(summary):
            lines.append(f"what to try: {hint}")
        return lines
    if fid.get("bottleneck"):
        return [f"regime: {fid['bottleneck']} (both phases network-bound, as emulated)"]
    return []


def bound_line(summary: Mapping[str, Any]) -> str | None:
    m = summary.get("model")
    if not m:
        return None
    return (
        f"PS-link bound: {m['server_ms']:.2f} ms server-only, {m['offload_ms']:.2f} ms "
        f"offload, {m['speedup']:.2f}x (experiment/model.py)"
    )


def hot_set_line(hotset: OffloadHotSet) -> str:
    """The comparison table's one line on the offload phase's hot set."""
    detail = f", drift {hotset['drift']}" if hotset.get("drift") else ""
    if hotset.get("source") == HotSetSource.SWITCH:
        detail += ", measured by the switch"
    ratio = hotset.get("coverage_ratio")
    text = (
        f"  hot set ({hotset['mode']}{detail}): coverage {100 * hotset['coverage_mean']:.1f}% "
        f"of updates, oracle top-{hotset['budget']} {100 * hotset['oracle_coverage_mean']:.1f}%"
        + (f" ({100 * ratio:.0f}% of it)" if ratio is not None else "")
    )
    expected, expected_ratio = (
        hotset.get("expected_oracle_coverage_mean"),
        hotset.get("coverage_ratio_expected"),
    )
    if expected is not None and expected_ratio is not None:
        text += (
            f", expected top-{hotset['budget']} {100 * expected:.1f}% "
            f"({100 * expected_ratio:.0f}% of it)"
        )
    if hotset["mode"] == HotSetMode.DYNAMIC:
        # keys_moved counts each move (in or out): a swap is two
        entered = sum(m["added"] for m in hotset["moves"])
        left = sum(m["removed"] for m in hotset["moves"])
        n = hotset["reselections"]
        text += (
            f"; {hotset['keys_moved']} keys moved ({entered} in, {left} out) in {n} "
            f"re-selection{'s' if n != 1 else ''}"
        )
    return text


def comparison_table(summary: Summary, with_config: bool = True) -> str:
    s, o = summary["modes"]["server"], summary["modes"]["offload"]

    def row(label: str, a: float | None, b: float | None, fmt: str = "{:.2f}") -> str:
        ratio = f"{a / b:.2f}x" if a and b else "-"
        fa = fmt.format(a) if a is not None else "-"
        fb = fmt.format(b) if b is not None else "-"
        return f"  {label:26s} {fa:>12s} {fb:>12s} {ratio:>9s}"

    lines = [config_line(summary)] if with_config else []
    lines.append(f"  {'':26s} {'server-only':>12s} {'offload':>12s} {'server/off':>9s}")
    latencies = (
        ("iteration", s["iteration_ms"], o["iteration_ms"]),
        ("push", s["push_ms"], o["push_ms"]),
        ("pull", s["pull_ms"], o["pull_ms"]),
    )
    for label, a, b in latencies:
        lines.append(row(f"{label} p50 (ms)", a["p50"], b["p50"]))
        lines.append(row(f"{label} p99 (ms)", a["p99"], b["p99"]))
    counts = (
        ("ps_packets_in", s["ps_packets_in"], o["ps_packets_in"]),
        ("updates_total", s["updates_total"], o["updates_total"]),
        ("updates_in_switch", s["updates_in_switch"], o["updates_in_switch"]),
        ("retransmissions", s["retransmissions"], o["retransmissions"]),
        ("pulls_answered_by_switch", s["pulls_answered_by_switch"], o["pulls_answered_by_switch"]),
    )
    for label, n_server, n_offload in counts:
        lines.append(row(label, n_server, n_offload, "{:d}"))
    if offload_hot_set := summary.get("offload_hot_set"):
        lines.append(hot_set_line(offload_hot_set))
    lines.append(f"  exact: {summary['exact']}  ({summary['params_sha256']['offload'][:16]}...)")
    if bound := bound_line(summary):
        lines.append(f"  {bound}")
    lines += [f"  {line}" for line in verdict_lines(summary)]
    return "\n".join(lines)


def bound_comparison(summary: Mapping[str, Any]) -> list[str]:
    """The PS-link bound beside what was measured (report.md's paragraph)."""
    m = summary.get("model")
    if not m:
        return [
            "No PS-link bound: a link has no rate (the topology's links are unlimited); "
            "BW=N or BW=auto gives the links a rate and the run a bound."
        ]
    modes = summary["modes"]
    measured = []
    for mode, label in (("server", "server-only"), ("offload", "offload")):
        p50, bound = modes[mode]["iteration_ms"]["p50"], m[f"{mode}_ms"]
        above = f" ({100 * (p50 / bound - 1):+.1f}% vs the bound)" if p50 and bound else ""
        measured.append(f"{label} {p50:.2f} ms{above}")
    speedup = (summary.get("speedup") or {}).get("iteration_ms")
    return [
        f"{bound_line(summary)}.",
        "",
        f"Measured iteration p50: {', '.join(measured)}; speed-up "
        + (f"{speedup:.2f}x" if speedup else "-")
        + f" against the bound's {m['speedup']:.2f}x.",
        "",
        "The bound is the busier direction of the busiest PS link, in bytes per iteration, "
        "over its rate. Compute, the barrier's round trips and retransmissions come on top, "
        "so a run in the ps_link regime sits close to it, most often a little above.",
    ]


def figure_markdown(figures: list[tuple[str, str]]) -> list[str]:
    """Markdown images, each with its one-line "what to read" caption."""
    lines: list[str] = []
    for name, caption in figures:
        lines += [f"![{name}]({name})", "", f"*{caption}*", ""]
    return lines


def write_markdown(run_dir: Path, summary: Summary, figures: list[tuple[str, str]]) -> Path:
    """runs/<id>/report.md: the configuration, the table as printed, the fidelity verdict,
    the PS-link bound and the figures, each with what to read from it."""
    verdict = verdict_lines(summary) or ["no fidelity verdict (no measured phase had one)"]
    details = (summary.get("fidelity") or {}).get("details") or {}
    lines = [
        f"# Run {run_dir.name}",
        "",
        config_line(summary),
        "",
        "```text",
        comparison_table(summary, with_config=False),
        "```",
        "",
        "## Fidelity",
        "",
        *(f"{line}\n" for line in verdict),
        *(f"- {phase}: {v['bottleneck']}, {v['why']}" for phase, v in details.items()),
        "",
        "## PS-link bound",
        "",
        *bound_comparison(summary),
        "",
        "## Figures",
        "",
        *figure_markdown(figures),
        "Files: config.json (the options), summary.json (every number above), latency.csv "
        "(one row per request), and each phase's logs in its folder.",
        "",
    ]
    path = run_dir / "report.md"
    path.write_text("\n".join(lines))
    return path


def write_outputs(
    run_dir: Path, summary: Summary, phases: dict[str, PhaseResult], workers: int
) -> None:
    """Every output of a run in `run_dir`: summary.json, latency.csv, the figures and
    report.md (the summary: experiment/summary.py build_summary)."""
    write_latency_csv(run_dir / "latency.csv", phases, workers)
    (run_dir / "summary.json").write_text(dumps_summary(summary))
    # matplotlib takes seconds to import: only a run that draws its figures pays for it
    from experiment.plots import make_plots

    figures = make_plots(run_dir, summary, phases, workers)
    write_markdown(run_dir, summary, [(name, CAPTIONS[name]) for name in figures])
