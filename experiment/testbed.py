"""The run's network: Mininet with switches of the run's target, a P4Runtime session to each,
what the switches are configured with, and their processes watched.

Every phase starts from a freshly pushed pipeline (which clears the switches' tables,
registers and counters on every target), so the two measured phases see identical switch
state apart from the hot keys.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from mininet.link import TCIntf

from contract.constants import Stat
from contract.p4files import P4INFO_PATH
from controller.client import SwitchClient
from controller.drop_sim import DropSim
from controller.errors import ControllerError
from controller.forwarding import Forwarding, compute_routes
from controller.hot_keys import HotKeys
from controller.jobs import Jobs
from controller.leaves import ChainNext, ServiceAddress
from controller.p4info import P4Info
from controller.stats import Stats
from controller.tenancy import Tenancy, admissions_from_topology, leaf_admissions
from experiment.config import JOB_ID, Aggregate, ExperimentError, RunConfig, job_configs, say
from experiment.fidelity import LinkProbe, PhaseMonitor
from experiment.processes import Watched, raise_first_death
from experiment.staging import STAGING_ROOT, Staging
from topologies.cluster import Server
from topologies.cluster_state import (
    cleanup_servers,
    record_network,
    record_server,
    record_ssh_clients,
)
from topologies.network import Network, start_network
from topologies.switches import REPO_ROOT
from topologies.targets import Target
from topologies.topology import Host, Topology

REMOTE_PID_WAIT = 10.0  # seconds for the agents of a phase to report their pids on a server


def clean_servers(run_id: str) -> None:
    """At the run's stop: what it recorded on its servers cleaned there, and their records
    (make stop's part, topologies/cluster_state.py); a server not reached is named, and
    make stop tries it again."""
    report = cleanup_servers(run_id)
    if not report.ok:
        for line in report.lines:
            say(f"warning: {line}")


@dataclass(frozen=True)
class JobHosts:
    """One job of the run: its own configuration and the hosts its agents run on."""

    cfg: RunConfig
    workers: list[Host]
    parameter_servers: list[Host]

    @property
    def job_id(self) -> int:
        return self.cfg.job_id


def place_jobs(cfg: RunConfig, topology: Topology) -> list[JobHosts]:
    """Each job's hosts: the topology's worker hosts in order, each job taking as many as it
    has workers; one job gets every PS (its shards), J jobs a PS each (options.check builds
    JOBS=J's star so)."""
    configs = job_configs(cfg)
    servers = topology.parameter_servers
    out, first = [], 0
    for j, job in enumerate(configs):
        own = servers if len(configs) == 1 else servers[j : j + 1]
        out.append(JobHosts(job, topology.workers[first : first + job.workers], own))
        first += job.workers
    return out


class Testbed:
    """The switches and hosts of a run, once start() has brought them up."""

    def __init__(
        self,
        cfg: RunConfig,
        topology: Topology,
        target: Target,
        placement: Mapping[str, Server] | None = None,
    ) -> None:
        self.cfg, self.topology, self.target = cfg, topology, target
        # node -> server when the run is spread over several (experiment/placement.py)
        self.placement = dict(placement or {})
        self.staging: Staging | None = None  # the run's files on the other servers
        # agents started on other servers and not yet recorded there (record_remote_agents)
        self.unrecorded: list[tuple[str, Server, subprocess.Popen]] = []
        self.net: Network | None = None
        self.clients: dict[str, SwitchClient] = {}
        self.p4info = P4Info.from_file(P4INFO_PATH)
        self.device_config = b""  # the target's, read by start()
        self.jobs = place_jobs(cfg, topology)
        # Per job, set by configure(): its slot count, and hot key -> slot offset.
        self.slots_of: dict[int, int] = {j.job_id: cfg.hot_slots for j in self.jobs}
        self.offsets_of: dict[int, dict[int, int]] = {j.job_id: {} for j in self.jobs}
        # job -> hot keys, as last configured, for a restarted switch
        self.hot_keys: dict[int, list[int] | None] = {}

    @property
    def job_slots(self) -> int:
        """A one-job run's slot count (the online loop's budget)."""
        return self.slots_of[JOB_ID]

    @property
    def hot_offsets(self) -> dict[int, int]:
        """A one-job run's hot key -> slot offset."""
        return self.offsets_of[JOB_ID]

    @property
    def network(self) -> Network:
        if self.net is None:
            raise ExperimentError("the network is not up (Testbed.start)")
        return self.net

    @property
    def aggregating_switch(self) -> str:
        """The switch that sums the hot keys, the PS's (with AGGREGATE=leaves, the root)."""
        [ps] = self.topology.parameter_servers[:1]
        return self.topology.attachment(ps.name)[0]

    @property
    def remote_leaves(self) -> list[str]:
        """AGGREGATE=leaves: the other aggregating switches, in chain order; else none."""
        if self.cfg.aggregate != Aggregate.LEAVES:
            return []
        return self.topology.remote_leaves()

    # --- set-up ---

    def start(self, run_id: str, log_dir: Path) -> None:
        """The network up, then a P4Runtime session to every switch."""
        self.device_config = self.target.device_config()
        spread = any(not s.is_local for s in self.placement.values())
        if spread:
            self.staging = Staging(self.cfg.runs_dir / run_id, run_id)
        say(f"starting {self.cfg.topo.name} with {self.target.name} switches ...")
        try:
            self.net = start_network(
                self.topology,
                self.target,
                grpc_base_port=self.cfg.grpc_base_port,
                run_id=run_id,
                intf_prefix=self.cfg.intf_prefix or None,  # None: an unused one
                log_dir=log_dir,
                seed=self.cfg.seed,
                placement=self.placement,
                # a remote switch's log: <server's staging directory>/<switch>.log there
                remote_log_dir=STAGING_ROOT / run_id,
                record_servers=(lambda net: record_network(run_id, net)) if spread else None,
                clean_servers=(lambda: clean_servers(run_id)) if spread else None,
            )
        except Exception as e:
            hint = ""
            if "File exists" in str(e) or "Address already in use" in str(e):
                hint = " (an earlier run may have left it behind: sudo make stop)"
            raise ExperimentError(f"the network did not come up: {e}{hint}") from e
        say(
            f"run {run_id}: interface prefix {self.net.intf_prefix!r}; "
            f"stop it alone with: sudo make stop RUN={run_id}"
        )
        for name, addr in self.net.grpc_addrs.items():
            self.clients[name] = SwitchClient(addr, self.net.device_ids[name], wait=10.0).connect()
        say(
            "network up; P4Runtime: "
            + ", ".join(f"{n} {a}" for n, a in self.net.grpc_addrs.items())
        )

    def configure(self, hot_keys: list[int] | None) -> None:
        """A one-job run's configure_jobs: `hot_keys` for its job."""
        self.configure_jobs({JOB_ID: hot_keys})

    def configure_jobs(self, hot_keys: Mapping[int, list[int] | None]) -> None:
        """Fresh pipeline on every switch, routes, each job and its admissions, the drop
        rate, and each job's hot keys ({job id: keys}, None: none) on the aggregating
        switches."""
        # A job gets as many slots as it has hot keys (at most its share of HOT_SLOTS), so
        # that its PS collects no slot that can never hold a sum; without hot keys, its share.
        share = self.cfg.hot_slots // len(self.jobs)
        self.hot_keys = dict(hot_keys)
        for job in self.jobs:
            keys = hot_keys.get(job.job_id)
            self.slots_of[job.job_id] = max(1, len(keys)) if keys else share
            self.offsets_of[job.job_id] = {}
        with self.naming_dead_switches("configuring the switches"):
            for name, client in self.clients.items():
                client.set_pipeline(self.p4info.message, self.device_config)
                Forwarding(client, self.p4info).install(compute_routes(self.topology, name))
                for job in self.jobs:
                    self._configure_job(name, client, job, hot_keys.get(job.job_id))
                self._configure_leaves(name, client)
                DropSim(client, self.p4info).set(self.cfg.loss)

    def _configure_job(
        self, name: str, client: SwitchClient, job: JobHosts, hot_keys: list[int] | None
    ) -> None:
        """One job on switch `name`: its slots, admissions and hot keys."""
        entry = Jobs(client, self.p4info).add(job.job_id, self.slots_of[job.job_id])
        workers = [h.name for h in job.workers]
        ps = [h.name for h in job.parameter_servers]
        # Tenancy: the switch serves the job only from its hosts' (port, address).
        adms = admissions_from_topology(self.topology, name, job.job_id, workers, ps)
        if self.remote_leaves:
            adms += leaf_admissions(self.topology, name, job.job_id, ps[0], len(workers))
        Tenancy(client, self.p4info).admit(adms)
        if hot_keys and self.topology.switches[name].aggregate:
            report = HotKeys(client, self.p4info).install(entry, hot_keys)
            self.offsets_of[job.job_id] = dict(report.added)

    def _configure_leaves(self, name: str, client: SwitchClient) -> None:
        """AGGREGATE=leaves (docs/design.md section 7): each aggregating switch answers PS
        ops at its own service address only, the others route them on (TRANSIT); each
        remote leaf passes a chained WRITEBACK on to the next."""
        chain = self.remote_leaves
        if not chain:
            return
        sw = self.topology.switches[name]
        if sw.aggregate and sw.service_ip:
            ServiceAddress(client, self.p4info).set(sw.service_ip)
        else:
            ServiceAddress(client, self.p4info).set_transit()
        if name in chain[:-1]:
            after = self.topology.switches[chain[chain.index(name) + 1]]
            ChainNext(client, self.p4info).set(str(after.service_ip))

    def set_bandwidth(self, mbps: float) -> None:
        """Reshape every link of the running network to `mbps` (both ends; the links were
        built shaped, see options.check), keeping each interface's other settings."""
        for link in self.network.net.links:
            for intf in (link.intf1, link.intf2):
                if isinstance(intf, TCIntf):
                    intf.config(**{**intf.params, "bw": mbps})
        self.topology = self.topology.with_bandwidth(mbps)

    # --- the switch processes ---

    def watched_switches(self) -> list[Watched]:
        out = []
        for name in self.topology.switches:
            process = self.network.switch(name).process
            if process is not None and process.proc is not None:
                label = f"{self.target.name} switch {name}"
                out.append(Watched(label, process.proc, process.log_path))
        return out

    def check_processes(self, when: str, agents: Sequence[Watched] = ()) -> None:
        """Raise ProcessDied for the first of the switches and `agents` that has died;
        switches first, since a dead switch stalls the agents behind it."""
        raise_first_death(when, [*self.watched_switches(), *agents])

    @contextlib.contextmanager
    def naming_dead_switches(self, when: str) -> Iterator[None]:
        """A P4Runtime failure caused by a switch process that died is reported as that
        death (ProcessDied), not as an unreachable address."""
        self.check_processes(when)
        try:
            yield
        except ControllerError:
            with contextlib.suppress(subprocess.TimeoutExpired):
                # a process killed a moment ago may not have been reaped yet
                for watched in self.watched_switches():
                    watched.proc.wait(0.5)
            self.check_processes(when)
            raise

    def restart_switch(self, name: str, keep_log_in: Path) -> None:
        """Start switch `name` again on its interfaces and port (its dead process's log
        moved into `keep_log_in`), then configure every switch as for a phase: the
        controller's session re-arbitrates by itself (controller/client.py), and the
        other switches get a fresh pipeline too, as at the start of any phase."""
        process = self.network.switch(name).process
        if process is None:
            raise ExperimentError(f"switch {name} was never started")
        process.log_path.rename(keep_log_in / process.log_path.name)
        process.start()
        self.configure_jobs(self.hot_keys)

    def switch_pid(self, name: str) -> int | None:
        process = self.network.switch(name).process
        return process.proc.pid if process is not None and process.proc is not None else None

    # --- what a phase uses ---

    def spawn(
        self, host: str, argv: list[str], err: Path, stdin: int | None = None
    ) -> subprocess.Popen:
        """Start `argv` inside Mininet host `host`; stdout is piped, stderr goes to `err`.
        On another server, its files are that server's staged copies (experiment/staging.py;
        collect() brings them back) and its stderr still comes to `err`."""
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1"}
        server = self.network.server_of(host)
        if server is not None and self.staging is not None:
            argv = self.staging.push(server, argv)
        with open(err, "w") as err_file:  # the child keeps its own descriptor
            proc: subprocess.Popen = self.network.host(host).popen(
                argv,
                cwd=REPO_ROOT,
                env=env,
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=err_file,
                text=True,
            )
        if server is not None:
            self.unrecorded.append((host, server, proc))
        else:
            self.network.record_agent(host, proc.pid)  # for make stop after a SIGKILL
        return proc

    def record_remote_agents(self) -> None:
        """Record the agents spawned on other servers since the last call, as make stop
        finds them (topologies/cluster_state.py): each one's process group on its server,
        its ssh client here. Each pid is the first line its wrapper prints: waited for here,
        once every agent of a phase has started, then one round trip per server."""
        if not self.unrecorded:
            return
        run_id, state_dir = self.network.run_id, self.network.state_path.parent
        deadline = time.monotonic() + REMOTE_PID_WAIT
        groups: dict[Server, dict[str, int]] = {}
        for host, server, proc in self.unrecorded:
            while getattr(proc, "remote_pid", None) is None and proc.poll() is None:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.01)
            if (pid := getattr(proc, "remote_pid", None)) is not None:
                groups.setdefault(server, {})[f"agent {host}"] = pid
        clients = {f"agent {host}": proc.pid for host, _, proc in self.unrecorded}
        self.unrecorded.clear()
        record_ssh_clients(run_id, clients, state_dir)
        for server, pids in groups.items():
            try:
                record_server(run_id, server, process_groups=pids, state_dir=state_dir)
            except RuntimeError as e:  # make stop could not find them there: stop now
                raise ExperimentError(str(e)) from None

    def collect(self) -> None:
        """Bring the files the agents on other servers wrote in this phase into the run's
        folder (the summaries, parameters, logs and per-request records)."""
        if self.staging is not None:
            self.staging.collect()

    def monitor(self, procs: Sequence[tuple[str, subprocess.Popen]]) -> PhaseMonitor:
        """A fidelity monitor over this phase's processes, the switches and every link. A run
        over several servers is judged on this machine's part only: the processes and links
        of the other servers are not sampled here (their /proc and /sys are theirs)."""
        here = self.network.server_of
        pids = {
            f"switch {name}": self.switch_pid(name)
            for name in self.topology.switches
            if here(name) is None
        }
        # an agent on another server is a RemoteProcess (topologies/remote.py): its pid here
        # is its ssh's
        pids.update((label, proc.pid) for label, proc in procs if not hasattr(proc, "remote_pid"))
        ps_names = {h.name for h in self.topology.parameter_servers}
        links = []
        for link in self.topology.links:
            # Seen from its switch end (either end of a switch-switch link carries the same).
            if link.is_host_link:
                switch, port = link.node2, link.port2
            else:
                assert link.port1 is not None  # node1 of a switch-switch link is a switch
                switch, port = link.node1, link.port1
                if here(switch) is not None and here(link.node2) is None:
                    switch, port = link.node2, link.port2  # its end on this machine
            if here(switch) is not None:
                continue
            links.append(
                LinkProbe(
                    f"{link.node1}-{link.node2}",
                    self.network.switch(switch).intfs[port].name,
                    link.bandwidth,
                    to_ps=link.node1 in ps_names,
                    at=switch,
                    between_switches=not link.is_host_link,
                )
            )
        return PhaseMonitor({k: v for k, v in pids.items() if v}, links)

    def switch_stats(self) -> dict[str, dict[str, int]]:
        """switch -> stat name -> packets, from every switch's counters."""
        out = {}
        with self.naming_dead_switches("reading the switches' counters"):
            for name, client in self.clients.items():
                cells = Stats(client, self.p4info).read()
                known = {s.value for s in Stat}  # reasons may leave gaps in the cells
                out[name] = {c.name: c.packets for c in cells if c.index in known}
        return out

    # --- the end ---

    def close_clients(self) -> None:
        for client in self.clients.values():
            with contextlib.suppress(Exception):  # best effort on the way out
                client.close()
        self.clients.clear()

    def stop(self) -> None:
        self.close_clients()
        if self.net is not None:
            logs = self.remote_switch_logs()
            try:
                self.net.stop()
            finally:
                self.net = None
                self._bring_back(logs)

    def remote_switch_logs(self) -> list[tuple[Server, Path, Path]]:
        """(server, its log there, where it goes here) of every switch on another server."""
        out = []
        for name in self.topology.switches:
            server = self.network.server_of(name)
            process = self.network.switch(name).process
            if server is not None and process is not None:
                local = self.target.log_path(self.network.log_dir, name)
                out.append((server, process.log_path, local))
        return out

    def _bring_back(self, logs: Sequence[tuple[Server, Path, Path]]) -> None:
        """After the stop: the remote switches' logs into the run's switch-logs/, as a local
        switch's, then the run's staging directories removed (best effort: the run's own
        error, if any, is what the user must see)."""
        if self.staging is None:
            return
        for server, remote, local in logs:
            try:
                self.staging.fetch(server, remote, local)
            except ExperimentError as e:
                say(f"warning: the log of a switch on {server} did not come back: {e}")
        for failure in self.staging.remove():
            say(f"warning: a staging directory was not removed: {failure}")
