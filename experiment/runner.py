"""Runs the experiment's phases on a testbed: the run's directory, each phase from its plan,
and a switch that dies during a phase restarted with the phase (--switch-restarts).

Every phase starts from a freshly pushed pipeline (experiment/testbed.py), so the two
measured phases see identical switch state apart from the hot keys, and run the same
workload with the same seed.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

from experiment.agents import PhasePlan
from experiment.config import PreflightError, RunConfig, say
from experiment.options import check, placement
from experiment.phases import StartOnline, hot_keys_file, run_agents
from experiment.processes import ProcessDied
from experiment.results import PhaseResult
from experiment.testbed import Testbed
from hosts.agent import INITIAL_RTO
from topologies.cluster import ClusterError, parse_servers
from topologies.cluster import preflight as cluster_preflight
from topologies.network import missing_prerequisites
from topologies.targets import make_target


def preflight(cfg: RunConfig) -> Testbed:
    """The options first (each error names its make variable), then the machine; the
    testbed the run will bring up."""
    topology = check(cfg)
    if os.geteuid() != 0:
        raise PreflightError("make run needs root (Mininet namespaces): sudo make run")
    if why := missing_prerequisites():
        raise PreflightError(why)
    where = placement(cfg, topology)
    if where:
        servers = parse_servers(cfg.servers)
        say(f"checking the servers: {', '.join(map(str, servers))} ...")
        try:
            cluster_preflight(servers, cfg.target)
        except ClusterError as e:
            raise PreflightError(f"SERVERS={cfg.servers}: {e}") from None
        for server in servers:
            nodes = [name for name, s in where.items() if s == server]
            say(f"on {server}: {' '.join(nodes) or 'nothing'}")
    return Testbed(cfg, topology, make_target(cfg.target), where)


class Experiment:
    """A run's phases on `bed`, in the run's directory (make_run_dir)."""

    def __init__(self, cfg: RunConfig, bed: Testbed) -> None:
        self.cfg, self.bed = cfg, bed
        self.run_dir = Path()
        self.restarts: list[dict[str, Any]] = []  # switches restarted (--switch-restarts)
        # The workers' timeout before their first round trip (None: hosts.agent.INITIAL_RTO);
        # set from the warm-up by learn_initial_rto().
        self.initial_rto: float | None = None

    def make_run_dir(self) -> Path:
        """runs/<id>: the id is also the run's mark on its processes and its state file, so
        it ends in a random part (runs of other checkouts may start in the same second)."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        suffix = secrets.token_hex(3)
        run_dir = self.cfg.runs_dir / f"{stamp}-{self.cfg.target}-seed{self.cfg.seed}-{suffix}"
        run_dir.mkdir(parents=True, exist_ok=False)
        latest = self.cfg.runs_dir / "latest"
        if latest.is_symlink() or latest.exists():
            latest.unlink()
        latest.symlink_to(run_dir.name)
        self.run_dir = run_dir
        return run_dir

    def start(self) -> None:
        self.bed.start(self.run_dir.name, self.run_dir / "switch-logs")

    def run_phase(
        self,
        name: str,
        iterations: int,
        collect: bool,
        stream_offset: int = 0,
        drift: bool = False,
        online: StartOnline | None = None,
    ) -> PhaseResult:
        """A one-job run's phase (run_jobs_phase)."""
        [result] = self.run_jobs_phase(name, iterations, collect, stream_offset, drift, online)
        return result

    def run_jobs_phase(
        self,
        name: str,
        iterations: int,
        collect: bool,
        stream_offset: int = 0,
        drift: bool = False,
        online: StartOnline | None = None,
    ) -> list[PhaseResult]:
        """Run one phase of every job; a PhaseResult per job (with several jobs, each job's
        files in <phase>/job<id>/). With --switch-restarts, a switch that dies during it is
        started again, configured as before (fresh pipeline, routes, jobs, hot keys at the
        same slots) and the whole phase run again from iteration 1: the dead switch took the
        phase's sums, cache and dedup state with it, and only a complete re-run gives the
        phase's exact parameters and clean timings. The failed attempt's files are kept
        in <phase>-failed-<n>/.

        `drift`: the workload drifts as DRIFT says (the measured phases); `online(pdir)`:
        starts a loop (experiment/hotset.py) once the workers go, whose `stop()` is called
        when they are done, and the PS shards keep their frequency counters in files it
        reads (freq_name)."""
        while True:
            pdir = self.run_dir / name
            pdir.mkdir()
            plans = []
            for job in self.bed.jobs:
                jdir = pdir / f"job{job.job_id}" if len(self.bed.jobs) > 1 else pdir
                jdir.mkdir(exist_ok=True)
                offsets = self.bed.offsets_of[job.job_id]
                plan = PhasePlan(
                    name=name,
                    dir=jdir,
                    iterations=iterations,
                    collect=collect,
                    stream_offset=stream_offset,
                    drift=drift,
                    compute=drift,  # the measured phases, as DRIFT (PhasePlan.compute)
                    dynamic=online is not None,
                    job_slots=self.bed.slots_of[job.job_id],
                    hot_keys=hot_keys_file(offsets, jdir) if collect else None,
                    initial_rto=self.initial_rto,
                    deadline=int(self.cfg.phase_timeout),
                )
                plans.append((job, plan))
            try:
                return run_agents(self.bed, plans, online)
            except ProcessDied as died:
                switch = died.label.rpartition(" switch ")[2]
                if switch not in self.bed.topology.switches or (
                    len(self.restarts) >= self.cfg.switch_restarts
                ):
                    raise
                self.restart_switch(switch, name, died)

    def learn_initial_rto(self, phase: PhaseResult) -> float:
        """The measured phases' workers start with 1.5 times the largest round trip any
        worker measured in `phase` (the warm-up: the same links, the same first burst of
        every worker's window at once) as their timeout, at least INITIAL_RTO, at most the
        1 s cap: as Linux's TCP metrics cache, a connection starts from what the last one
        to that destination measured. With 32 workers behind BMv2 that first round trip
        is 0.6 s, and the 50 ms default resent each worker's first requests for nothing."""
        peak = max((w.get("rtt_max_ms", 0.0) for w in phase.worker_summaries), default=0.0)
        self.initial_rto = min(1.0, max(INITIAL_RTO, 1.5 * peak / 1e3))
        return self.initial_rto

    def restart_switch(self, switch: str, phase: str, died: ProcessDied) -> None:
        """Start the dead switch again on its interfaces and port, configure every switch
        as for the phase, and move the failed attempt aside."""
        attempt = len(self.restarts) + 1
        failed = self.run_dir / f"{phase}-failed-{attempt}"
        (self.run_dir / phase).rename(failed)
        say(f"{died.what}; restarting it and the {phase} phase ({failed.name}/ has its log)")
        self.bed.restart_switch(switch, keep_log_in=failed)  # the death's log with it
        self.restarts.append(
            {
                "switch": switch,
                "phase": phase,
                "pid": died.pid,
                "returncode": died.returncode,
                "failed_attempt": failed.name,
            }
        )
        (self.run_dir / "restarts.json").write_text(json.dumps(self.restarts, indent=1) + "\n")

    def stop(self) -> None:
        self.bed.stop()
