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
import socket
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from contract.constants import MAX_WORKERS, NUM_SLOTS
from experiment.runner import AUTO_RATES, PreflightError, RunConfig, say, trace_path
from topologies.topology import Topology

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
    "trace": "TRACE",
    "grpc_base_port": "GRPC_PORT",
    "intf_prefix": "PREFIX",
    "hotset": "HOTSET",
    "hotset_source": "HOTSET_SOURCE",
    "drift": "DRIFT",
    "switch_restarts": "SWITCH_RESTARTS",
}
SEED_MAX = 2**32 - 1
MAX_BW_MBPS = 1000.0  # Mininet's TCIntf ignores (only logs) a rate above this
T = TypeVar("T", int, float)
PS_BYTES_PER_KEY = 24  # three int64 arrays over the whole key space per PS (hosts/ps.py)


class OptionParser(argparse.ArgumentParser):
    """argparse whose errors name the make variable too: "SEED (--seed): -1 is negative"."""

    def error(self, message: str) -> None:  # type: ignore[override]
        def named(m: re.Match[str]) -> str:
            make = MAKE_NAMES.get(m.group(1).replace("-", "_"))
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
    """DRIFT: `every=K,fraction=F[,head=H]` (hosts/workloads.py), or empty/none for none;
    returned in its normal form, as the workers are given it."""
    from hosts.workloads import DriftSpec, WorkloadError

    try:
        spec = DriftSpec.parse(text)
    except WorkloadError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return None if spec is None else str(spec)


def check(cfg: RunConfig) -> Topology:
    """Everything about the options that argparse cannot see alone; the loaded topology.
    Raises PreflightError naming the option. Needs neither root nor a network."""
    from topologies.network import prefix_problem
    from topologies.switches import bmv2_binary, bmv2_missing
    from topologies.topology import TopologyFileError, load_topology

    if cfg.target == "bmv2" and (why := bmv2_missing()):
        raise PreflightError(
            f"TARGET=bmv2 (BMV2_BINARY={bmv2_binary()}): {why}; or use TARGET=embedded"
        )
    try:
        topology = load_topology(cfg.topo)
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
    if not 1 <= cfg.workers <= n_workers:
        raise PreflightError(
            f"WORKERS={cfg.workers}, but {cfg.topo} has {n_workers} worker hosts"
            f" (TOPO=star:{cfg.workers} generates a star with that many)"
        )
    aggregating = [n for n, s in topology.switches.items() if s.aggregate]
    # Each PS collects from its own switch only: a second aggregating switch would sum
    # updates that no PS ever collects.
    if len(aggregating) != 1:
        raise PreflightError(
            f"TOPO={cfg.topo} marks {len(aggregating)} switches 'aggregate'; the experiment "
            "needs exactly one, the switch the parameter servers hang off"
        )
    _check_keys(cfg, len(topology.parameter_servers))
    _check_trace(cfg)
    _check_drift(cfg)
    if cfg.hotset_source != "ps" and cfg.hotset != "dynamic":
        raise PreflightError(
            f"HOTSET_SOURCE={cfg.hotset_source} says what HOTSET=dynamic's loop reads; "
            f"HOTSET={cfg.hotset} runs none (add HOTSET=dynamic)"
        )
    _check_ports(cfg, topology)
    if cfg.intf_prefix and (why := prefix_problem(topology, cfg.intf_prefix)):
        raise PreflightError(f"PREFIX={cfg.intf_prefix}: {why}")
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


def _check_trace(cfg: RunConfig) -> None:
    """A trace run needs its file, and enough iterations for the warm-up followed by the
    measured iterations (the warm-up reads the trace's first WARMUP iterations, the
    measured phases the ones after them)."""
    trace = trace_path(cfg)
    if cfg.workload != "trace":
        if trace is not None:
            raise PreflightError("TRACE= is for WORKLOAD=trace")
        return
    if trace is None:
        raise PreflightError("WORKLOAD=trace needs TRACE=<file> (format: hosts/workloads.py)")
    from hosts.workloads import TraceWorkload, WorkloadError

    try:
        workload = TraceWorkload.from_csv(trace, cfg.keys, cfg.seed)
    except (OSError, WorkloadError) as e:
        raise PreflightError(f"TRACE={trace}: {e}") from None
    if workload.iterations < cfg.warmup + cfg.iterations:
        raise PreflightError(
            f"TRACE={trace} has {workload.iterations} iterations; the warm-up ({cfg.warmup})"
            f" and ITERATIONS={cfg.iterations} need {cfg.warmup + cfg.iterations}, since "
            "the hot set is learnt from iterations that are then not measured"
        )
    if workload.workers > cfg.workers:
        say(
            f"note: TRACE={trace} has {workload.workers} workers; "
            f"only the first WORKERS={cfg.workers} run"
        )


def _check_drift(cfg: RunConfig) -> None:
    """DRIFT moves a generated workload's popular head: not a trace's, and its head must be
    smaller than the ranks it drifts over (KEYS for zipf, the feature values for lr)."""
    if cfg.drift is None:
        return
    if cfg.workload == "trace":
        raise PreflightError(f"DRIFT={cfg.drift}: goes with WORKLOAD=zipf or lr, not a trace")
    from experiment.model import workload_of
    from hosts.workloads import WorkloadError

    try:
        workload_of(cfg.as_dict())  # built as the workers build it
    except WorkloadError as e:
        raise PreflightError(f"DRIFT={cfg.drift}: {e}") from None


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
