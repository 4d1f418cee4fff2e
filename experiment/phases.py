"""One phase of a run: the PS shards and the workers started in their Mininet hosts from the
phase's plan (experiment/agents.py), let go together, followed to their last iteration while
every process is watched, and their results read back.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from experiment.agents import PhasePlan, ps_argv, ps_files, worker_argv, worker_files
from experiment.config import ExperimentError
from experiment.processes import (
    Watched,
    follow,
    settle_then_check,
    start_together,
    stop_all,
    wait_all,
)
from experiment.results import PhaseResult
from experiment.testbed import JobHosts, Testbed
from hosts.stats import write_hot_keys


class OnlineLoop(Protocol):
    """What a phase needs of the online hot-set loop (experiment/hotset.py OnlineLoop)."""

    def stop(self, check: bool = True) -> list[Any]: ...


# `online(phase_dir)`: starts a loop once the workers go (experiment/hotset.py).
StartOnline = Callable[[Path], OnlineLoop]


def hot_keys_file(offsets: dict[int, int], pdir: Path) -> Path | None:
    """A job's hot keys at their slots for the agents of a collecting phase, if it has any."""
    if not offsets:
        return None
    rows: dict[int, int | None] = {key: slot for key, slot in offsets.items()}
    write_hot_keys(pdir / "hot_keys.csv", rows)
    return pdir / "hot_keys.csv"


def run_agents(
    bed: Testbed, plans: Sequence[tuple[JobHosts, PhasePlan]], online: StartOnline | None
) -> list[PhaseResult]:
    """Run the phase `plans` describe once, every job's agents together (a plan per job,
    each in its own directory); a PhaseResult per job, the switches' counters and the
    fidelity verdict shared. ProcessDied if a switch or an agent dies."""
    procs: list[tuple[str, subprocess.Popen]] = []
    watched: list[Watched] = []  # the agents, watched with the switches
    several = len(plans) > 1

    def check(when: str) -> None:
        bed.check_processes(when, watched)

    def label(kind: str, job: JobHosts) -> str:
        return f"{kind} of job {job.job_id}" if several else kind

    [first] = plans[:1]
    loop = None
    steps: list[Any] = []
    finished = False
    try:
        workers: list[tuple[str, subprocess.Popen, Path]] = []
        for job, plan in plans:
            cfg, shards = job.cfg, len(job.parameter_servers)
            tag = f"j{job.job_id}-" if several else ""
            for i, host in enumerate(job.parameter_servers):
                switch_ip = str(bed.topology.service_ip_for(host.name))
                # each remote leaf's service address and the workers behind it
                leaf_of = [bed.topology.attachment(h.name)[0] for h in job.workers]
                leaves = [
                    (
                        str(bed.topology.switches[r].service_ip),
                        [w for w, s in enumerate(leaf_of) if s == r],
                    )
                    for r in bed.remote_leaves
                ]
                argv = ps_argv(cfg, plan, i, shards, host.ip, switch_ip, leaves)
                err = ps_files(plan, i).err
                proc = bed.spawn(host.name, argv, err)
                procs.append((f"{tag}ps{i}", proc))
                # A PS ends with 0 once every worker has passed its last barrier.
                what = label(f"PS shard {i}", job)
                watched.append(Watched(f"{what} on {host.name}", proc, err, may_finish=True))
                line = proc.stdout.readline() if proc.stdout else ""
                if "listening" not in line:
                    settle_then_check(proc, check, f"{plan.name}: starting the PS")
                    raise ExperimentError(
                        f"PS on {host.name} did not start: {line.strip()} {err.read_text().strip()}"
                    )
            ps_ips = [h.ip for h in job.parameter_servers]
            for w, host in enumerate(job.workers):
                argv = worker_argv(cfg, plan, w, host.ip, ps_ips)
                err = worker_files(plan, w).err
                proc = bed.spawn(host.name, argv, err, stdin=subprocess.PIPE)
                procs.append((f"{tag}w{w}", proc))
                workers.append((f"{tag}w{w}", proc, err))
                what = label(f"worker {w}", job)
                watched.append(Watched(f"{what} on {host.name}", proc, err, may_finish=True))
        name, iterations = first[1].name, max(plan.iterations for _, plan in plans)
        bed.record_remote_agents()
        start_together(name, workers, check)
        start = time.perf_counter()
        monitor = bed.monitor(procs).start()
        try:
            loop = online(first[1].dir) if online is not None else None
            follow(name, [p for _, p, _ in workers], iterations, check)
        finally:
            fidelity = monitor.stop()
        # Several jobs: each judged on its own hosts' links (PhaseMonitor.verdict_for).
        verdicts = [
            monitor.verdict_for({h.name for h in (*job.workers, *job.parameter_servers)})
            if several
            else fidelity
            for job, _ in plans
        ]
        if loop is not None:  # the workers are done: no more moves in this phase
            steps = loop.stop()
        seconds = time.perf_counter() - start
        wait_all(name, procs, bed.cfg.phase_timeout, check)
        finished = True
    finally:
        if loop is not None:
            loop.stop(check=False)  # a failed phase: stop it, the phase's error says why
        stop_all(procs)
        # The files of agents on other servers come back, a failed phase's too; a failed
        # copy then must not hide why the phase failed.
        if finished:
            bed.collect()
        else:
            with contextlib.suppress(ExperimentError):
                bed.collect()
    switch_stats = bed.switch_stats()
    return [
        PhaseResult(
            plan.name,
            plan.dir,
            seconds,
            [
                json.loads(worker_files(plan, w).summary.read_text())
                for w in range(len(job.workers))
            ],
            [
                json.loads(ps_files(plan, i).summary.read_text())
                for i in range(len(job.parameter_servers))
            ],
            switch_stats,
            job_fidelity,
            steps,
        )
        for (job, plan), job_fidelity in zip(plans, verdicts)
    ]
