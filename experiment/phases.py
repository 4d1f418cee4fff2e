"""One phase of a run: the PS shards and the workers started in their Mininet hosts from the
phase's plan (experiment/agents.py), let go together, followed to their last iteration while
every process is watched, and their results read back.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from experiment.agents import PhasePlan, ps_argv, ps_files, worker_argv, worker_files
from experiment.config import ExperimentError, RunConfig
from experiment.processes import Watched, follow, start_together, stop_all, wait_all
from experiment.results import PhaseResult
from experiment.testbed import Testbed
from hosts.stats import write_hot_keys


class OnlineLoop(Protocol):
    """What a phase needs of the online hot-set loop (experiment/hotset.py OnlineLoop)."""

    def stop(self, check: bool = True) -> list[Any]: ...


# `online(phase_dir)`: starts a loop once the workers go (experiment/hotset.py).
StartOnline = Callable[[Path], OnlineLoop]


def hot_keys_file(bed: Testbed, pdir: Path) -> Path | None:
    """The hot keys at their slots for the agents of a collecting phase, if there are any."""
    if not bed.hot_offsets:
        return None
    offsets: dict[int, int | None] = {key: slot for key, slot in bed.hot_offsets.items()}
    write_hot_keys(pdir / "hot_keys.csv", offsets)
    return pdir / "hot_keys.csv"


def run_agents(
    bed: Testbed, cfg: RunConfig, plan: PhasePlan, online: StartOnline | None
) -> PhaseResult:
    """Run the phase `plan` describes once; ProcessDied if a switch or an agent dies."""
    ps_hosts = bed.topology.parameter_servers
    shards = len(ps_hosts)
    procs: list[tuple[str, subprocess.Popen]] = []
    watched: list[Watched] = []  # the agents, watched with the switches

    def check(when: str) -> None:
        bed.check_processes(when, watched)

    loop = None
    steps: list[Any] = []
    try:
        for i, host in enumerate(ps_hosts):
            switch_ip = str(bed.topology.service_ip_for(host.name))
            leaves = [str(bed.topology.switches[r].service_ip) for r in bed.remote_leaves]
            argv = ps_argv(cfg, plan, i, shards, host.ip, switch_ip, leaves)
            err = ps_files(plan, i).err
            proc = bed.spawn(host.name, argv, err)
            procs.append((f"ps{i}", proc))
            # A PS ends with 0 once every worker has passed its last barrier.
            watched.append(Watched(f"PS shard {i} on {host.name}", proc, err, may_finish=True))
            line = proc.stdout.readline() if proc.stdout else ""
            if "listening" not in line:
                raise ExperimentError(
                    f"PS on {host.name} did not start: {line.strip()} {err.read_text().strip()}"
                )
        ps_ips = [h.ip for h in ps_hosts]
        workers: list[tuple[str, subprocess.Popen, Path]] = []
        for w, host in enumerate(bed.topology.workers[: cfg.workers]):
            argv = worker_argv(cfg, plan, w, host.ip, ps_ips)
            err = worker_files(plan, w).err
            proc = bed.spawn(host.name, argv, err, stdin=subprocess.PIPE)
            procs.append((f"w{w}", proc))
            workers.append((f"w{w}", proc, err))
            watched.append(Watched(f"worker {w} on {host.name}", proc, err, may_finish=True))
        start_together(plan.name, workers, check)
        start = time.perf_counter()
        monitor = bed.monitor(procs).start()
        try:
            loop = online(plan.dir) if online is not None else None
            follow(plan.name, [p for _, p, _ in workers], plan.iterations, check)
        finally:
            fidelity = monitor.stop()
        if loop is not None:  # the workers are done: no more moves in this phase
            steps = loop.stop()
        seconds = time.perf_counter() - start
        wait_all(plan.name, procs, cfg.phase_timeout, check)
    finally:
        if loop is not None:
            loop.stop(check=False)  # a failed phase: stop it, the phase's error says why
        stop_all(procs)
    return PhaseResult(
        plan.name,
        plan.dir,
        seconds,
        [json.loads(worker_files(plan, w).summary.read_text()) for w in range(cfg.workers)],
        [json.loads(ps_files(plan, i).summary.read_text()) for i in range(shards)],
        bed.switch_stats(),
        fidelity,
        steps,
    )
