"""Turns a run's logs into summary.json, latency.csv, plots and the comparison table."""

from __future__ import annotations

import csv
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from experiment import fidelity
from experiment.runner import PhaseResult
from hosts import stats

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


def comparison_table(summary: dict) -> str:
    s, o = summary["modes"]["server"], summary["modes"]["offload"]

    def row(label: str, a: float | None, b: float | None, fmt: str = "{:.2f}") -> str:
        ratio = f"{a / b:.2f}x" if a and b else "-"
        fa = fmt.format(a) if a is not None else "-"
        fb = fmt.format(b) if b is not None else "-"
        return f"  {label:26s} {fa:>12s} {fb:>12s} {ratio:>9s}"

    lines = [f"  {'':26s} {'server-only':>12s} {'offload':>12s} {'server/off':>9s}"]
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
    if summary.get("model"):
        m = summary["model"]
        lines.append(
            f"  PS-link bound: {m['server_ms']:.2f} ms server-only, {m['offload_ms']:.2f} ms "
            f"offload, {m['speedup']:.2f}x (experiment/model.py)"
        )
    fid = summary.get("fidelity") or {}
    if fid.get("warning"):
        lines.append(f"  WARNING, {fid['warning']}")
        if hint := regime_hint(summary):
            lines.append(f"  what to try: {hint}")
    elif fid.get("bottleneck"):
        lines.append(f"  regime: {fid['bottleneck']} (both phases network-bound, as emulated)")
    return "\n".join(lines)


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

    make_plots(run_dir, summary, phases, workers)
    return summary
