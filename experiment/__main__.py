"""`make run`: the Mininet experiment (offloaded vs server-only), and `make stop`.

    python -m experiment run [--target embedded|bmv2] [--topo FILE] [--workers N] ...
    python -m experiment stop [--run ID]

Exit codes: 0 done and exact, 1 not exact (the modes' parameters differ, or a phase lost or
doubled an update: experiment/conservation.py), 2 bad options or missing
prerequisites, 3 the run failed (the message says where; logs are in runs/<id>/), 4 a process
the run started (a switch, a PS shard or a worker) died: the message names it, its pid and
exit code or signal, with the tail of its log; 130 interrupted (Ctrl-C or `make stop`).
"""

from __future__ import annotations

import os
import sys

from experiment import sweep
from experiment.options import OptionParser, add_run_arguments, config_of
from topologies.switches import REPO_ROOT


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
        "Exit codes: 0 done and exact, 1 not exact (the modes' parameters differ or a phase lost "
        "or doubled an update), 2 bad options or "
        "missing prerequisites, 3 the run failed, 4 a process the run started died, "
        "130 interrupted."
    )
    stop.add_argument(
        "--run",
        metavar="ID",
        help="only this run id (runs/<id>), of any checkout (default: every run of this checkout)",
    )
    stop.epilog = (
        "A run that used servers (SERVERS=) is stopped on each of them too, over ssh. Exit "
        "codes: 0 stopped (or nothing to stop), 1 a server could not be reached or cleaned "
        "(named above; the next make stop tries it again), 2 not root."
    )
    sweep.add_arguments(sweep_parser)
    return parser


def stop(run_id: str | None) -> int:
    """`make stop [RUN=id]`: this checkout's runs, or the one run; a run that used servers
    on each of them first. 0, or 1 if a server could not be reached or cleaned."""
    # topologies.network imports Mininet (most of a second): only `make stop` needs it
    from topologies.cluster_state import cleanup_servers
    from topologies.network import cleanup, runs

    if os.geteuid() != 0:
        print("hotagg: error: make stop needs root: sudo make stop", file=sys.stderr)
        return 2
    if run_id is not None and not any(s.get("run_id") == run_id for s in runs()):
        print(f"hotagg: no state of run {run_id}; cleaning up its marked processes only")
    checkout = None if run_id else REPO_ROOT
    servers = cleanup_servers(run_id, checkout=checkout)  # nothing for a run without
    done = servers.lines + cleanup(run_id, checkout=checkout)
    for line in done:
        print(f"hotagg: {line}")
    others = [s.get("run_id") for s in runs()]
    if not done:
        print("hotagg: nothing of " + (f"run {run_id}" if run_id else f"{REPO_ROOT}") + " to stop")
    if others:
        print(f"hotagg: left alone (other checkouts' or runs): {', '.join(map(str, others))}")
    if not servers.ok:
        unreached = ", ".join(servers.unreachable)
        print(f"hotagg: error: not cleaned on {unreached} (see above)", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "sweep":
        return sweep.main(args)
    if args.command == "stop":
        return stop(args.run)
    cfg = config_of(args)
    # The run's machinery imports grpc, protobuf and Mininet (a second or two): loaded once
    # the options parse, so that --help and a malformed option answer at once.
    from experiment import jobs_run, procedure

    return procedure.main(cfg, jobs_run.run if cfg.jobs > 1 else procedure.run)


if __name__ == "__main__":
    sys.exit(main())
