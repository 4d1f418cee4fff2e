"""`make run`: the Mininet experiment (offloaded vs server-only), and `make stop`.

    python -m experiment run [--target embedded|bmv2] [--topo FILE] [--workers N] ...
    python -m experiment stop [--run ID]

Exit codes: 0 done and exact, 1 the two modes' parameters differ, 2 bad options or missing
prerequisites, 3 the run failed (the message says where; logs are in runs/<id>/), 4 a process
the run started (a switch, a PS shard or a worker) died: the message names it, its pid and
exit code or signal, with the tail of its log; 130 interrupted (Ctrl-C or `make stop`).
"""

from __future__ import annotations

import signal
import sys

from experiment.options import OptionParser, add_run_arguments, config_of
from experiment.runner import (
    Experiment,
    ExperimentError,
    PreflightError,
    ProcessDied,
    RunConfig,
    measured_stream_offset,
    say,
)
from hosts.stats import dumps_strict
from topologies.switches import bmv2_binary

WARMUP_STREAM_OFFSET = 1_000_000  # far beyond any measured iteration
EXIT_PROCESS_DIED = 4  # a switch, PS shard or worker died during the run (ProcessDied)


def build_parser() -> OptionParser:
    parser = OptionParser(prog="python -m experiment", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    commands = {
        "run": "the experiment: offloaded vs server-only (make run)",
        "stop": "stop this checkout's runs (or one run) and clean up what they left (make stop)",
        "sweep": "a grid of runs, plotted against the model's bound (make sweep)",
    }
    run, stop, sweep_parser = (
        sub.add_parser(name, help=text, description=text) for name, text in commands.items()
    )
    add_run_arguments(run)
    run.epilog = (
        "Exit codes: 0 done and exact, 1 the two modes' parameters differ, 2 bad options or "
        "missing prerequisites, 3 the run failed, 4 a process the run started died, "
        "130 interrupted."
    )
    stop.add_argument(
        "--run",
        metavar="ID",
        help="only this run id (runs/<id>), of any checkout (default: every run of this checkout)",
    )
    from experiment import sweep

    sweep.add_arguments(sweep_parser)
    return parser


def run(cfg: RunConfig) -> int:
    from controller.hotset import choose, load_stats
    from experiment import hotset, report

    exp = Experiment(cfg)
    exp.preflight()
    run_dir = exp.make_run_dir()
    config = cfg.as_dict()

    def save_config() -> None:  # again whenever the run learns more about itself
        (run_dir / "config.json").write_text(dumps_strict(config, indent=2) + "\n")

    def record_links(calibrating: bool = False) -> None:
        # what the links really are (the topology's, BW's or BW=auto's): it decides the
        # regime (README)
        rates = sorted({link.bandwidth or 0.0 for link in exp.topology.links})
        config["link_bandwidth_mbps"] = [r or None for r in rates]
        config["topology_shape"] = report.topology_shape(exp.topology)  # the config line's
        save_config()
        links = ", ".join("unlimited" if not r else f"{r:g} Mbit/s" for r in rates)
        if calibrating:
            links = "BW=auto (calibrated after the warm-up)"
        say(
            f"run {run_dir.name}: {switch_name}, {cfg.workers} workers, {cfg.iterations} "
            f"iterations, {cfg.workload} workload, seed {cfg.seed}, loss {cfg.loss}, links {links}"
        )

    # Which switch ran: BMv2's standard and performance builds differ several-fold in speed.
    switch_name = "embedded switch"
    if cfg.target == "bmv2":
        config["bmv2_binary"] = bmv2_binary()
        switch_name = f"BMv2 ({config['bmv2_binary']})"
    record_links(calibrating=cfg.bw == "auto")
    phases = {}
    try:
        exp.start()
        # What this run holds on the machine (runs can share one): in summary.json's config.
        config["run_id"] = run_dir.name
        config["intf_prefix"] = exp.net.intf_prefix
        config["grpc_ports"] = {
            name: int(addr.rsplit(":", 1)[1]) for name, addr in exp.net.grpc_addrs.items()
        }
        save_config()
        exp.configure(hot_keys=None)
        # Same workload and seed, read further on: the warm-up learns which keys are popular
        # without seeing the iterations it is then measured on (a trace is profiled from its
        # start, as a running system could, and measured after that).
        offset = 0 if cfg.workload == "trace" else WARMUP_STREAM_OFFSET
        measured = measured_stream_offset(cfg)
        phases["warmup"] = exp.run_phase("warmup", cfg.warmup, False, stream_offset=offset)
        config["initial_rto_ms"] = round(1e3 * exp.learn_initial_rto(phases["warmup"]), 1)
        save_config()
        freqs: dict[int, int] = {}
        for f in sorted(phases["warmup"].dir.glob("freq*.csv")):
            for key, n in load_stats(f).items():
                freqs[key] = freqs.get(key, 0) + n
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
            config["bw_auto"] = calibrate(exp, hot.keys, offset)
            record_links()
        exp.configure(hot_keys=None)
        phases["server"] = exp.run_phase(
            "server", cfg.iterations, collect=False, stream_offset=measured, drift=True
        )
        exp.configure(hot_keys=hot.keys)
        agg = [n for n, s in exp.topology.switches.items() if s.aggregate]
        budget = exp.job_slots  # the same slots in both modes: only which keys differ
        online = None
        if cfg.hotset == "dynamic":
            online = hotset.online_loop_factory(
                exp, agg[0], budget, cfg.hotset_every, cfg.hotset_source
            )
        phases["offload"] = exp.run_phase(
            "offload",
            cfg.iterations,
            collect=True,
            stream_offset=measured,
            drift=True,
            online=online,
        )
        if cfg.hotset == "dynamic":
            hotset.report_steps(phases["offload"].hotset_steps)
        hot_info = {
            "keys": len(hot.keys),
            "coverage": hot.coverage,
            "covered": hot.covered,
            "total": hot.total,
            "candidates": hot.candidates,
        }
        summary = report.build(
            run_dir,
            config,
            phases,
            hot_info,
            cfg.workers,
            len(exp.topology.parameter_servers),
            agg,
            model=bound(cfg, config, hot.keys, hot.coverage, len(exp.topology.parameter_servers)),
            hotset=hotset.summarize(
                cfg, config, phases["offload"], budget, phases["offload"].hotset_steps
            ),
        )
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
        say("ERROR: the parameters of the two modes differ; see summary.json params_sha256")
        return 1
    return 0


def calibrate(exp: Experiment, hot_keys: list[int], stream_offset: int) -> dict:
    """BW=auto: short phases of both modes at rising link rates; the highest rate at which
    the PS's link saturated in both (PS-link-bound with it at PS_LINK_SATURATED of its rate
    or more, experiment/fidelity.py) is the run's rate. Both modes, because they load the
    machine differently (offload moves work from the PS to the switch and adds the
    COLLECTs); rising, since the first rate that fails ends the search. Saturated, not
    merely PS-link-bound (the verdict also takes a PS link that is only the busiest
    resource, at half its rate): the measured phases run 6 times longer than these, and at
    such a rate (5 Mbit/s, the PS link at 64% in offload's calibration) BMv2's performance
    build measured offload at 39.0 ms against the bound's 32.9, its PS link at 83% with the
    cores 91% busy. The phases read the warm-up's part of
    the workload, never the measured iterations."""
    from experiment.fidelity import PS_LINK_SATURATED
    from experiment.runner import AUTO_RATES, CALIBRATION_ITERATIONS

    def saturated(verdict: dict) -> bool:
        return (
            verdict["bottleneck"] == "ps_link"
            and verdict["ps_link_utilization"] >= PS_LINK_SATURATED
        )

    trials = []
    chosen = None
    for mbps in AUTO_RATES:
        exp.set_bandwidth(mbps)
        verdicts = {}
        for mode, keys in (("server", None), ("offload", hot_keys)):
            exp.configure(hot_keys=keys)  # a fresh pipeline: the phase's seqs start at 1 again
            phase = exp.run_phase(
                f"calibrate-{mbps:g}-{mode}",
                CALIBRATION_ITERATIONS,
                collect=keys is not None,
                stream_offset=stream_offset,
            )
            verdicts[mode] = phase.fidelity
            if not saturated(phase.fidelity):
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
        say(f"BW=auto: {chosen:g} Mbit/s, the highest rate at which the PS link saturated")
    exp.set_bandwidth(chosen)
    return {"chosen_mbps": chosen, "trials": trials}


def bound(
    cfg: RunConfig, config: dict, hot_keys: list[int], coverage: float, shards: int
) -> dict | None:
    """The analytical bound of this run (experiment/model.py) with the hot set it used;
    None where a link has no rate (then no link bound exists)."""
    from experiment.model import predict, workload_of

    rates = config["link_bandwidth_mbps"]
    if not rates or None in rates:
        return None
    prediction = predict(
        workload_of(config),
        cfg.workers,
        cfg.iterations,
        min(rates),
        set(hot_keys),
        coverage,
        shards,
        stream_offset=measured_stream_offset(cfg),
    )
    return prediction.as_dict()


def keep_running(exp: Experiment) -> None:
    """Leave the switches up (with the offload phase's tables) for hands-on use."""
    exp.close_clients()  # so that a controller started by hand can become primary
    say("KEEP=1: the network stays up until Ctrl-C. Try, from another terminal:")
    for name, addr in exp.net.grpc_addrs.items():
        say(f"  {name}: .venv/bin/hotagg-ctl --grpc-addr {addr} hotkeys list")
        say(
            f"  {name}: .venv/bin/python -m p4runtime_sh --grpc-addr {addr} "
            f"--device-id {exp.net.device_ids[name]} --election-id 0,2"
        )
    stop_signals = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)  # sigwait needs them blocked
    signal.sigwait(stop_signals)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, stop_signals)


def stop(run_id: str | None) -> int:
    """`make stop [RUN=id]`: this checkout's runs, or the one run."""
    import os

    from topologies.network import cleanup, runs
    from topologies.switches import REPO_ROOT

    if os.geteuid() != 0:
        print("hotagg: error: make stop needs root: sudo make stop", file=sys.stderr)
        return 2
    if run_id is not None and not any(s.get("run_id") == run_id for s in runs()):
        print(f"hotagg: no state of run {run_id}; cleaning up its marked processes only")
    done = cleanup(run_id, checkout=None if run_id else REPO_ROOT)
    for line in done:
        print(f"hotagg: {line}")
    others = [s.get("run_id") for s in runs()]
    if not done:
        print("hotagg: nothing of " + (f"run {run_id}" if run_id else f"{REPO_ROOT}") + " to stop")
    if others:
        print(f"hotagg: left alone (other checkouts' or runs): {', '.join(map(str, others))}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "sweep":
        from experiment import sweep

        return sweep.main(args)
    if args.command == "stop":
        return stop(args.run)
    cfg = config_of(args)
    from controller.errors import ControllerError

    try:
        return run(cfg)
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


if __name__ == "__main__":
    sys.exit(main())
