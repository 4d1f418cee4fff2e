"""The agents' command lines: one typed description of a phase (PhasePlan) and a function per
agent kind that turns it and the run's configuration into the argv of `hosts.ps` or
`hosts.worker`, with the files each writes in the phase's directory.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from contract.constants import HOTAGG_PORT
from experiment.config import Aggregate, RunConfig, freq_name
from hosts.compute import ComputeSpec
from hosts.push_log import push_log_path


@dataclass(frozen=True)
class PhasePlan:
    """What one phase asks of its agents."""

    name: str
    dir: Path
    iterations: int
    collect: bool  # offload: the PS collects the switch's sums
    stream_offset: int  # where the workload is read (experiment/config.py)
    drift: bool  # the workload drifts as DRIFT says (the measured phases)
    dynamic: bool  # an online loop reads the PS's counters while it runs (freq_name)
    job_slots: int  # the job's slots on the switch
    hot_keys: Path | None  # the initial hot keys and their slots (hot_keys.csv), if any
    initial_rto: float | None  # the workers' first timeout (None: hosts.agent's)
    deadline: int  # seconds an agent waits for the phase before it gives up
    # The workers compute as COMPUTE= says (the measured phases; the warm-up and BW=auto's
    # calibration measure the network alone).
    compute: bool = False


@dataclass(frozen=True)
class AgentFiles:
    """An agent's files in its phase's directory: its log, summary and stderr."""

    log: Path
    summary: Path
    err: Path


def ps_files(plan: PhasePlan, shard: int) -> AgentFiles:
    d = plan.dir
    return AgentFiles(d / f"ps{shard}.csv", d / f"ps{shard}.json", d / f"ps{shard}.err")


def worker_files(plan: PhasePlan, worker: int) -> AgentFiles:
    d = plan.dir
    return AgentFiles(d / f"w{worker}.csv", d / f"w{worker}.json", d / f"w{worker}.err")


def python_module(module: str, args: list[str]) -> list[str]:
    """`args` for `python -m module`, with this interpreter."""
    return [sys.executable, "-m", module, *args]


def workload_args(cfg: RunConfig, plan: PhasePlan) -> list[str]:
    """The workers' workload options (hosts/workloads/): the same stream in every phase,
    read from `plan.stream_offset` on."""
    return [
        "--workload", str(cfg.workload), "--keys", str(cfg.keys), "--skew", str(cfg.skew),
        "--seed", str(cfg.seed), "--stream-offset", str(plan.stream_offset),
        "--keys-per-iter", str(cfg.keys_per_iter),
        *cfg.extra_workload_args,
        *(["--drift", cfg.drift] if plan.drift and cfg.drift else []),
    ]  # fmt: skip


def compute_args(cfg: RunConfig, plan: PhasePlan) -> list[str]:
    """The workers' compute options (hosts/compute.py) in the run's emulated time: a real-time
    COMPUTE= multiplied by the run's time scale. Seeded by --seed, as the workload is."""
    spec = ComputeSpec.parse(cfg.compute or "")
    if not plan.compute or spec is None:
        return []
    args = ["--compute", str(spec.scaled(cfg.time_scale))]
    return args + (["--stragglers", cfg.stragglers] if cfg.stragglers else [])


def hot_key_args(plan: PhasePlan) -> list[str]:
    """The PS fills the cache before iteration 1 and the workers group the hot keys from
    the start, instead of learning them in the first two iterations."""
    return ["--hot-keys", str(plan.hot_keys)] if plan.hot_keys is not None else []


def ps_argv(
    cfg: RunConfig,
    plan: PhasePlan,
    shard: int,
    shards: int,
    ip: str,
    switch_ip: str,
    leaves: Sequence[tuple[str, Sequence[int]]] = (),
) -> list[str]:
    """PS shard `shard` of `shards` of the job `cfg` describes, on address `ip`; with
    `plan.collect`, it collects the hot slots from the switch at `switch_ip`, and first
    flushes the remote leaves `leaves` (AGGREGATE=leaves: each one's service address and the
    workers behind it), leaf i as pseudo-worker workers + i."""
    files = ps_files(plan, shard)
    args = [
        "--job", str(cfg.job_id), "--workers", str(cfg.workers), "--keys", str(cfg.keys),
        "--iterations", str(plan.iterations), "--bind", f"{ip}:{HOTAGG_PORT}",
        "--shard", f"{shard}/{shards}", "--log", str(files.log),
        "--freq", str(plan.dir / freq_name(shard, plan.dynamic)),
        "--params", str(plan.dir / f"params{shard}.npy"), "--summary", str(files.summary),
        "--deadline", str(plan.deadline), "--sync", cfg.sync,
    ]  # fmt: skip
    if plan.collect:
        args += ["--collect", "--switch", switch_ip, "--hot-slots", str(plan.job_slots)]
        args += hot_key_args(plan)
        for i, (leaf, rack) in enumerate(leaves):
            args += ["--leaf", f"{leaf}/{cfg.workers + i}/{','.join(map(str, rack))}"]
    return python_module("hosts.ps", args)


def worker_argv(
    cfg: RunConfig, plan: PhasePlan, worker: int, ip: str, ps_ips: list[str]
) -> list[str]:
    """Worker `worker` on address `ip`, talking to the PS shards at `ps_ips`; it says
    'ready', waits for 'go' on stdin and reports its progress (experiment/processes.py)."""
    files = worker_files(plan, worker)
    rto = ["--rto-initial", f"{plan.initial_rto:.4f}"] if plan.initial_rto else []
    # AGGREGATE=leaves: the PS flushes a leaf once its rack's hot pushes are acked
    leaves = plan.collect and cfg.aggregate is Aggregate.LEAVES
    hot_pushed = ["--signal-hot-pushed"] if leaves else []
    args = [
        "--job", str(cfg.job_id), "--worker-id", str(worker),
        "--ps", ",".join(f"{p}:{HOTAGG_PORT}" for p in ps_ips),
        "--iterations", str(plan.iterations), "--bind", f"{ip}:0",
        "--log", str(files.log), "--summary", str(files.summary),
        "--pushes", str(push_log_path(plan.dir, worker)),
        "--deadline", str(plan.deadline), "--progress", "--wait-go",
        *rto, *hot_pushed, *hot_key_args(plan), *compute_args(cfg, plan),
        *workload_args(cfg, plan),
    ]  # fmt: skip
    return python_module("hosts.worker", args)
