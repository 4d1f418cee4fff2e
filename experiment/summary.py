"""A run's numbers from its phases' logs: summary.json (experiment/schema.py Summary) and
latency.csv."""

from __future__ import annotations

import csv
from collections import Counter, defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from experiment import conservation, dissection, fidelity
from experiment.results import PhaseResult, ps_rows, worker_rows
from experiment.schema import (
    SCHEMA_VERSION,
    ComputeMode,
    ComputeSummary,
    LatencySplit,
    LinkBytes,
    ModelBound,
    ModeSummary,
    OffloadHotSet,
    Quantiles,
    Summary,
    WarmupHotSet,
)
from hosts import stats
from hosts.compute import ComputeSpec

WORKER_REQUESTS = ("PUSH", "PULL", "DONE")
MODES = ("server", "offload")  # the measured phases, as summary.json's `modes` names them
LINKS_SHOWN = 4  # per mode, in report.md's table of links and link_load.png
MODE_LABELS = {"server": "server-only", "offload": "offload"}  # as tables and figures name them


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


def dissect(
    wrows: list[dict[str, str]],
    prows: list[dict[str, str]],
    link_mbps: float | None = None,
    switch_us: Mapping[str, float] | None = None,
) -> dict[str, LatencySplit]:
    """Per request kind: where a request's time goes (the IMC 2020 split). A request served
    by the PS is matched with the PS's first record of it (worker, seq); its time is PS
    queueing (arrival -> start of service), PS service (start -> reply) and the rest,
    network and switch. A request the switch answered is all network and switch. Each
    kind then gets experiment/dissection.py's components (serialization at `link_mbps`,
    None where the links do not serialize; `switch_us`: one switch pass per kind)."""
    records = dissection.ps_records(prows)
    first: dict[tuple[str, str, str], dict[str, str]] = {}
    for r in prows:
        first.setdefault((r["op"], r["worker"], r["seq"]), r)
    out: dict[str, LatencySplit] = {}
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
        rest = None if t is None or q is None or s is None else round(t - q - s, 1)
        out[kind] = {
            "requests": len(totals),
            "answered_by_switch": by_switch,
            "mean_total_us": t,
            "mean_ps_queueing_us": q,
            "mean_ps_service_us": s,
            "mean_network_and_switch_us": rest,
        }
        pass_us = (switch_us or {}).get(kind, 0.0)
        out[kind] = dissection.extend(out[kind], kind, wrows, records, link_mbps, pass_us)
    return out


def quantiles(values: list[float]) -> Quantiles:
    return {"p50": pct(values, 50), "p99": pct(values, 99), "mean": mean(values)}


def link_bytes(
    verdict: Mapping[str, Any] | None, iterations: int, model: Mapping[str, float] | None
) -> dict[str, LinkBytes]:
    """Each directed link's bytes per iteration: what its sender's interface counted over
    the phase (the fidelity verdict's `links`) beside the model's count. A phase without a
    verdict has no measurement; a run without a bound, no model."""
    measured: dict[str, float] = {}
    for row in (verdict or {}).get("links", []):
        for name, direction in (row.get("directions") or {}).items():
            measured[name] = round(direction["bytes"] / max(iterations, 1), 1)
    names = [*measured, *(n for n in model or {} if n not in measured)]
    return {
        name: {"measured": measured.get(name), "model": (model or {}).get(name)} for name in names
    }


def busiest_links(summary: Mapping[str, Any], mode: str, n: int = LINKS_SHOWN) -> list[str]:
    """The `n` directed links that carried the most bytes per iteration in `mode`, by the
    model or as measured, the model's bottleneck first."""
    table = summary["modes"][mode].get("link_bytes_per_iteration") or {}
    model = summary.get("model")
    first = [model[mode]["bottleneck"]] if model else []

    def load(name: str) -> float:
        row = table[name]
        return max(row["measured"] or 0.0, row["model"] or 0.0)

    ranked = sorted(table, key=load, reverse=True)
    return [*first, *(name for name in ranked if name not in first)][:n]


def mode_summary(
    phase: PhaseResult,
    workers: int,
    shards: int,
    agg_switches: list[str],
    model_links: Mapping[str, float] | None = None,
    iterations: int = 0,
    shared_switch: bool = False,
    link_mbps: float | None = None,
    link_serializes: bool | None = None,
    switch_pass: Mapping[str, tuple[float, int]] | None = None,
) -> ModeSummary:
    """One measured phase's numbers; `model_links`: the model's bytes per iteration on each
    directed link in this mode, `iterations`: the phase's (0: its workers' own count);
    `shared_switch`: other jobs use the same switches (their counters count those jobs too);
    `link_mbps`, `link_serializes` and `switch_pass` (per kind: µs, samples): what the
    dissection derives from (experiment/dissection.py)."""
    wrows = worker_rows(phase, workers)
    prows = ps_rows(phase, shards)
    records = dissection.ps_records(prows)
    lat: dict[str, list[float]] = defaultdict(list)
    for r in wrows:
        lat[r["kind"]].append(float(r["latency_us"]) / 1000)
    ps_in = [r for r in prows if r["op"] in WORKER_REQUESTS]
    per_iter = Counter(int(r["iteration"]) for r in ps_in)
    hot_applied = sum(phase.switch_stats[s].get("HOT_APPLIED", 0) for s in agg_switches)
    updates_total = sum(int(r["entries"]) for r in wrows if r["kind"] == "push")
    if shared_switch or any(stats.get("FLUSH", 0) for stats in phase.switch_stats.values()):
        # Aggregation at every leaf: the root's HOT_APPLIED also counts the leaves' partial
        # sums; several jobs: it counts every job's. Every update the PS did not take from a
        # worker was summed by some switch.
        from_workers = sum(p.get("counters", {}).get("cold_entries", 0) for p in phase.ps_summaries)
        hot_applied = updates_total - from_workers
    summary: ModeSummary = {
        "seconds": round(phase.seconds, 3),
        "updates_total": updates_total,
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
        "latency_dissection": dissect(
            wrows,
            prows,
            link_mbps if link_serializes else None,
            {kind: us for kind, (us, _) in (switch_pass or {}).items()},
        ),
        "latency_dissection_basis": dissection.basis(
            link_mbps,
            link_serializes,
            switch_pass or {},
            (w.get("wall_clock_drift_us", 0.0) for w in phase.worker_summaries),
        ),
        "ps_in_flight": dissection.in_flight(wrows, records),
        "switch_stats": phase.switch_stats,
        "iteration_ms": quantiles(lat["iteration"]),
        "push_ms": quantiles(lat["push"]),
        "pull_ms": quantiles(lat["pull"]),
        "link_bytes_per_iteration": link_bytes(
            phase.fidelity, iterations or max(per_iter, default=0), model_links
        ),
    }
    losses = [
        [w["losses"][t] for w in phase.worker_summaries]
        for t in range(len(phase.worker_summaries[0]["losses"]))
    ]
    stale: Counter[str] = Counter()
    for p in phase.ps_summaries:
        stale.update(p.get("staleness") or {})
    if stale:
        summary["staleness"] = {k: stale[k] for k in sorted(stale, key=int)}
    if losses and all(x is not None for row in losses for x in row):
        summary["loss_curve"] = [round(float(np.mean(row)), 6) for row in losses]
    return summary


def link_duty(model: ModelBound | None) -> dict[str, float]:
    """With compute, the share of each mode's iteration the model has the PS link busy:
    its PS-link time over the iteration model's mean (fidelity.with_compute)."""
    iteration = model.get("iteration") if model else None
    if not model or not iteration:
        return {}
    busy = {"server": model["server_ms"], "offload": model["offload_ms"]}
    modelled = {"server": iteration["server"], "offload": iteration["offload"]}
    # ssp and async: the run's time over its iterations (a worker's mean is not the pace)
    pace = {m: modelled[m].get("period_ms", modelled[m]["mean_ms"]) for m in MODES}
    return {m: busy[m] / pace[m] for m in MODES if pace[m]}


def compute_summary(config: Mapping[str, Any], phases: dict[str, PhaseResult]) -> ComputeSummary:
    """COMPUTE=, STRAGGLERS= and the time scale, and each measured phase's compute as its
    workers slept it (their summaries' `compute.ms`)."""
    spec = ComputeSpec.parse(config["compute"])
    assert spec is not None  # the caller checked COMPUTE= was given
    scale = config.get("time_scale")
    modes: dict[str, ComputeMode] = {}
    for mode in MODES:
        slept = [(w.get("compute") or {}).get("ms") or [] for w in phases[mode].worker_summaries]
        iterations = min((len(ms) for ms in slept), default=0)
        slowest = [max(ms[i] for ms in slept) for i in range(iterations)]
        modes[mode] = {
            "mean_ms": mean([x for ms in slept for x in ms]),
            "slowest_mean_ms": mean(slowest),
            "per_worker_mean_ms": [mean(ms) for ms in slept],
        }
    return {
        "compute": str(spec),
        "emulated": str(spec.scaled(scale)),
        "stragglers": config.get("stragglers"),
        "real_bw_mbps": config.get("real_bw"),
        "time_scale": scale,
        "modes": modes,
    }


def p50_ratio(server: Quantiles, offload: Quantiles) -> float | None:
    """Server-only's p50 over offload's: the speed-up."""
    a, b = server["p50"], offload["p50"]
    return round(a / b, 3) if a and b else None


def write_latency_csv(path: Path, phases: dict[str, PhaseResult], workers: int) -> None:
    cols = [
        "mode",
        "worker",
        "kind",
        "iteration",
        "seq",
        "entries",
        "ready",
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


def build_summary(
    config: dict[str, Any],
    phases: dict[str, PhaseResult],
    warmup_hot_set: WarmupHotSet,
    workers: int,
    shards: int,
    agg_switches: list[str],
    model: ModelBound | None = None,
    offload_hot_set: OffloadHotSet | None = None,
    shared_switch: bool = False,
) -> Summary:
    """summary.json of a run: its configuration, both measured phases and how they compare,
    the bound, the hot set of each phase and the fidelity verdict."""
    sha = {m: params_sha256(phases[m], shards) for m in MODES}
    # every pushed update applied once, per phase (the warm-up's too), from the raw pushes
    checked = {m: phases[m].dir for m in ("warmup", *MODES) if m in phases}
    conserved = conservation.run_verdict(checked, config, workers, shards)
    loads = {"server": model["server"], "offload": model["offload"]} if model else {}
    # One switch pass, from the requests the switch answered (offload's), for both modes.
    link_mbps = dissection.link_rate(config.get("link_bandwidth_mbps"))
    offload_rows = worker_rows(phases["offload"], workers)
    serializes = dissection.link_serializes(offload_rows, link_mbps)
    switch_pass = dissection.switch_pass_us(offload_rows, link_mbps, serializes)
    modes = {
        m: mode_summary(
            phases[m],
            workers,
            shards,
            agg_switches,
            loads[m]["links"] if loads else None,
            config["iterations"],
            shared_switch,
            link_mbps,
            serializes,
            switch_pass,
        )
        for m in MODES
    }
    s, o = modes["server"], modes["offload"]
    speedup = {
        "iteration_ms": p50_ratio(s["iteration_ms"], o["iteration_ms"]),
        "push_ms": p50_ratio(s["push_ms"], o["push_ms"]),
        "pull_ms": p50_ratio(s["pull_ms"], o["pull_ms"]),
    }
    summary: Summary = {
        "schema_version": SCHEMA_VERSION,
        "target": config["target"],
        "topology": Path(config["topo"]).name,
        "workers": workers,
        "iterations": config["iterations"],
        "seed": config["seed"],
        "workload": config["workload"],
        "loss": config["loss"],
        "hot_slots": config["hot_slots"],
        "link_bandwidth_mbps": config.get("link_bandwidth_mbps"),
        "exact": conservation.exact(sha["server"] == sha["offload"], conserved),
        "params_sha256": sha,
        "warmup_hot_set": warmup_hot_set,
        "config": config,
        "modes": modes,
        "speedup": speedup,
        "ps_packet_reduction": (
            round(1 - o["ps_packets_in"] / s["ps_packets_in"], 4) if s["ps_packets_in"] else None
        ),
        "offloaded_update_share": (
            round(o["updates_in_switch"] / o["updates_total"], 4) if o["updates_total"] else None
        ),
        # The bound of this configuration over every link and over the PS link
        # (experiment/model.py), beside what was measured.
        "model": model,
        # The offload phase's hot set per iteration against the oracle (experiment/hotset.py).
        "offload_hot_set": offload_hot_set,
        # Which resource set the pace of each measured phase (experiment/fidelity.py).
        # A saturated link that is not a PS's is faithful where the model names it too.
        "fidelity": fidelity.summarize(
            {m: phases[m].fidelity for m in MODES if phases[m].fidelity},
            {m: load["bottleneck"] for m, load in loads.items()},
            link_duty(model),
        ),
    }
    if config.get("compute"):
        summary["compute"] = compute_summary(config, phases)
    summary["conservation"] = conserved
    return summary
