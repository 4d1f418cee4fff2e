"""`make run`'s procedure: the network up, the warm-up and the hot set it chooses, BW=auto's
calibration, the server-only and offload phases, and the run's report; with the exit code
each outcome has (experiment/__main__.py's doc lists them).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from controller.errors import ControllerError
from controller.hotset import HotSet, choose, load_stats
from experiment import hotset, report
from experiment.config import (
    AUTO_RATES,
    CALIBRATION_ITERATIONS,
    JOB_ID,
    ExperimentError,
    HotSetMode,
    PreflightError,
    RunConfig,
    measured_stream_offset,
    say,
    warmup_stream_offset,
)
from experiment.configline import topology_shape
from experiment.conservation import not_exact_reason
from experiment.fidelity import PS_LINK_SATURATED
from experiment.model import compute_table, predict, time_scale, workload_of
from experiment.processes import ProcessDied
from experiment.results import PhaseResult
from experiment.runner import Experiment, preflight
from experiment.schema import ModelBound, WarmupHotSet
from experiment.summary import build_summary
from hosts.stats import dumps_strict
from topologies.topology import Topology

EXIT_PROCESS_DIED = 4  # a switch, PS shard or worker died during the run (ProcessDied)


def run(cfg: RunConfig) -> int:
    """One run; 0 when the two modes' parameters are equal, 1 when they differ."""
    exp = Experiment(cfg, preflight(cfg))
    bed = exp.bed
    run_dir = exp.make_run_dir()
    config = cfg.as_dict()

    def save_config() -> None:  # again whenever the run learns more about itself
        write_config(run_dir, config)

    def record_links(calibrating: bool = False) -> None:
        record_link_rates(exp, config, calibrating)

    # Which build of the target ran (BMv2's standard and performance builds differ
    # several-fold in speed).
    config.update(bed.target.record())
    record_links(calibrating=cfg.bw == "auto")
    phases = {}
    try:
        exp.start()
        record_network(exp, config)
        bed.configure(hot_keys=None)
        # Same workload and seed, read further on: the warm-up learns which keys are popular
        # without seeing the iterations it is then measured on (a trace is profiled from its
        # start, as a running system could, and measured after that).
        offset = warmup_stream_offset(cfg)
        measured = measured_stream_offset(cfg)
        phases["warmup"] = exp.run_phase("warmup", cfg.warmup, False, stream_offset=offset)
        config["initial_rto_ms"] = round(1e3 * exp.learn_initial_rto(phases["warmup"]), 1)
        save_config()
        freqs = warmup_counts(phases["warmup"])
        # HOT_SLOTS is the budget; keys updated less than once per warm-up iteration (on
        # average) are left on the PS, since their slots would cost more to collect each
        # iteration than they save (controller.hotset.choose).
        hot = choose(freqs, budget=cfg.hot_slots, min_updates=cfg.warmup)
        say(f"hot set from the warm-up: {hot.describe()}")
        if not hot.keys:
            say(
                f"no key had {cfg.warmup} updates in the warm-up (one per iteration): the "
                "offload phase runs with no hot keys; try a higher SKEW or a longer warm-up"
            )
        if cfg.bw == "auto":
            # After the warm-up: the calibration runs both modes, with this hot set.
            config["bw_auto"] = calibrate(exp, {JOB_ID: hot.keys}, offset)
            record_links()
        bed.configure(hot_keys=None)
        phases["server"] = exp.run_phase(
            "server", cfg.iterations, collect=False, stream_offset=measured, drift=True
        )
        bed.configure(hot_keys=hot.keys)
        agg = bed.aggregating_switch
        budget = bed.job_slots  # the same slots in both modes: only which keys differ
        online = None
        if cfg.hotset == HotSetMode.DYNAMIC:
            online = hotset.online_loop_factory(
                bed, agg, budget, cfg.hotset_every, cfg.hotset_source
            )
        phases["offload"] = exp.run_phase(
            "offload",
            cfg.iterations,
            collect=True,
            stream_offset=measured,
            drift=True,
            online=online,
        )
        if cfg.hotset == HotSetMode.DYNAMIC:
            hotset.report_steps(phases["offload"].hotset_steps)
        shards = len(bed.topology.parameter_servers)
        summary = build_summary(
            config,
            phases,
            warmup_summary(hot),
            cfg.workers,
            shards,
            [agg],
            model=bound(cfg, config, hot.keys, hot.coverage, bed.topology),
            offload_hot_set=hotset.summarize(
                cfg, config, phases["offload"], budget, phases["offload"].hotset_steps
            ),
        )
        report.write_outputs(run_dir, summary, phases, cfg.workers)
        print(report.comparison_table(summary), flush=True)
        say(
            f"report in {run_dir / 'report.md'} (runs/latest): the table, the verdict, the "
            "bound and the figures; also summary.json, config.json, latency.csv, *.png"
        )
        if cfg.keep:
            keep_running(exp)
    finally:
        exp.stop()
    if not summary["exact"]:
        say(
            f"ERROR: not exact: {not_exact_reason(summary)} "
            f"(python -m experiment.conservation {run_dir} lists every phase)"
        )
        return 1
    return 0


def warmup_counts(phase: PhaseResult) -> dict[int, int]:
    """Each key's updates in a warm-up phase, over its PS shards' frequency files."""
    freqs: dict[int, int] = {}
    for f in sorted(phase.dir.glob("freq*.csv")):
        for key, n in load_stats(f).items():
            freqs[key] = freqs.get(key, 0) + n
    return freqs


def warmup_summary(hot: HotSet) -> WarmupHotSet:
    """summary.json's `warmup_hot_set` of the hot set the warm-up's counts chose."""
    return {
        "keys": len(hot.keys),
        "coverage": hot.coverage,
        "covered": hot.covered,
        "total": hot.total,
        "candidates": hot.candidates,
    }


def write_config(run_dir: Path, config: dict[str, Any]) -> None:
    """config.json, again whenever the run learns more about itself."""
    (run_dir / "config.json").write_text(dumps_strict(config, indent=2) + "\n")


def record_link_rates(exp: Experiment, config: dict[str, Any], calibrating: bool) -> None:
    """What the links really are (the topology's, BW's or BW=auto's): it decides the
    regime (README); in config.json and the run's first line."""
    bed, cfg = exp.bed, exp.cfg
    rates = sorted({link.bandwidth or 0.0 for link in bed.topology.links})
    config["link_bandwidth_mbps"] = [r or None for r in rates]
    # REAL_BW's time scale at the rate the links now run (compute in real time uses it)
    config["time_scale"] = cfg.time_scale = time_scale(cfg.real_bw, bed.topology)
    config["topology_shape"] = topology_shape(bed.topology)  # the config line's
    write_config(exp.run_dir, config)
    links = ", ".join("unlimited" if not r else f"{r:g} Mbit/s" for r in rates)
    if calibrating:
        links = "BW=auto (calibrated after the warm-up)"
    jobs = f"{cfg.jobs} jobs, " if cfg.jobs > 1 else ""
    say(
        f"run {exp.run_dir.name}: {bed.target.describe()}, {jobs}{cfg.workers} workers, "
        f"{cfg.iterations} iterations, {cfg.workload} workload, seed {cfg.seed}, "
        f"loss {cfg.loss}, links {links}"
    )


def record_network(exp: Experiment, config: dict[str, Any]) -> None:
    """What this run holds on the machine (runs can share one): in summary.json's config."""
    net = exp.bed.network
    config["run_id"] = exp.run_dir.name
    config["intf_prefix"] = net.intf_prefix
    config["grpc_ports"] = {
        name: int(addr.rsplit(":", 1)[1]) for name, addr in net.grpc_addrs.items()
    }
    write_config(exp.run_dir, config)


def calibrate(
    exp: Experiment, hot_keys: dict[int, list[int]], stream_offset: int
) -> dict[str, Any]:
    """BW=auto: short phases of both modes at rising link rates; the highest rate at which
    a link saturated in both (the PS's link at PS_LINK_SATURATED of its rate or more, or
    another link the verdict names, `link:<direction>`, experiment/fidelity.py) is the run's
    rate. Both modes, because they load the
    machine differently (offload moves work from the PS to the switch and adds the
    COLLECTs); rising, since the first rate that fails ends the search. Saturated, not
    merely PS-link-bound (the verdict also takes a PS link that is only the busiest
    resource, at half its rate): the measured phases run 6 times longer than these, and at
    such a rate (5 Mbit/s, the PS link at 64% in offload's calibration) BMv2's performance
    build measured offload at 39.0 ms against the bound's 32.9, its PS link at 83% with the
    cores 91% busy. The phases read the warm-up's part of
    the workload, never the measured iterations. `hot_keys`: each job's ({job id: keys});
    with several jobs, every job runs in each short phase and the verdict is the phase's."""

    def saturated(verdict: dict) -> bool:
        if verdict["bottleneck"].startswith("link:"):
            return True  # fidelity names another link only once it ran at PS_LINK_SATURATED
        return (
            verdict["bottleneck"] == "ps_link"
            and verdict["ps_link_utilization"] >= PS_LINK_SATURATED
        )

    trials = []
    chosen = None
    for mbps in AUTO_RATES:
        exp.bed.set_bandwidth(mbps)
        verdicts = {}
        no_keys: dict[int, list[int] | None] = dict.fromkeys(hot_keys)
        for mode, keys in (("server", no_keys), ("offload", hot_keys)):
            exp.bed.configure_jobs(keys)  # a fresh pipeline: the phase's seqs start at 1
            jobs = exp.run_jobs_phase(
                f"calibrate-{mbps:g}-{mode}",
                CALIBRATION_ITERATIONS,
                collect=mode == "offload",
                stream_offset=stream_offset,
            )
            # every job's own verdict must say saturated: the first that does not speaks
            verdicts[mode] = next(
                (job.fidelity for job in jobs if not saturated(job.fidelity)), jobs[0].fidelity
            )
            if not saturated(verdicts[mode]):
                break  # no need to try the other mode at this rate
        worst = next((v for v in verdicts.values() if not saturated(v)), None)
        shown = worst or verdicts["offload"]
        trials.append(
            {
                "mbps": mbps,
                "bottleneck": shown["bottleneck"],
                "why": shown["why"],
                "modes": {m: v["bottleneck"] for m, v in verdicts.items()},
                "ps_link_utilization": {m: v["ps_link_utilization"] for m, v in verdicts.items()},
                "saturated": worst is None,
            }
        )
        which = (
            "both modes" if worst is None else next(m for m, v in verdicts.items() if v is worst)
        )
        why = shown["why"]
        if worst is not None and worst["bottleneck"] == "ps_link":
            why += f", below the {PS_LINK_SATURATED:.0%} this calibration asks"
        say(f"BW=auto: {mbps:g} Mbit/s: {shown['bottleneck']} in {which} ({why})")
        if worst is not None:
            break
        chosen = mbps
    if chosen is None:
        chosen = AUTO_RATES[0]
        say(
            f"BW=auto: no rate tried was network-bound; using the lowest, {chosen:g} Mbit/s "
            "(the summary's fidelity block says what limited the run)"
        )
    else:
        say(f"BW=auto: {chosen:g} Mbit/s, the highest rate at which a link saturated")
    exp.bed.set_bandwidth(chosen)
    return {"chosen_mbps": chosen, "trials": trials}


def bound(
    cfg: RunConfig,
    config: dict[str, Any],
    hot_keys: list[int],
    coverage: float,
    topology: Topology,
) -> ModelBound | None:
    """The analytical bound of this run (experiment/model.py) with the hot set it used, on
    its topology with the rates its links ran at (the file's, BW='s or BW=auto's); None
    where a link has no rate (then no link bound exists)."""
    if any(link.bandwidth is None for link in topology.links):
        return None
    prediction = predict(
        workload_of(config),
        cfg.workers,
        cfg.iterations,
        None,  # the topology's rates, which BW= has already set
        set(hot_keys),
        coverage,
        stream_offset=measured_stream_offset(cfg),
        topology=topology,
        aggregate=cfg.aggregate,
    )
    return prediction.as_dict(compute_table(cfg), cfg.sync)


def keep_running(exp: Experiment) -> None:
    """Leave the switches up (with the offload phase's tables) for hands-on use."""
    exp.bed.close_clients()  # so that a controller started by hand can become primary
    net = exp.bed.network
    say("KEEP=1: the network stays up until Ctrl-C. Try, from another terminal:")
    for name, addr in net.grpc_addrs.items():
        say(f"  {name}: .venv/bin/hotagg-ctl --grpc-addr {addr} hotkeys list")
        say(
            f"  {name}: .venv/bin/python -m p4runtime_sh --grpc-addr {addr} "
            f"--device-id {net.device_ids[name]} --election-id 0,2"
        )
    stop_signals = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)  # sigwait needs them blocked
    signal.sigwait(stop_signals)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, stop_signals)


def main(cfg: RunConfig, how: Callable[[RunConfig], int] = run) -> int:
    """how(cfg), run() or another procedure (experiment/jobs_run.py), with each way it can
    end as its exit code and a one-line error."""
    try:
        return how(cfg)
    except PreflightError as e:
        print(f"hotagg: error: {e}", file=sys.stderr)
        return 2
    except ProcessDied as e:
        print(f"hotagg: error: {e}", file=sys.stderr)
        return EXIT_PROCESS_DIED
    except (ExperimentError, ControllerError) as e:
        print(f"hotagg: error: {e}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("hotagg: interrupted; cleaned up", file=sys.stderr)
        return 130
