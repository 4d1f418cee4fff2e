"""A run's outputs from its summary (experiment/summary.py): summary.json, latency.csv, the
figures (experiment/plots.py), the comparison table printed at the end, and report.md.
Everything here reads the summary as experiment/schema.py describes it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from experiment.config import HotSetMode, HotSetSource
from experiment.configline import config_line
from experiment.dissection import basis_text as dissection_basis_text
from experiment.fidelity import LINK_REGIME
from experiment.results import PhaseResult
from experiment.schema import OffloadHotSet, Summary, dumps_summary
from experiment.summary import MODE_LABELS as LABELS
from experiment.summary import MODES, busiest_links, write_latency_csv
from topologies.targets import TARGETS

# What to read from each figure: report.md's caption under it (run and sweep figures).
CAPTIONS = {
    "iteration_vs_bound.png": "Each mode's iteration time (bar p50, whisker to p99) beside "
    "its bound, the busiest link's time: in a network-bound regime each bar is within a few "
    "percent of its bound, and the measured speed-up (title) is close to the bound's.",
    "link_load.png": "Bytes per iteration on the busiest links of each mode, measured (solid) "
    "against the model (hatched), measured/model beside each pair: the model's bottleneck "
    "(on top) should be the link measured busiest, and each pair of bars about equal.",
    "latency_cdf.png": "Distribution of iteration, push and pull latency per mode: offload's "
    "curves lie left of server-only's where the switch answers or the PS link is less "
    "loaded; the dotted line marks the median.",
    "ps_load.png": "Worker packets reaching the PS per iteration: offload's line sits below "
    "by the packets of hot keys that the switch aggregates.",
    "skew.png": "Warm-up updates per key by rank and their cumulative share: the hot set is "
    "the head up to the budget or the one-update-per-iteration floor, whichever comes first.",
    "latency_dissection.png": "Where a request's mean time goes, ready to reply, stacked "
    "by component (the table above gives the numbers): left over every request, middle "
    "over those the PS answered, where the PS link's queue is what offload shortens; right, "
    "the PS's requests in flight over each phase, at the PS (received, unanswered) and "
    "toward it (sent, unanswered).",
    "loss_curve.png": "Training loss per iteration: the two modes must draw one curve, since "
    "offload changes where updates are summed, not their result.",
    "coverage.png": "Share of each iteration's updates the switch summed, against the best "
    "possible hot set of that size (the oracle); in dynamic mode, keys moved per "
    "re-selection.",
    "speedup_vs_bound.png": "Each run's measured p50 speed-up against its bound: "
    "faithful points within the shaded band are within 15% of the bound.",
    "speedup_vs_workers.png": "Measured p50 speed-up (band: the seeds' range) and the "
    "bound (dashed) as the workers grow (the star points).",
    "speedup_vs_skew.png": "Measured p50 speed-up (band: the seeds' range) and the bound "
    "(dashed) as the skew grows (the star points).",
    "ps_packets.png": "Worker packets reaching the PS per iteration in both modes, by workers "
    "and skew (the star points).",
    "shards.png": "Iteration p50 of server-only with S PS shards against one PS plus the "
    "switch: does a switch do what another server would?",
    "speedup_vs_compute.png": "Where offload's gain goes as compute grows: measured p50 "
    "speed-up (mean over seeds, band: their range; x: not network-bound) and the model with "
    "compute (dashed; synchronous, so bsp's line is the one to hold to it), a line per SYNC "
    "mode, each starting from the point without compute (and so without stragglers). "
    "Offload saves time on the PS link only, so the speed-up falls toward 1 as compute "
    "takes more of the iteration.",
    "speedup_vs_staleness.png": "Each run's p50 speed-up against offload's mean staleness of "
    "the PS's pull replies (iterations whose sums a pulled value lacked): marker by SYNC "
    "mode, colour by compute. bsp sits at 0; an ssp or async point below bsp's of its "
    "colour lost offload's gain as its workers drifted apart (the switch sums a push only "
    "into a slot copy the PS has read, the rest go to the PS: SLOT_BUSY).",
}


def unfaithful_bottlenecks(fidelity: Mapping[str, Any]) -> set[str]:
    """The bottlenecks of the phases that were not faithful (experiment/fidelity.py
    is_faithful, as summarize judged each phase)."""
    details = fidelity.get("details") or {}
    return {
        kind
        for phase, kind in (fidelity.get("bottlenecks") or {}).items()
        if kind != "ps_link" and not (details.get(phase) or {}).get("faithful")
    }


def regime_text(fidelity: Mapping[str, Any]) -> str:
    """The regime: "ps_link", or each phase's where they differ."""
    if fidelity.get("bottleneck") != "mixed":
        return str(fidelity.get("bottleneck"))
    names = {"server": "server-only"}
    return ", ".join(
        f"{names.get(phase, phase)} {kind}"
        for phase, kind in (fidelity.get("bottlenecks") or {}).items()
    )


def regime_hint(summary: Mapping[str, Any]) -> str | None:
    """What to change when a measured phase was not network-bound where the model is (one
    line for the table). The run's numbers then measure this machine: the links must be slow
    enough for a link to set the pace (README, "Which regime")."""
    fid = summary.get("fidelity") or {}
    config = summary.get("config") or {}
    kinds = unfaithful_bottlenecks(fid)
    if kinds and all(kind.startswith(LINK_REGIME) for kind in kinds):
        # Network-bound, but not on the link the model names.
        return (
            "compare each link's measured and modelled bytes (summary.json "
            "modes.<mode>.link_bytes_per_iteration, link_load.png): traffic the model does "
            "not count (retransmissions, LOSS) or link rates other than the model's"
        )
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
        return [f"regime: {regime_text(fid)} (both phases network-bound, as emulated)"]
    return []


def bound_line(summary: Mapping[str, Any]) -> str | None:
    """The table's line on the bound: the PS-link bound where the PS link is the busiest
    in both modes; else every link's bound with its bottleneck, then the PS link's."""
    m = summary.get("model")
    if not m:
        return None
    ps_link = (
        f"{m['server_ms']:.2f} ms server-only, {m['offload_ms']:.2f} ms offload, "
        f"{m['speedup']:.2f}x"
    )
    if all(m[mode]["bound_ms"] == m[f"{mode}_ms"] for mode in MODES):
        return f"PS-link bound: {ps_link} (experiment/model.py)"
    s, o = m["server"], m["offload"]
    return (
        f"bound: {s['bound_ms']:.2f} ms server-only (link {s['bottleneck']}), "
        f"{o['bound_ms']:.2f} ms offload (link {o['bottleneck']}), {m['bound_speedup']:.2f}x; "
        f"PS-link bound {ps_link} (experiment/model.py)"
    )


def compute_line(summary: Mapping[str, Any]) -> str | None:
    """The table's line on the model with compute: each mode's iteration (p50), made of
    communication and the slowest worker's compute, and the speed-up it predicts."""
    it = (summary.get("model") or {}).get("iteration")
    if not it:
        return None
    s, o = it["server"], it["offload"]
    if it.get("sync", "bsp") != "bsp":
        return sync_model_line(it)
    return (
        f"model with compute: {s['p50_ms']:.2f} ms server-only, {o['p50_ms']:.2f} ms offload, "
        f"{it['speedup']:.2f}x (p50; communication {s['communication_ms']:.2f} / "
        f"{o['communication_ms']:.2f} ms, the slowest worker's compute "
        f"{it['slowest_compute_ms']:.2f} ms, mean; experiment/model.py iteration_ms)"
    )


def model_name(iteration: Mapping[str, Any] | None) -> str:
    """How the report names the iteration model: BSP's, or that of SYNC=ssp:S or async."""
    sync = (iteration or {}).get("sync", "bsp")
    return "the model with compute" if sync == "bsp" else f"the {sync} model"


def sync_model_line(it: Mapping[str, Any]) -> str:
    """compute_line under ssp:S and async: each worker's iterations (p50 over all of them,
    as the workers log them), what the switch sums and how stale the pulls are."""
    s, o = it["server"], it["offload"]
    summed = it.get("switch_summed")
    share = "-" if summed is None else f"{100 * summed:.0f}%"
    return (
        f"{it['sync']} model: {s['p50_ms']:.2f} ms server-only, {o['p50_ms']:.2f} ms offload, "
        f"{it['speedup']:.2f}x (p50 of every worker's iterations; communication "
        f"{s['communication_ms']:.2f} / {o['communication_ms']:.2f} ms; the switch sums "
        f"{share} of the updates; pull staleness {s.get('staleness_mean')} / "
        f"{o.get('staleness_mean')}, mean; experiment/model.py worker_timelines)"
    )


def staleness_line(summary: Mapping[str, Any]) -> str | None:
    """The table's line on how stale the PS's answers to pulls were (SYNC=ssp:S, async)."""
    if summary.get("config", {}).get("sync", "bsp") == "bsp":
        return None
    parts = []
    for mode in MODES:
        hist = {int(k): n for k, n in (summary["modes"][mode].get("staleness") or {}).items()}
        total = sum(hist.values())
        if total:
            mean = sum(k * n for k, n in hist.items()) / total
            parts.append(
                f"{LABELS[mode]} mean {mean:.2f}, max {max(hist)} iterations "
                f"({100 * (total - hist.get(0, 0)) / total:.0f}% of {total} stale)"
            )
    return f"staleness of the PS's pull replies: {'; '.join(parts) or '-'}"


def conservation_line(summary: Mapping[str, Any]) -> str | None:
    """The table's line on the conservation check (experiment/conservation.py): per mode,
    whether every pushed update was applied once, and whether the modes' parameters are
    compared as well."""
    verdict = summary.get("conservation")
    if not verdict:
        return None
    parts = []
    for mode, check in verdict["modes"].items():
        label = {**LABELS, "warmup": "warm-up"}.get(mode, mode)
        if check["status"] == "conserved":
            parts.append(f"{label} {check['updates']:,} updates each applied once")
        else:
            first = check["first_differences"][:1]
            where = f"; key {first[0]['key']}: {first[0]['reading']}" if first else ""
            parts.append(f"{label} {check['status'].upper()}: {check['why']}{where}")
    compared = (
        "the modes' parameters compared too"
        if verdict["params_compared"]
        else f"the modes' parameters not compared: under SYNC={summary['config'].get('sync')} "
        f"{summary['workload']}'s pushes depend on the stale values pulled, so the modes push "
        "different updates"
    )
    return f"conservation: {'; '.join(parts)} ({compared})"


def slept_line(summary: Mapping[str, Any]) -> str | None:
    """The table's line on the compute the workers slept, per mode."""
    compute = summary.get("compute")
    if not compute:
        return None
    parts = []
    for mode in MODES:
        c = compute["modes"][mode]
        if c["mean_ms"] is not None:
            parts.append(
                f"{LABELS[mode]} {c['mean_ms']:.2f} ms (slowest worker {c['slowest_mean_ms']:.2f})"
            )
    return f"compute slept, mean per iteration: {', '.join(parts) or '-'}"


def links_line(summary: Mapping[str, Any]) -> str | None:
    """The table's line on the links: each mode's bottleneck by the model against the
    direction that ran busiest (p90 of its utilisation), as the fidelity verdict measured."""
    m = summary.get("model")
    details = (summary.get("fidelity") or {}).get("details") or {}
    parts = []
    for mode in MODES:
        verdict = details.get(mode) or {}
        busiest = verdict.get("busiest_link")
        model = m[mode]["bottleneck"] if m else "-"
        measured = f"{busiest} {verdict['busiest_link_utilization']:.0%}" if busiest else "-"
        parts.append(f"{LABELS[mode]} {model} / {measured}")
    if not m and not any(details.get(mode) for mode in MODES):
        return None
    return "busiest link (model / measured): " + ", ".join(parts)


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
    if conserved := conservation_line(summary):
        lines.append(f"  {conserved}")
    if bound := bound_line(summary):
        lines.append(f"  {bound}")
    for line in (compute_line(summary), slept_line(summary), staleness_line(summary)):
        if line:
            lines.append(f"  {line}")
    if links := links_line(summary):
        lines.append(f"  {links}")
    lines += [f"  {line}" for line in verdict_lines(summary)]
    return "\n".join(lines)


def bound_comparison(summary: Mapping[str, Any]) -> list[str]:
    """The bound beside what was measured (report.md's paragraph), and the busiest links'
    bytes measured against the model's."""
    m = summary.get("model")
    if not m:
        return [
            "No bound: a link has no rate (the topology's links are unlimited); "
            "BW=N or BW=auto gives the links a rate and the run a bound."
        ]
    modes = summary["modes"]
    it = m.get("iteration")
    measured = []
    for mode in MODES:
        p50 = modes[mode]["iteration_ms"]["p50"]
        bound = it[mode]["p50_ms"] if it else m[mode]["bound_ms"]
        versus = model_name(it) if it else "the bound"
        above = f" ({100 * (p50 / bound - 1):+.1f}% vs {versus})" if p50 and bound else ""
        measured.append(f"{LABELS[mode]} {p50:.2f} ms{above}")
    speedup = (summary.get("speedup") or {}).get("iteration_ms")
    against = (
        f"{model_name(it)}'s {it['speedup']:.2f}x"
        if it and it["speedup"]
        else f"the bound's {m['bound_speedup']:.2f}x"
    )
    return [
        f"{bound_line(summary)}.",
        "",
        *(
            [
                f"{compute_line(summary)}. Each worker computes (the run's own draws) between "
                "its pulls and its pushes; a fast worker's push overlaps a slower one's "
                "compute, so the critical path runs through the slowest worker "
                "(docs/experiment.md, Compute and stragglers).",
                "",
            ]
            if it and it.get("sync", "bsp") == "bsp"
            else [
                f"{compute_line(summary)}. Each worker runs its own iterations, paced by the "
                "PS's DONE_ACKs, and the switch answers and sums only what the two-copy "
                "rule lets it (docs/design.md section 8).",
                "",
            ]
            if it
            else []
        ),
        f"Measured iteration p50: {', '.join(measured)}; speed-up "
        + (f"{speedup:.2f}x" if speedup else "-")
        + f" against {against}.",
        "",
        "The bound is the busier direction of the busiest link (aggregation design "
        f"`{m['aggregate']}`), in bytes per iteration, over its rate; the PS-link bound is "
        "the same on the PS's link alone. Compute, the barrier's round trips and "
        "retransmissions come on top, so a network-bound run sits close to it, most often a "
        "little above.",
        "",
        *link_table(summary),
    ]


def link_table(summary: Mapping[str, Any]) -> list[str]:
    """report.md's table of the busiest links: bytes per iteration, model and measured."""
    rows = []
    for mode in MODES:
        table = summary["modes"][mode].get("link_bytes_per_iteration") or {}
        for name in busiest_links(summary, mode):
            row = table.get(name) or {"measured": None, "model": None}
            model, measured = row["model"], row["measured"]
            ratio = f"{measured / model:.2f}" if model and measured is not None else "-"
            rows.append(
                f"| {LABELS[mode]} | {name} | {_bytes(model)} | {_bytes(measured)} | {ratio} |"
            )
    if not rows:
        return []
    return [
        "Bytes per iteration on the busiest links (a link is `<sender>-<receiver>`; measured: "
        "what the sender's interface counted over the phase, over its iterations):",
        "",
        "| mode | link | model | measured | measured/model |",
        "|---|---|---|---|---|",
        *rows,
    ]


DISSECTION_COLUMNS = (
    ("window", "window"),
    ("to_switch", "to switch"),
    ("switch", "switch"),
    ("ps_link", "PS link"),
    ("ps_socket", "PS socket"),
    ("ps_held", "held"),
    ("ps_service", "service"),
    ("back", "back"),
    ("unsplit", "unsplit"),
)


def dissection_lines(summary: Mapping[str, Any]) -> list[str]:
    """report.md's dissection: each mode's and kind's mean components (µs), what the
    derived ones rest on, and the PS's requests in flight; [] for a summary without them."""
    rows = []
    for mode in MODES:
        for kind in ("push", "pull"):
            d = summary["modes"][mode]["latency_dissection"].get(kind) or {}
            comps = d.get("components_us")
            if not comps:
                return []
            cells = " | ".join(_us(comps[name]) for name, _ in DISSECTION_COLUMNS)
            rows.append(
                f"| {LABELS[mode]} | {kind} | {d['requests']} ({d['answered_by_switch']} switch, "
                f"{d['resent']} resent) | {_us(d['mean_ready_to_reply_us'])} | {cells} |"
            )
    heads = " | ".join(label for _, label in DISSECTION_COLUMNS)
    lines = [
        "Mean µs per request from ready to reply (experiment/dissection.py says how each "
        "part is measured or derived):",
        "",
        f"| mode | kind | requests | total | {heads} |",
        "|---" * (4 + len(DISSECTION_COLUMNS)) + "|",
        *rows,
        "",
    ]
    basis = summary["modes"]["offload"].get("latency_dissection_basis")
    if basis:
        drift = basis["max_wall_clock_drift_us"]
        lines.append(
            f"One clock for every timestamp: {basis['clock']} (the workers' monotonic and wall "
            f"clocks moved at most {_us(drift)} µs apart). {dissection_basis_text(basis)}"
        )
    flights = []
    for mode in MODES:
        f = summary["modes"][mode].get("ps_in_flight")
        if f:
            flights.append(
                f"{LABELS[mode]} {f['mean_at_ps']:.1f} at the PS (max {f['max_at_ps']}), "
                f"{f['mean_to_ps']:.1f} toward it (max {f['max_to_ps']})"
            )
    if flights:
        lines += [
            "",
            "The PS's requests in flight, mean over the phase: " + "; ".join(flights) + ".",
        ]
    return lines


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _bytes(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def figure_markdown(figures: list[tuple[str, str]]) -> list[str]:
    """Markdown images, each with its one-line "what to read" caption."""
    lines: list[str] = []
    for name, caption in figures:
        lines += [f"![{name}]({name})", "", f"*{caption}*", ""]
    return lines


def write_markdown(run_dir: Path, summary: Summary, figures: list[tuple[str, str]]) -> Path:
    """runs/<id>/report.md: the configuration, the table as printed, the fidelity verdict,
    the bound with the busiest links and the figures, each with what to read from it."""
    verdict = verdict_lines(summary) or ["no fidelity verdict (no measured phase had one)"]
    details = (summary.get("fidelity") or {}).get("details") or {}
    dissection = dissection_lines(summary)
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
        "## The bound",
        "",
        *bound_comparison(summary),
        "",
        *(["## Where a request's time goes", "", *dissection, ""] if dissection else []),
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
