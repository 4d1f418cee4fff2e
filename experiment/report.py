"""Turns a run's logs into summary.json, latency.csv, plots, the comparison table and
report.md."""

from __future__ import annotations

import csv
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from experiment import fidelity
from experiment.runner import PhaseResult, RunConfig, trace_path
from hosts import stats

if TYPE_CHECKING:
    from topologies.topology import Topology

WORKER_REQUESTS = ("PUSH", "PULL", "DONE")


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 3) if values else None


def mean(values: list[float], digits: int = 3) -> float | None:
    return round(float(np.mean(values)), digits) if values else None


def params_sha256(phase: PhaseResult, shards: int) -> str:
    """sha256 of the full parameter vector: the shards' files summed (each holds zeros for
    the keys it does not own)."""
    return stats.params_sha256(
        stats.load_params([phase.dir / f"params{i}.npy" for i in range(shards)])
    )


def logs(phase: PhaseResult, prefix: str, n: int, column: str) -> list[dict[str, str]]:
    """The rows of `<prefix>0.csv` .. `<prefix>{n-1}.csv`, each tagged with its file's index."""
    rows = []
    for i in range(n):
        for r in read_csv(phase.dir / f"{prefix}{i}.csv"):
            r[column] = str(i)
            rows.append(r)
    return rows


def worker_rows(phase: PhaseResult, workers: int) -> list[dict[str, str]]:
    return logs(phase, "w", workers, "worker")


def ps_rows(phase: PhaseResult, shards: int) -> list[dict[str, str]]:
    return logs(phase, "ps", shards, "shard")


def dissect(wrows: list[dict[str, str]], prows: list[dict[str, str]]) -> dict[str, Any]:
    """Per request kind: where a request's time goes (the IMC 2020 split). A request served
    by the PS is matched with the PS's first record of it (worker, seq); its time is PS
    queueing (arrival -> start of service), PS service (start -> reply) and the rest,
    network and switch. A request the switch answered is all network and switch."""
    first: dict[tuple[str, str, str], dict[str, str]] = {}
    for r in prows:
        first.setdefault((r["op"], r["worker"], r["seq"]), r)
    out: dict[str, Any] = {}
    for kind in ("push", "pull"):
        totals, queue, service = [], [], []
        by_switch = 0
        for r in (r for r in wrows if r["kind"] == kind):
            total = float(r["latency_us"])
            totals.append(total)
            if r["from_switch"] == "1":
                by_switch += 1
                queue.append(0.0)
                service.append(0.0)
                continue
            p = first.get((kind.upper(), r["worker"], r["seq"]))
            if p is None or not p["reply"]:
                queue.append(0.0)
                service.append(0.0)
                continue
            queue.append((float(p["start"]) - float(p["arrival"])) * 1e6)
            service.append((float(p["reply"]) - float(p["start"])) * 1e6)
        q, s, t = mean(queue, 1), mean(service, 1), mean(totals, 1)
        out[kind] = {
            "requests": len(totals),
            "answered_by_switch": by_switch,
            "mean_total_us": t,
            "mean_ps_queueing_us": q,
            "mean_ps_service_us": s,
            "mean_network_and_switch_us": None if t is None else round(t - q - s, 1),
        }
    return out


def mode_summary(phase: PhaseResult, workers: int, shards: int, agg_switches: list[str]) -> dict:
    wrows = worker_rows(phase, workers)
    prows = ps_rows(phase, shards)
    lat = defaultdict(list)
    for r in wrows:
        lat[r["kind"]].append(float(r["latency_us"]) / 1000)
    ps_in = [r for r in prows if r["op"] in WORKER_REQUESTS]
    per_iter = Counter(int(r["iteration"]) for r in ps_in)
    hot_applied = sum(phase.switch_stats[s].get("HOT_APPLIED", 0) for s in agg_switches)
    summary = {
        "seconds": round(phase.seconds, 3),
        "updates_total": sum(int(r["entries"]) for r in wrows if r["kind"] == "push"),
        "updates_in_switch": hot_applied,
        "ps_packets_in": len(ps_in),
        "ps_control_exchanges": sum(1 for r in prows if r["op"] in ("COLLECT", "WRITEBACK")),
        "retransmissions": sum(
            int(r["retransmits"] or 0) for r in wrows if r["kind"] != "iteration"
        ),
        "pulls_answered_by_switch": sum(
            1 for r in wrows if r["kind"] == "pull" and r["from_switch"] == "1"
        ),
        "ps_packets_per_iteration": [
            per_iter.get(t, 0) for t in range(1, max(per_iter, default=0) + 1)
        ],
        "latency_dissection": dissect(wrows, prows),
        "switch_stats": phase.switch_stats,
    }
    for kind, name in (("iteration", "iteration_ms"), ("push", "push_ms"), ("pull", "pull_ms")):
        summary[name] = {
            "p50": pct(lat[kind], 50),
            "p99": pct(lat[kind], 99),
            "mean": mean(lat[kind]),
        }
    losses = [
        [w["losses"][t] for w in phase.worker_summaries]
        for t in range(len(phase.worker_summaries[0]["losses"]))
    ]
    if losses and all(x is not None for row in losses for x in row):
        summary["loss_curve"] = [round(float(np.mean(row)), 6) for row in losses]
    return summary


def write_latency_csv(path: Path, phases: dict[str, PhaseResult], workers: int) -> None:
    cols = [
        "mode",
        "worker",
        "kind",
        "iteration",
        "seq",
        "entries",
        "sent",
        "reply",
        "latency_us",
        "retransmits",
        "from_switch",
    ]
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(cols)
        for mode, phase in phases.items():
            for r in worker_rows(phase, workers):
                out.writerow([mode, *(r[c] for c in cols[1:])])


def regime_hint(summary: dict) -> str | None:
    """What to change when a measured phase was not PS-link-bound (one line for the table).
    The run's numbers then measure this machine: the links must be slow enough for the PS's
    link to set the pace (README, "Which regime")."""
    fid = summary.get("fidelity") or {}
    config = summary.get("config") or {}
    kinds = set((fid.get("bottlenecks") or {}).values()) - {"ps_link"}
    rates = [r for r in config.get("link_bandwidth_mbps") or [] if r]
    lower = f"a lower BW= than {min(rates):g}" if rates else "BW= (the links have no rate)"
    binary = config.get("bmv2_binary")
    if "switch" in kinds and binary and not binary.endswith("-perf"):
        return (
            f"BMV2_BINARY=simple_switch_grpc-perf (BMv2's standard build handles under 1,000 hot "
            f"pushes/s), or {lower}"
        )
    if config.get("bw") == "auto":
        chosen = (config.get("bw_auto") or {}).get("chosen_mbps")
        return (
            f"BW=auto's short calibration phases were network-bound at {chosen:g} Mbit/s but "
            f"this run's phases were not (the machine was busier): rerun, or {lower}"
            if chosen and rates and chosen == min(rates) and chosen > 1
            else f"{lower}, or a quieter machine (fewer WORKERS, no other runs)"
        )
    return f"BW=auto (make run's default), which picks the rate by a calibration, or {lower}"


@dataclass(frozen=True)
class ConfigPart:
    """One item of the configuration line: its text in the table and report, and a short
    one for figure titles."""

    name: str
    text: str
    short: str


def _config(summary: dict) -> dict[str, Any]:
    """The run's configuration: config.json's fields, over summary.json's top level."""
    return {**summary, **(summary.get("config") or {})}


def topology_shape(topology: Topology) -> str:
    """What the topology is, for the config line: a star (one switch) or how many switches,
    and the PS shards where there are several."""
    switches = len(topology.switches)
    shape = "star" if switches == 1 else f"{switches} switches"
    shards = len(topology.parameter_servers)
    return shape + (f", {shards} PS shards" if shards > 1 else "")


def _mbps(rates: list[float | None]) -> str:
    limited = sorted({r for r in rates if r})
    text = " and ".join(f"{r:g}" for r in limited) + " Mbit/s" if limited else ""
    if None in rates or not rates:
        text += " and unlimited" if text else "unlimited"
    return text


def links_part(config: dict[str, Any]) -> ConfigPart:
    """The link rate and how it was chosen: BW=auto's calibration, BW=N, or the topology's."""
    rates = config.get("link_bandwidth_mbps") or []
    bw = config.get("bw")
    if bw == "auto":
        auto = config.get("bw_auto") or {}
        if not auto:  # the run stopped before the calibration ended
            how = "BW=auto: not calibrated"
        elif any(t.get("saturated") for t in auto.get("trials", [])):
            how = "BW=auto: calibrated, highest rate at which the PS link saturated in both modes"
        else:
            how = "BW=auto: calibrated, no rate tried saturated the PS link, so the lowest"
        short = "BW=auto"
    elif bw is not None:
        how, short = f"BW={bw:g}: set", f"BW={bw:g}"
    else:
        how, short = "the topology's own", "topology's"
    return ConfigPart("links", f"links {_mbps(rates)} ({how})", f"{_mbps(rates)} ({short})")


def workload_part(config: dict[str, Any]) -> ConfigPart:
    name = config.get("workload", "zipf")
    keys = config.get("keys", RunConfig.keys)
    if name == "trace":
        trace = trace_path(RunConfig(extra_workload_args=config.get("extra_workload_args", [])))
        shown = Path(trace).name if trace else "?"
        return ConfigPart("workload", f"trace workload ({shown}, {keys} keys)", f"trace {shown}")
    detail = f"skew {config.get('skew', RunConfig.skew):g}, {keys} keys"
    per_iter = config.get("keys_per_iter", RunConfig.keys_per_iter)
    if name == "zipf" and per_iter != RunConfig.keys_per_iter:
        detail += f", {per_iter} draws per worker and iteration"
    return ConfigPart(
        "workload",
        f"{name} workload ({detail})",
        f"{name} skew {config.get('skew', RunConfig.skew):g}",
    )


def config_parts(summary: dict) -> list[ConfigPart]:
    """The configuration line's items, in its order; the ones at their defaults (hot set,
    drift, loss, slots) are left out."""
    config = _config(summary)
    target = config.get("target", "?")
    binary = config.get("bmv2_binary")
    topology = Path(str(config.get("topo") or config.get("topology") or "?")).name
    shape = config.get("topology_shape")
    parts = [
        ConfigPart(
            "target",
            f"{target} target" + (f" ({binary})" if binary else ""),
            target + (f" ({binary})" if binary else ""),
        ),
        ConfigPart("topology", f"topology {topology}" + (f" ({shape})" if shape else ""), topology),
        ConfigPart("workers", f"{config.get('workers', '?')} workers", ""),
        ConfigPart("iterations", f"{config.get('iterations', '?')} iterations", ""),
        workload_part(config),
        links_part(config),
        ConfigPart("seed", f"seed {config.get('seed', '?')}", ""),
    ]
    slots = config.get("hot_slots", RunConfig.hot_slots)
    if slots != RunConfig.hot_slots:
        parts.append(ConfigPart("hot_slots", f"{slots} hot slots", ""))
    if config.get("hotset", RunConfig.hotset) != RunConfig.hotset:
        every = config.get("hotset_every")
        source = "the switch" if config.get("hotset_source") == "switch" else "the PS's counters"
        pace = f"every {every} iteration{'s' if every != 1 else ''}, " if every else ""
        parts.append(
            ConfigPart(
                "hotset",
                f"{config['hotset']} hot set ({pace}from {source})",
                f"{config['hotset']} hot set",
            )
        )
    if config.get("drift"):
        parts.append(ConfigPart("drift", f"drift {config['drift']}", ""))
    if config.get("loss"):
        parts.append(ConfigPart("loss", f"loss {config['loss']:g}", ""))
    return parts


def join_config(parts: list[ConfigPart], short: bool = False) -> str:
    """The configuration line of `parts` (a run's, or a sweep's grid), or its short form."""
    if short:
        return ", ".join(p.short or p.text for p in parts)
    return "config: " + ", ".join(p.text for p in parts)


def config_line(summary: dict) -> str:
    """The one line that says what ran: target (and BMv2 binary), topology, workers,
    iterations, workload, the link rate and how it was chosen, the seed, then HOT_SLOTS,
    HOTSET, DRIFT and LOSS where not at their defaults."""
    return join_config(config_parts(summary))


def short_config(summary: dict) -> str:
    """The configuration line shortened for a figure's title."""
    return join_config(config_parts(summary), short=True)


def verdict_lines(summary: dict) -> list[str]:
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


def bound_line(summary: dict) -> str | None:
    m = summary.get("model")
    if not m:
        return None
    return (
        f"PS-link bound: {m['server_ms']:.2f} ms server-only, {m['offload_ms']:.2f} ms "
        f"offload, {m['speedup']:.2f}x (experiment/model.py)"
    )


def comparison_table(summary: dict, with_config: bool = True) -> str:
    s, o = summary["modes"]["server"], summary["modes"]["offload"]

    def row(label: str, a: float | None, b: float | None, fmt: str = "{:.2f}") -> str:
        ratio = f"{a / b:.2f}x" if a and b else "-"
        fa = fmt.format(a) if a is not None else "-"
        fb = fmt.format(b) if b is not None else "-"
        return f"  {label:26s} {fa:>12s} {fb:>12s} {ratio:>9s}"

    lines = [config_line(summary)] if with_config else []
    lines.append(f"  {'':26s} {'server-only':>12s} {'offload':>12s} {'server/off':>9s}")
    for key, label in (("iteration_ms", "iteration"), ("push_ms", "push"), ("pull_ms", "pull")):
        for q in ("p50", "p99"):
            lines.append(row(f"{label} {q} (ms)", s[key][q], o[key][q]))
    for key in (
        "ps_packets_in",
        "updates_total",
        "updates_in_switch",
        "retransmissions",
        "pulls_answered_by_switch",
    ):
        lines.append(row(key, s[key], o[key], "{:d}"))
    if summary.get("hotset"):
        from experiment.hotset import table_line

        lines.append(table_line(summary["hotset"]))
    lines.append(f"  exact: {summary['exact']}  ({summary['params_sha256']['offload'][:16]}...)")
    if bound := bound_line(summary):
        lines.append(f"  {bound}")
    lines += [f"  {line}" for line in verdict_lines(summary)]
    return "\n".join(lines)


def bound_comparison(summary: dict) -> list[str]:
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


def write_markdown(run_dir: Path, summary: dict, figures: list[tuple[str, str]]) -> Path:
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


def build(
    run_dir: Path,
    config: dict,
    phases: dict[str, PhaseResult],
    hot: dict,
    workers: int,
    shards: int,
    agg_switches: list[str],
    model: dict | None = None,
    hotset: dict | None = None,
) -> dict:
    sha = {m: params_sha256(phases[m], shards) for m in ("server", "offload")}
    summary = {
        "target": config["target"],
        "topology": Path(config["topo"]).name,
        "workers": workers,
        "iterations": config["iterations"],
        "seed": config["seed"],
        "workload": config["workload"],
        "loss": config["loss"],
        "hot_slots": config["hot_slots"],  # the budget; hot_set.keys is what was used
        "link_bandwidth_mbps": config.get("link_bandwidth_mbps"),
        "exact": sha["server"] == sha["offload"],
        "params_sha256": sha,
        "hot_set": hot,
        "config": config,
        "modes": {
            m: mode_summary(phases[m], workers, shards, agg_switches) for m in ("server", "offload")
        },
    }
    s, o = summary["modes"]["server"], summary["modes"]["offload"]
    summary["speedup"] = {
        k: round(s[k]["p50"] / o[k]["p50"], 3) if s[k]["p50"] and o[k]["p50"] else None
        for k in ("iteration_ms", "push_ms", "pull_ms")
    }
    summary["ps_packet_reduction"] = (
        round(1 - o["ps_packets_in"] / s["ps_packets_in"], 4) if s["ps_packets_in"] else None
    )
    summary["offloaded_update_share"] = (
        round(o["updates_in_switch"] / o["updates_total"], 4) if o["updates_total"] else None
    )
    # The PS-link bound of this configuration (experiment/model.py), beside what was measured.
    summary["model"] = model
    # The offload phase's hot set per iteration against the oracle (experiment/hotset.py).
    summary["hotset"] = hotset
    # Which resource set the pace of each measured phase (experiment/fidelity.py).
    summary["fidelity"] = fidelity.summarize(
        {m: phases[m].fidelity for m in ("server", "offload") if phases[m].fidelity}
    )
    write_latency_csv(run_dir / "latency.csv", phases, workers)
    (run_dir / "summary.json").write_text(stats.dumps_strict(summary, indent=2) + "\n")
    from experiment.plots import make_plots

    write_markdown(run_dir, summary, make_plots(run_dir, summary, phases, workers))
    return summary
