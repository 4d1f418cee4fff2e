"""Every option of `make run`, checked before anything is built, each error naming its make
variable (SEED=-1, not a worker's "expected non-negative integer" after the network is up).

Two layers: the argparse types below refuse what is malformed on its own (a negative seed,
a loss of 1), and check() what needs the others or the machine (WORKERS against the
topology, a trace's length, a port in use, a prefix whose interface names exist).
"""

from __future__ import annotations

import argparse
import math
import re
import shlex
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from contract.clihelp import HelpParser
from contract.constants import MAX_JOBS, MAX_WORKERS, NUM_SLOTS
from experiment.config import (
    AUTO_RATES,
    DEFAULT_JOB_WORKERS,
    HOTSET_EVERY,
    PER_JOB_OPTIONS,
    Aggregate,
    HotSetMode,
    HotSetSource,
    PreflightError,
    RunConfig,
    Split,
    job_configs,
    say,
)
from experiment.model import workload_of
from hosts.agent import AgentError
from hosts.compute import ComputeError, ComputeSpec, Stragglers
from hosts.ps_config import SyncMode
from hosts.workloads import (
    DriftSpec,
    RunOption,
    WorkloadError,
    drifting_names,
    one_of,
    parse_args,
    workload_class,
    workload_classes,
    workload_help,
    workload_names,
)
from topologies.cluster import ClusterError, Server, parse_servers
from topologies.generate import MAX_PORTS
from topologies.targets import TargetName, make_target, target_names
from topologies.topology import Topology, TopologyFileError, load_topology

# argparse destination -> the make variable a user sets (`make run SEED=...`)
MAKE_NAMES = {
    "target": "TARGET",
    "topo": "TOPO",
    "ps": "PS",
    "workers": "WORKERS",
    "iterations": "ITERATIONS",
    "skew": "SKEW",
    "keys": "KEYS",
    "hot_slots": "HOT_SLOTS",
    "loss": "LOSS",
    "bw": "BW",
    "seed": "SEED",
    "workload": "WORKLOAD",
    "workload_args": "WORKLOAD_ARGS",
    "grpc_base_port": "GRPC_PORT",
    "intf_prefix": "PREFIX",
    "hotset": "HOTSET",
    "hotset_source": "HOTSET_SOURCE",
    "aggregate": "AGGREGATE",
    "jobs": "JOBS",
    "sync": "SYNC",
    "split": "SPLIT",
    "drift": "DRIFT",
    "switch_restarts": "SWITCH_RESTARTS",
    "compute": "COMPUTE",
    "stragglers": "STRAGGLERS",
    "real_bw": "REAL_BW",
    "servers": "SERVERS",
    "place": "PLACE",
}


def workload_run_options() -> list[RunOption]:
    """The options the registered workloads add to the run's (TRACE= / --trace), each once."""
    found: dict[str, RunOption] = {}
    for cls in workload_classes():
        for option in cls.run_options:
            found.setdefault(option.flag, option)
    return list(found.values())


def make_name(dest: str) -> str | None:
    """The make variable of the run's option with this argparse destination, if it has one."""
    return MAKE_NAMES.get(dest) or {o.dest: o.make for o in workload_run_options()}.get(dest)


# The shipped workloads' own (a workload registered later is asked by make_name).
MAKE_NAMES.update({option.dest: option.make for option in workload_run_options()})
# The workers' options the run gives every worker itself (experiment/agents.py
# workload_args), which WORKLOAD_ARGS must leave alone, and what sets them instead.
RUN_WORKLOAD_OPTIONS: dict[str, str | None] = {
    "workload": "WORKLOAD=",
    "keys": "KEYS=",
    "seed": "SEED=",
    "skew": "SKEW=",
    "keys_per_iter": "--keys-per-iter of the run",
    "drift": "DRIFT=",
    "stream_offset": None,  # each phase reads the stream from its own offset
}
SEED_MAX = 2**32 - 1
MAX_BW_MBPS = 1000.0  # Mininet's TCIntf ignores (only logs) a rate above this
T = TypeVar("T", int, float)
PS_BYTES_PER_KEY = 24  # three int64 arrays over the whole key space per PS (hosts/ps.py)


class OptionParser(HelpParser):
    """argparse whose errors name the make variable too: "SEED (--seed): -1 is negative";
    its --help shows every default (contract/clihelp.py), its subcommands' too."""

    def error(self, message: str) -> None:  # type: ignore[override]
        def named(m: re.Match[str]) -> str:
            make = make_name(m.group(1).replace("-", "_"))
            return f"{make} (--{m.group(1)})" if make else f"--{m.group(1)}"

        # One line, as the experiment's other errors (the usage is a --help away).
        text = re.sub(r"argument --([a-z-]+)", named, message)
        self.exit(2, f"hotagg: error: {text} ({self.prog} --help lists the options)\n")


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def _float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):  # float() reads "nan" and "inf"
        raise argparse.ArgumentTypeError(f"{text} is not a finite number")
    return value


def _within(parse: Callable[[str], T], ok: Callable[[T], bool], why: str) -> Callable[[str], T]:
    """An argparse type: `parse`, then refuse what `ok` does not take ("{}": the text)."""

    def check(text: str) -> T:
        value = parse(text)
        if not ok(value):
            raise argparse.ArgumentTypeError(why.format(text))
        return value

    return check


positive = _within(_int, lambda v: v >= 1, "{} is not a positive integer")
jobs = _within(_int, lambda v: 1 <= v <= MAX_JOBS, f"{{}} is not in 1..{MAX_JOBS}")
workers = _within(_int, lambda v: 1 <= v <= MAX_WORKERS, f"{{}} is not in 1..{MAX_WORKERS}")
hot_slots = _within(
    _int, lambda v: 1 <= v <= NUM_SLOTS, f"{{}} is not in 1..{NUM_SLOTS} (the switch's slots)"
)
count = _within(_int, lambda v: v >= 0, "{} is not a whole number >= 0")
seed = _within(_int, lambda v: 0 <= v <= SEED_MAX, f"{{}} is not in 0..{SEED_MAX}")
port = _within(_int, lambda v: 0 <= v <= 65535, "{} is not a TCP port (0: free ones)")
nonnegative = _within(_float, lambda v: v >= 0, "{} is negative")
positive_float = _within(_float, lambda v: v > 0, "{} is not a positive number")
probability = _within(_float, lambda v: 0 <= v < 1, "{} is not in [0, 1)")


def per_job(parse: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    """An argparse type for an option JOBS=J takes per job: one value, or J of them separated
    by commas (SKEW=1.1,1.3), each checked by `parse`."""

    def values(text: str) -> list[Any]:
        return [parse(part.strip()) for part in text.split(",")]

    return values


def workload_name(text: str) -> str:
    if text not in workload_names():
        # argparse's own words for a choice it does not know
        choices = ", ".join(map(repr, workload_names()))
        raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from {choices})")
    return text


def bandwidth(text: str) -> float | str:
    if text == "auto":
        return text
    value = positive_float(text)
    if value > MAX_BW_MBPS:
        raise argparse.ArgumentTypeError(
            f"{text} Mbit/s: Mininet shapes links up to {MAX_BW_MBPS:g} Mbit/s"
        )
    return value


def drift(text: str) -> str | None:
    """DRIFT: `every=K,fraction=F[,head=H]` (hosts/workloads/drift.py), or empty/none for none;
    returned in its normal form, as the workers are given it."""
    try:
        spec = DriftSpec.parse(text)
    except WorkloadError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return None if spec is None else str(spec)


def compute(text: str) -> str | None:
    """COMPUTE: a fixed time or a seeded distribution (hosts/compute.py), returned in its
    normal form; empty or none for none."""
    try:
        spec = ComputeSpec.parse(text)
    except ComputeError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return None if spec is None else str(spec)


def sync(text: str) -> str:
    """SYNC: bsp, ssp:S or async (hosts/ps_config.py), in its normal form (ssp:0 is bsp)."""
    try:
        return str(SyncMode.parse(text))
    except AgentError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def stragglers(text: str) -> str | None:
    """STRAGGLERS: N:F and/or p=P:F (hosts/compute.py), in its normal form; empty for none."""
    try:
        slow = Stragglers.parse(text)
    except ComputeError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return None if slow is None else str(slow)


_RATE_UNITS = {"": 1.0, "k": 1e-3, "m": 1.0, "g": 1e3, "t": 1e6}  # -> Mbit/s


def real_bandwidth(text: str) -> float:
    """REAL_BW: a link rate, 10G, 100M or a number of Mbit/s (as BW=), in Mbit/s."""
    m = re.fullmatch(r"\s*([0-9.eE+-]+)\s*([kKmMgGtT]?)(?:bit/s|bps|b)?\s*", text)
    value = _float(m.group(1)) * _RATE_UNITS[m.group(2).lower()] if m else None
    if value is None or value <= 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a link rate: write e.g. 10G, 100M or 10000 (Mbit/s)"
        )
    return value


def shell_words(text: str) -> str:
    """WORKLOAD_ARGS: options split as a shell splits them (quotes keep words together)."""
    try:
        shlex.split(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: {e}") from None
    return text


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `python -m experiment run` (make run's variables, MAKE_NAMES), on
    `parser`; make sweep passes some of them to every run (experiment/sweep.py)."""
    d = RunConfig()
    parser.add_argument(
        "--target",
        choices=target_names(),  # every registered target (topologies/targets.py)
        default=d.target,
        help="the switch: hotagg's embedded Python switch, or BMv2's simple_switch_grpc "
        "(its binary from $BMV2_BINARY)",
    )
    parser.add_argument(
        "--topo",
        type=Path,
        default=d.topo,
        help="topology.json, or star:N, star:N:S (S PS shards), leafspine:L:H (default: "
        "topologies/star.json, 4 workers)",
    )
    parser.add_argument(
        "--ps",
        type=lambda text: [name for name in text.split(",") if name],
        default=[],
        metavar="HOST[,HOST]",
        help="the parameter server host(s), for a topology file without hotagg's roles",
    )
    parser.add_argument(
        "--workers",
        type=per_job(workers),
        default=None,
        metavar="N[,N]",
        help="the first N worker hosts of the topology run (default: all of them); with "
        f"--jobs, each job's (default {DEFAULT_JOB_WORKERS})",
    )
    parser.add_argument(
        "--iterations", type=positive, default=d.iterations, help="measured iterations per mode"
    )
    parser.add_argument(
        "--skew", type=per_job(nonnegative), default=[d.skew], help="Zipf exponent (zipf, lr)"
    )
    parser.add_argument(
        "--keys", type=per_job(positive), default=[d.keys], help="key space (parameters)"
    )
    parser.add_argument(
        "--keys-per-iter",
        type=per_job(positive),
        default=[d.keys_per_iter],
        help="zipf: updates each worker draws per iteration",
    )
    parser.add_argument(
        "--hot-slots",
        type=hot_slots,
        default=d.hot_slots,
        help="switch slots for the hot set (its budget)",
    )
    parser.add_argument(
        "--loss",
        type=probability,
        default=d.loss,
        help="drop probability of the switch's drop simulator",
    )
    parser.add_argument(
        "--bw",
        type=bandwidth,
        default=d.bw,
        metavar="MBPS|auto",
        help="bandwidth of every link in Mbit/s, instead of the topology's own; 'auto': the "
        "highest rate at which a short calibration saturates the PS link in both modes "
        "(default: the topology's own; make run passes BW=auto)",
    )
    parser.add_argument(
        "--seed",
        type=per_job(seed),
        default=[d.seed],
        help="seed of the workload and the drop simulator",
    )
    parser.add_argument(
        "--workload",
        type=per_job(workload_name),  # every registered workload (hosts/workloads/)
        default=[d.workload],
        metavar="{" + ",".join(workload_names()) + "}",
        help=workload_help(),
    )
    for option in workload_run_options():
        parser.add_argument(option.flag, metavar=option.metavar, help=option.help)
    parser.add_argument(
        "--workload-args",
        type=shell_words,
        default="",
        metavar="OPTIONS",
        help="the workload's own options, as its workers take them (python -m hosts.worker "
        "--help lists them), e.g. '--batch 32' with --workload lr",
    )
    parser.add_argument(
        "--drift",
        type=drift,
        default=d.drift,
        metavar="every=K,fraction=F[,head=H]",
        help="the measured phases' workload drifts: every K iterations a fraction F of the H "
        "most popular ranks (default 256) take keys from the tail (zipf, lr; default none)",
    )
    parser.add_argument(
        "--compute",
        type=compute,
        default=d.compute,
        metavar="TIME|normal:M,S|lognormal:M,S",
        help="each worker's compute per iteration in the measured phases, slept between its "
        "pull and its push: 20ms, normal:20ms,5ms (mean, sd), lognormal:20ms,0.5 (median, "
        "sigma of the log), seeded by --seed; a real: prefix gives it in real time, scaled "
        "by --real-bw (default: none)",
    )
    parser.add_argument(
        "--stragglers",
        type=stragglers,
        default=d.stragglers,
        metavar="N:F|p=P:F",
        help="with --compute: workers 0..N-1 compute F times longer (1:3), and/or each "
        "iteration of each worker is F times longer with probability P (p=0.1:3)",
    )
    parser.add_argument(
        "--real-bw",
        type=real_bandwidth,
        default=d.real_bw,
        metavar="RATE",
        help="the real link rate the emulated links stand for (10G, 100M, or Mbit/s): the "
        "run's time scale is it over the PS link's rate (default: none, no time scale)",
    )
    parser.add_argument(
        "--aggregate",
        choices=tuple(Aggregate),
        default=d.aggregate,
        help="offload phase: the switch the PS hangs off aggregates (ps-leaf), or every leaf "
        "of a leaf-spine does, its partial sums flushed up to the PS's leaf (leaves; "
        "docs/design.md section 7)",
    )
    parser.add_argument(
        "--sync",
        type=sync,
        default=d.sync,
        metavar="bsp|ssp:S|async",
        help="how far workers may drift apart: bsp (a barrier every iteration), ssp:S (up to "
        "S iterations ahead of the slowest) or async (no barrier); docs/design.md section 8",
    )
    parser.add_argument(
        "--jobs",
        type=jobs,
        default=d.jobs,
        help="training jobs sharing the switch, each with its own workers, PS and workload; "
        "WORKERS, SKEW, KEYS, SEED and WORKLOAD then take one value or one per job "
        "(SKEW=1.1,1.3)",
    )
    parser.add_argument(
        "--split",
        choices=tuple(Split),
        default=d.split,
        help="with --jobs: how the jobs share HOT_SLOTS in the offload phase: the split that "
        "saves the most PS-link bytes over all jobs (savings; the run also measures equal "
        "halves beside it), or equal shares (equal)",
    )
    parser.add_argument(
        "--hotset",
        choices=tuple(HotSetMode),
        default=d.hotset,
        help="offload phase: the warm-up's hot set throughout (static), or re-selected "
        "while the workers train by the controller's online loop (dynamic)",
    )
    parser.add_argument(
        "--hotset-every",
        type=positive,
        default=None,
        metavar="N",
        help="dynamic: re-select every N iterations (default by source: "
        + ", ".join(f"{src} {n}" for src, n in HOTSET_EVERY.items())
        + ")",
    )
    parser.add_argument(
        "--hotset-source",
        choices=tuple(HotSetSource),
        default=d.hotset_source,
        help="dynamic: what the online loop measures the keys' rates from: the PS's counters "
        "(ps), or the switch alone (switch: the hot-key tables' hit counters and the "
        "cold-key sketch's reports, as NetCache)",
    )
    parser.add_argument(
        "--warmup",
        type=positive,
        default=d.warmup,
        help="warm-up iterations whose statistics choose the hot set",
    )
    parser.add_argument(
        "--runs-dir",
        type=Path,
        default=d.runs_dir,
        metavar="DIR",
        help="where the run's directory goes (default: runs/ of this checkout)",
    )
    parser.add_argument(
        "--grpc-base-port",
        type=port,
        default=d.grpc_base_port,
        help="P4Runtime port of the first switch, the others count up (0: free ports)",
    )
    parser.add_argument(
        "--intf-prefix",
        default="",
        help="prefix of this run's switch interface names (empty: an unused one)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the network up after the run, until Ctrl-C"
    )
    parser.add_argument(
        "--servers",
        default=d.servers,
        metavar="HOST[,HOST]",
        help="spread the topology over these machines ([user@]host, root by default; this one, "
        "the coordinator, first); each is checked before anything is built (docs/cluster.md)",
    )
    parser.add_argument(
        "--place",
        default=d.place,
        metavar="NODE@SERVER[,...]",
        help="with --servers: put these nodes on these servers, e.g. h3@host2,s2@host2 (default: "
        "one rack per server, the parameter server's on this machine)",
    )
    parser.add_argument(
        "--switch-restarts",
        type=count,
        default=d.switch_restarts,
        metavar="N",
        help="restart a switch that dies during a phase and run the phase again, up to N "
        "times (default: 0, the run ends with exit code 4)",
    )


def config_of(args: argparse.Namespace) -> RunConfig:
    """The run's configuration from add_run_arguments' options."""
    # the workers' options that the workloads' run options (TRACE=) and WORKLOAD_ARGS give
    extra = [
        word
        for option in workload_run_options()
        if getattr(args, option.dest, None)
        for word in (option.flag, getattr(args, option.dest))
    ]
    extra += shlex.split(args.workload_args)
    # A per-job option given as a list (JOBS=J): its first value stands for the run, the
    # list for its jobs (check() holds it to J values).
    lists = {name: getattr(args, name) or [None] for name in PER_JOB_OPTIONS}
    per_job = {name: values for name, values in lists.items() if len(values) > 1}
    return RunConfig(
        target=args.target,
        topo=args.topo,
        workers=lists["workers"][0] or 0,  # 0: every worker host of the topology (check)
        iterations=args.iterations,
        skew=lists["skew"][0],
        keys=lists["keys"][0],
        keys_per_iter=lists["keys_per_iter"][0],
        hot_slots=args.hot_slots,
        loss=args.loss,
        seed=lists["seed"][0],
        workload=lists["workload"][0],
        jobs=args.jobs,
        sync=args.sync,
        per_job=per_job,
        split=Split(args.split),
        warmup=args.warmup,
        bw=args.bw,
        ps=args.ps,
        runs_dir=args.runs_dir,
        grpc_base_port=args.grpc_base_port,
        intf_prefix=args.intf_prefix,
        keep=args.keep,
        switch_restarts=args.switch_restarts,
        extra_workload_args=extra,
        hotset=HotSetMode(args.hotset),
        aggregate=Aggregate(args.aggregate),
        hotset_every=args.hotset_every or 0,  # 0: the source's (RunConfig)
        hotset_source=HotSetSource(args.hotset_source),
        drift=args.drift,
        compute=args.compute,
        stragglers=args.stragglers,
        real_bw=args.real_bw,
        servers=args.servers,
        place=args.place,
    )


def check(cfg: RunConfig) -> Topology:
    """Everything about the options that argparse cannot see alone; the loaded topology.
    Raises PreflightError naming the option. Needs neither root nor a network. Fills in
    what the topology decides: cfg.workers 0 (WORKERS empty) becomes its worker hosts."""
    # topologies.network imports Mininet (most of a second): not for --help or a bad option
    from topologies.network import prefix_problem

    target = make_target(cfg.target)
    if why := target.missing():
        setting = f" ({target.setting()})" if target.setting() else ""
        raise PreflightError(
            f"TARGET={cfg.target}{setting}: {why}; or use TARGET={TargetName.EMBEDDED}"
        )
    _check_jobs(cfg)
    _check_sync(cfg)
    try:
        topology = load_topology(_jobs_topology(cfg) if cfg.jobs > 1 else cfg.topo)
        if cfg.ps:
            topology = topology.with_parameter_servers(cfg.ps)
        if cfg.bw is not None:
            # BW=auto starts shaped at the lowest rate it tries; calibrate() moves it.
            rate = AUTO_RATES[0] if cfg.bw == "auto" else float(cfg.bw)
            topology = topology.with_bandwidth(rate)
    except (OSError, TopologyFileError) as e:
        raise PreflightError(f"TOPO={cfg.topo}: {e}") from None
    except KeyError as e:
        raise PreflightError(f"PS={','.join(cfg.ps)}: {e.args[0]}") from None
    if missing := topology.missing_hotagg_keys():
        raise PreflightError(missing)
    for notice in topology.notices:
        say(f"note: {notice}")
    n_workers = len(topology.workers)
    if not cfg.workers:  # WORKERS empty: every worker host of the topology
        cfg.workers = n_workers
    if not 1 <= cfg.workers <= n_workers:
        raise PreflightError(
            f"WORKERS={cfg.workers}, but {cfg.topo} has {n_workers} worker hosts"
            f" (leave WORKERS empty for all of them, or TOPO=star:{cfg.workers} generates a "
            "star with that many)"
        )
    if cfg.sync != "bsp" and cfg.jobs == 1 and len(topology.parameter_servers) > 1:
        raise PreflightError(
            f"SYNC={cfg.sync}: every PS shard would read all of the switch's slots; "
            f"TOPO={cfg.topo} has {len(topology.parameter_servers)} PS shards, use one"
        )
    if cfg.aggregate == Aggregate.LEAVES:
        topology = _leaves(cfg, topology)
    aggregating = [n for n, s in topology.switches.items() if s.aggregate]
    # Each PS collects from its own switch only: a second aggregating switch would sum
    # updates that no PS ever collects (AGGREGATE=leaves flushes them to it).
    if len(aggregating) != 1 and cfg.aggregate == Aggregate.PS_LEAF:
        raise PreflightError(
            f"TOPO={cfg.topo} marks {len(aggregating)} switches 'aggregate'; the experiment "
            "needs exactly one, the switch the parameter servers hang off"
        )
    if cfg.jobs > 1:
        for job in job_configs(cfg):  # a PS each, its own key space
            _check_keys(job, 1)
            _check_workload(job)
    else:
        _check_keys(cfg, len(topology.parameter_servers))
        _check_workload(cfg)
    if cfg.hotset_source != HotSetSource.PS and cfg.hotset != HotSetMode.DYNAMIC:
        raise PreflightError(
            f"HOTSET_SOURCE={cfg.hotset_source} says what HOTSET=dynamic's loop reads; "
            f"HOTSET={cfg.hotset} runs none (add HOTSET=dynamic)"
        )
    _check_compute(cfg, topology)
    _check_ports(cfg, topology)
    if cfg.intf_prefix and (why := prefix_problem(topology, cfg.intf_prefix)):
        raise PreflightError(f"PREFIX={cfg.intf_prefix}: {why}")
    placement(cfg, topology)
    return topology


# What a run over several servers (SERVERS=) does not take yet: (refused?, the option, why).
def _cluster_refusals(cfg: RunConfig) -> list[tuple[bool, str, str]]:
    return [
        (cfg.target not in CLUSTER_TARGETS, f"TARGET={cfg.target}",
         f"runs over servers with TARGET={' or '.join(CLUSTER_TARGETS)}"),
        (cfg.jobs > 1, f"JOBS={cfg.jobs}", "one job per run over servers for now"),
        (cfg.switch_restarts > 0, f"SWITCH_RESTARTS={cfg.switch_restarts}",
         "a switch on another server is not restarted yet (its log is there)"),
    ]  # fmt: skip


CLUSTER_TARGETS = (TargetName.EMBEDDED, TargetName.BMV2)


def placement(cfg: RunConfig, topology: Topology) -> dict[str, Server]:
    """SERVERS= and PLACE=: node -> server (empty: this machine alone), from the lists alone
    (the servers themselves are checked later: topologies/cluster.py preflight)."""
    from experiment.placement import PlacementError, place

    if not cfg.servers:
        if cfg.place:
            raise PreflightError(f"PLACE={cfg.place} puts nodes on SERVERS=: give SERVERS= too")
        return {}
    try:
        servers = parse_servers(cfg.servers)
    except ClusterError as e:
        raise PreflightError(f"SERVERS={cfg.servers}: {e}") from None
    for refused, option, why in _cluster_refusals(cfg):
        if refused:
            raise PreflightError(f"SERVERS={cfg.servers}: {option} is not taken: {why}")
    try:
        where = place(topology, servers, cfg.place)
    except PlacementError as e:
        raise PreflightError(str(e)) from None
    # The controller, the online loop and the fidelity verdict read the PS and its link here.
    for ps in topology.parameter_servers:
        for node in (ps.name, topology.attachment(ps.name)[0]):
            if not where[node].is_local:
                raise PreflightError(
                    f"PLACE={cfg.place}: {node} (the parameter server {ps.name} or its switch) "
                    "stays on this machine, the coordinator"
                )
    return where


def _option_name(dest: str) -> str:
    return make_name(dest) or f"--{dest.replace('_', '-')}"


def _check_jobs(cfg: RunConfig) -> None:
    """JOBS=J: each per-job option has one value or J; the jobs run on a star the run builds
    (a PS per job), with the offload phase's static hot sets. Fills in each job's workers."""
    for name, values in cfg.per_job.items():
        if len(values) != cfg.jobs:
            given = ",".join(map(str, values))
            raise PreflightError(
                f"{_option_name(name)}={given} gives {len(values)} values; JOBS={cfg.jobs} "
                f"takes one value or {cfg.jobs} (one per job)"
            )
    if cfg.jobs == 1:
        return
    default = RunConfig()
    refused = {
        "TOPO": (
            Path(cfg.topo).resolve() != default.topo.resolve(),
            "the run builds a star with a PS per job",
        ),
        "PS": (bool(cfg.ps), "each job's PS is its own host of the run's star"),
        "AGGREGATE": (cfg.aggregate != Aggregate.PS_LEAF, "the jobs share one switch"),
        "HOTSET": (cfg.hotset != HotSetMode.STATIC, "the online loop follows one job"),
    }
    for option, (changed, why) in refused.items():
        if changed:
            raise PreflightError(
                f"JOBS={cfg.jobs}: {option}= is not taken with several jobs ({why}); leave it "
                "at its default"
            )
    if "workers" not in cfg.per_job:
        cfg.per_job["workers"] = [cfg.workers or DEFAULT_JOB_WORKERS] * cfg.jobs
    cfg.workers = sum(cfg.per_job["workers"])
    if cfg.workers > MAX_WORKERS:
        raise PreflightError(
            f"JOBS={cfg.jobs}: {cfg.workers} workers in all; the star's switch takes {MAX_WORKERS}"
        )
    if cfg.workers + cfg.jobs > MAX_PORTS:  # the run's star has a PS per job
        raise PreflightError(
            f"JOBS={cfg.jobs}: {cfg.workers} workers and {cfg.jobs} parameter servers in all; "
            f"the star's switch has {MAX_PORTS} ports for hosts"
        )
    if cfg.hot_slots < cfg.jobs:
        raise PreflightError(
            f"HOT_SLOTS={cfg.hot_slots} cannot give each of {cfg.jobs} jobs a slot"
        )


def _check_sync(cfg: RunConfig) -> None:
    """SYNC=ssp:S or async: what the PS can take (each phase's exactness is conservation,
    experiment/conservation.py, whatever the workload)."""
    if cfg.sync == "bsp":
        return
    if cfg.aggregate == Aggregate.LEAVES:
        raise PreflightError(
            f"SYNC={cfg.sync}: AGGREGATE=leaves flushes the leaves at a barrier every "
            "iteration; it runs with SYNC=bsp only"
        )


def _jobs_topology(cfg: RunConfig) -> Path:
    """JOBS=J's star: every job's workers, in job order, and a PS per job."""
    return Path(f"star:{cfg.workers}:{cfg.jobs}")


def _leaves(cfg: RunConfig, topology: Topology) -> Topology:
    """AGGREGATE=leaves: every switch with hosts aggregates (docs/design.md section 7)."""
    servers = topology.parameter_servers
    if len(servers) != 1:
        raise PreflightError(
            f"AGGREGATE=leaves flushes the leaves' sums to one PS; TOPO={cfg.topo} has "
            f"{len(servers)} (use a topology with one, e.g. TOPO=leafspine:4:4)"
        )
    topology = topology.with_leaves_aggregating()
    remote = topology.remote_leaves()
    if not remote:
        raise PreflightError(
            f"AGGREGATE=leaves: TOPO={cfg.topo} has hosts on one switch only, which "
            "AGGREGATE=ps-leaf already aggregates at; use a leaf-spine, e.g. "
            "TOPO=leafspine:4:4"
        )
    workers = cfg.workers or len(topology.workers)
    if workers + len(remote) > MAX_WORKERS:
        raise PreflightError(
            f"AGGREGATE=leaves: {workers} workers and {len(remote)} remote leaves (each "
            f"flushes as a worker of its own) exceed the switch's {MAX_WORKERS} worker ids"
        )
    return topology


def _check_keys(cfg: RunConfig, shards: int) -> None:
    """Each PS holds arrays over the whole key space: a KEYS that cannot fit would only
    fail once the PS starts."""
    need = PS_BYTES_PER_KEY * cfg.keys * shards
    available = _mem_available()
    if available is not None and need > available // 2:
        raise PreflightError(
            f"KEYS={cfg.keys}: the parameter server(s) would need {need / 2**30:.1f} GiB, "
            f"more than half of the {available / 2**30:.1f} GiB available"
        )


def _mem_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _check_workload(cfg: RunConfig) -> None:
    """The workload's options, checked as its class says (hosts/workloads/), and the workload
    built as the workers build it: each error names the make variable to change."""
    try:
        cls = workload_class(cfg.workload)
    except WorkloadError as e:
        raise PreflightError(f"WORKLOAD={cfg.workload}: {e}") from None
    for option in workload_run_options():
        given = option.flag in cfg.extra_workload_args
        if given and option not in cls.run_options:
            owners = [c.name for c in workload_classes() if option in c.run_options]
            raise PreflightError(f"{option.make}= is for WORKLOAD={one_of(owners)}")
        if not given and option.needed and option in cls.run_options:
            raise PreflightError(
                f"WORKLOAD={cls.name} needs {option.make}=<{option.metavar or 'value'}>: "
                f"{option.help}"
            )
    if cfg.drift and not cls.drifts:
        raise PreflightError(
            f"DRIFT={cfg.drift}: goes with WORKLOAD={one_of(drifting_names())}, "
            f"not WORKLOAD={cls.name}"
        )
    _check_workload_args(cfg)
    config = cfg.as_dict()
    try:
        workload = workload_of(config)  # built as the workers of the measured phases build it
    except WorkloadError as e:
        raise PreflightError(f"{' '.join(_workload_settings(cfg))}: {e}") from None
    try:
        notes = workload.check_run(config)
    except WorkloadError as e:
        raise PreflightError(str(e)) from None
    for note in notes:
        say(f"note: {note}")


def _split_workload_args(cfg: RunConfig) -> tuple[list[str], list[str]]:
    """The workers' extra options split back into the run options they came from, as a user
    writes them (TRACE=...), and the words of WORKLOAD_ARGS."""
    words, settings = list(cfg.extra_workload_args), []
    for option in workload_run_options():
        if option.flag in words[:-1]:
            at = words.index(option.flag)
            settings.append(f"{option.make}={words[at + 1]}")
            del words[at : at + 2]
    return settings, words


def _workload_settings(cfg: RunConfig) -> list[str]:
    """The make settings the workload was built from beyond its name, as a user writes them
    (TRACE=..., DRIFT=..., WORKLOAD_ARGS='...'); WORKLOAD=... when there are none."""
    settings, words = _split_workload_args(cfg)
    if cfg.drift:
        settings.append(f"DRIFT={cfg.drift}")
    if words:
        settings.append(f"WORKLOAD_ARGS={shlex.quote(shlex.join(words))}")
    return settings or [f"WORKLOAD={cfg.workload}"]


def _check_workload_args(cfg: RunConfig) -> None:
    """WORKLOAD_ARGS is for the workload's own options: one the run gives every worker itself
    would be overridden behind the run's back (its config.json would say otherwise)."""
    words = _split_workload_args(cfg)[1]
    if not words:
        return
    shown = f"WORKLOAD_ARGS={shlex.quote(shlex.join(words))}"
    try:
        given, plain = parse_args(words), parse_args([])
    except WorkloadError as e:
        raise PreflightError(f"{shown}: {e}") from None
    for dest, instead in RUN_WORKLOAD_OPTIONS.items():
        if getattr(given, dest) != getattr(plain, dest):
            flag = "--" + dest.replace("_", "-")
            how = f"; use {instead}" if instead else " (each phase sets its own)"
            raise PreflightError(f"{shown}: {flag} is the run's own option{how}")


def _check_compute(cfg: RunConfig, topology: Topology) -> None:
    """COMPUTE, STRAGGLERS and REAL_BW together: what each needs of the others, the workers
    and the links (hosts/compute.py reads each alone)."""
    spec = ComputeSpec.parse(cfg.compute or "")
    slow = Stragglers.parse(cfg.stragglers or "")
    if slow is not None and spec is None:
        raise PreflightError(f"STRAGGLERS={slow} slows the workers' compute: give COMPUTE= too")
    if slow is not None and slow.slow_workers > cfg.workers:
        raise PreflightError(
            f"STRAGGLERS={slow}: {slow.slow_workers} slow workers, but the run has {cfg.workers}"
        )
    if spec is not None and spec.real and cfg.real_bw is None:
        raise PreflightError(
            f"COMPUTE={spec} is in real time: give REAL_BW= (the real link rate the links "
            "stand for, e.g. REAL_BW=10G), or COMPUTE= in the run's emulated time"
        )
    if spec is not None and cfg.jobs > 1:
        raise PreflightError(
            f"COMPUTE={spec}: the model of several jobs counts no compute; use JOBS=1"
        )
    if cfg.real_bw is not None and cfg.bw != "auto":
        rates = [link.bandwidth for link in topology.links if link.bandwidth]
        if not rates:
            raise PreflightError(
                f"REAL_BW={cfg.real_bw:g}: the links have no rate to scale from; set BW="
            )
        if cfg.real_bw < max(rates):
            raise PreflightError(
                f"REAL_BW={cfg.real_bw:g} Mbit/s is below the links' {max(rates):g} Mbit/s: "
                "the emulated links stand for faster real ones"
            )


def _check_ports(cfg: RunConfig, topology: Topology) -> None:
    """GRPC_PORT=N gives the switches N, N+1, ...: each must exist and be free now."""
    base = cfg.grpc_base_port
    if not base:
        return
    for sw in topology.switches.values():
        number = sw.grpc_port(base)
        if number > 65535:
            raise PreflightError(
                f"GRPC_PORT={base}: {len(topology.switches)} switches need ports up to {number}"
            )
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", number))
            except OSError as e:
                raise PreflightError(
                    f"GRPC_PORT={base}: port {number} ({sw.name}) is taken ({e.strerror}); "
                    "leave GRPC_PORT empty for free ones"
                ) from None
