"""Runs the experiment: network up, forwarding, warm-up, server-only and offloaded phases.

Every phase starts from a freshly pushed pipeline (which clears the switches' tables,
registers and counters on both targets), so the two measured phases see identical switch
state apart from the hot keys, and run the same workload with the same seed.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from contract.constants import HOTAGG_PORT, Stat
from contract.p4files import P4INFO_PATH
from experiment.fidelity import LinkProbe, PhaseMonitor
from hosts.agent import INITIAL_RTO
from hosts.stats import write_hot_keys
from topologies.switches import REPO_ROOT, log_tail

P4INFO = P4INFO_PATH
BMV2_JSON = REPO_ROOT / "build" / "hotagg.json"
JOB_ID = 1


class ExperimentError(RuntimeError):
    """The run cannot go on; the message says why and what to do."""


class PreflightError(ExperimentError):
    """The run cannot start: bad options or missing prerequisites."""


class ProcessDied(ExperimentError):
    """A process the run started (a switch, a PS shard, a worker) exited before its phase
    was over. The first line of the message names it, its pid and how it ended; the lines
    after it are the tail of its log."""

    def __init__(self, when: str, watched: Watched, returncode: int) -> None:
        self.label, self.pid, self.returncode = watched.label, watched.pid, returncode
        self.what = f"{when}: {watched.label} (pid {watched.pid}) {exit_description(returncode)}"
        tail = log_tail(watched.log, DIED_LOG_LINES)
        lines = "\n".join(f"  | {line}" for line in tail.splitlines())
        super().__init__(f"{self.what}; the run stopped. Last lines of {watched.log}:\n{lines}")


DIED_LOG_LINES = 8
WATCH_INTERVAL = 0.5  # seconds between checks of the run's processes


def exit_description(returncode: int) -> str:
    """'exited with code 3', 'was killed by SIGKILL' (Popen's negative return codes)."""
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}"


# Iterations between the online loop's re-selections, by what it reads (hotset_source). With
# the PS's counters, every iteration: a key that enters the head is in the set an iteration
# sooner, and the change test looks back as many iterations (experiment/hotset.py
# change_window). The switch's source stays at 2: each step reads the hit counters and the
# followed sketch cells (~10 ms of the embedded switch's CPU), and a report threshold over one
# iteration (2 updates) would report many more tail keys; not measured at 1.
HOTSET_EVERY = {"ps": 1, "switch": 2}


@dataclass
class Watched:
    """A process the runner started and watches: a switch, a PS shard or a worker.
    `may_finish`: exiting with 0 is how it ends its part (an agent), not a failure."""

    label: str
    proc: subprocess.Popen
    log: Path
    may_finish: bool = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def failed(self) -> int | None:
        """Its return code if it has exited in a way that ends the run, else None."""
        rc = self.proc.poll()
        if rc is None or (rc == 0 and self.may_finish):
            return None
        return rc


@dataclass
class RunConfig:
    target: str = "embedded"
    topo: Path = REPO_ROOT / "topologies" / "star.json"
    workers: int = 0  # 0: every worker host of the topology (options.check fills it in)
    iterations: int = 50
    skew: float = 1.1
    keys: int = 100_000
    keys_per_iter: int = 256
    hot_slots: int = 256
    loss: float = 0.0
    seed: int = 1
    workload: str = "zipf"
    warmup: int = 5
    # Mbit/s on every link, instead of the topology's (None: as given; "auto": calibrated)
    bw: float | str | None = None
    ps: list[str] = field(default_factory=list)  # PS hosts, for files without hotagg's roles
    runs_dir: Path = REPO_ROOT / "runs"
    grpc_base_port: int = 0  # P4Runtime port of the first switch; 0: free ports
    intf_prefix: str = ""  # keeps switch interface names of concurrent runs apart; "": own
    keep: bool = False  # leave the network up after the run, until Ctrl-C
    # A switch that dies during a phase is restarted and the phase run again, this many
    # times per run at most (0: the run ends, ProcessDied).
    switch_restarts: int = 0
    phase_timeout: float = 600.0
    extra_workload_args: list[str] = field(default_factory=list)
    # The hot set during the offload phase: "static" (the warm-up's, frozen) or "dynamic"
    # (the online loop re-selects every `hotset_every` iterations, experiment/hotset.py).
    hotset: str = "static"
    hotset_every: int = 0  # 0: the source's pace, HOTSET_EVERY[hotset_source]
    # What the online loop reads: "ps" (the PS shards' .live counters) or "switch" (the
    # hot-key tables' hit counters and the cold-key sketch's reports: nothing from the PS).
    hotset_source: str = "ps"
    drift: str | None = None  # the measured phases' --drift (hosts/workloads.py), or None

    def __post_init__(self) -> None:
        if not self.hotset_every:  # an unknown source is refused where it is checked
            self.hotset_every = HOTSET_EVERY.get(self.hotset_source, HOTSET_EVERY["ps"])

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["topo"], d["runs_dir"] = str(self.topo), str(self.runs_dir)
        return d


# BW=auto tries these link rates (Mbit/s), rising, with this many iterations each.
AUTO_RATES = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0)
CALIBRATION_ITERATIONS = 8


def trace_path(cfg: RunConfig) -> str | None:
    """The --trace of the workload arguments, if any."""
    args = cfg.extra_workload_args
    return args[args.index("--trace") + 1] if "--trace" in args else None


def measured_stream_offset(cfg: RunConfig) -> int:
    """Where the measured phases read the workload: a trace after the iterations the warm-up
    profiled; a generated workload from its start (its warm-up reads far further on)."""
    return cfg.warmup if cfg.workload == "trace" else 0


@dataclass
class PhaseResult:
    name: str
    dir: Path
    seconds: float
    worker_summaries: list[dict]
    ps_summaries: list[dict]
    switch_stats: dict[str, dict[str, int]]  # switch -> stat name -> packets
    fidelity: dict[str, Any] = field(default_factory=dict)  # experiment.fidelity.verdict
    hotset_steps: list[Any] = field(default_factory=list)  # the online loop's StepReports


def say(msg: str) -> None:
    print(f"hotagg: {msg}", flush=True)


def freq_name(shard: int, dynamic: bool) -> str:
    """A PS shard's frequency file in a phase: where the online loop reads it while the PS
    runs, the PS's counters themselves (.live, hosts/stats.py: rewriting a file every few
    iterations cost the PS CPU that showed in the iteration time); else a CSV."""
    return f"freq{shard}.live" if dynamic else f"freq{shard}.csv"


class Experiment:
    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self.net: Any = None
        self.clients: dict[str, Any] = {}
        self.p4info: Any = None
        self.run_dir = Path()
        self.job_slots = cfg.hot_slots  # the job's slot count, set by configure()
        self.hot_offsets: dict[int, int] = {}  # hot key -> slot offset, set by configure()
        self.hot_keys: list[int] | None = None  # as last configured, for a restarted switch
        self.restarts: list[dict[str, Any]] = []  # switches restarted (--switch-restarts)
        # The workers' timeout before their first round trip (None: hosts.agent.INITIAL_RTO);
        # set from the warm-up by learn_initial_rto().
        self.initial_rto: float | None = None

    # --- set-up ---

    def preflight(self) -> None:
        """The options first (each error names its make variable), then the machine."""
        from experiment.options import check
        from topologies.network import missing_prerequisites

        self.topology = check(self.cfg)
        if os.geteuid() != 0:
            raise PreflightError("make run needs root (Mininet namespaces): sudo make run")
        if why := missing_prerequisites():
            raise PreflightError(why)

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
        from controller.client import SwitchClient
        from controller.p4info import P4Info
        from topologies.network import start_network

        self.p4info = P4Info.from_file(P4INFO)
        self.device_config = b""
        if self.cfg.target == "bmv2":
            subprocess.run(["make", "-s", "-C", str(REPO_ROOT), "build"], check=True)
            self.device_config = BMV2_JSON.read_bytes()
        say(f"starting {self.cfg.topo.name} with {self.cfg.target} switches ...")
        try:
            self.net = start_network(
                self.topology,
                self.cfg.target,
                grpc_base_port=self.cfg.grpc_base_port,
                run_id=self.run_dir.name,
                intf_prefix=self.cfg.intf_prefix or None,  # None: an unused one
                log_dir=self.run_dir / "switch-logs",
                seed=self.cfg.seed,
            )
        except Exception as e:
            hint = ""
            if "File exists" in str(e) or "Address already in use" in str(e):
                hint = " (an earlier run may have left it behind: sudo make stop)"
            raise ExperimentError(f"the network did not come up: {e}{hint}") from e
        say(
            f"run {self.run_dir.name}: interface prefix {self.net.intf_prefix!r}; "
            f"stop it alone with: sudo make stop RUN={self.run_dir.name}"
        )
        for name, addr in self.net.grpc_addrs.items():
            self.clients[name] = SwitchClient(addr, self.net.device_ids[name], wait=10.0).connect()
        say(
            "network up; P4Runtime: "
            + ", ".join(f"{n} {a}" for n, a in self.net.grpc_addrs.items())
        )

    def configure(self, hot_keys: list[int] | None) -> None:
        """Fresh pipeline on every switch, routes, the job and its admissions, the drop
        rate, and hot keys on the aggregating switches."""
        from controller.drop_sim import DropSim
        from controller.forwarding import Forwarding, compute_routes
        from controller.hot_keys import HotKeys
        from controller.jobs import Jobs
        from controller.tenancy import Tenancy, admissions_from_topology

        # The job gets as many slots as there are hot keys (at most HOT_SLOTS), so that the
        # PS collects no slot that can never hold a sum.
        self.job_slots = max(1, len(hot_keys)) if hot_keys else self.cfg.hot_slots
        self.hot_offsets: dict[int, int] = {}
        self.hot_keys = hot_keys
        with self.naming_dead_switches("configuring the switches"):
            for name, client in self.clients.items():
                client.set_pipeline(self.p4info.message, self.device_config)
                Forwarding(client, self.p4info).install(compute_routes(self.topology, name))
                job = Jobs(client, self.p4info).add(JOB_ID, self.job_slots)
                # Tenancy: the switch serves the job only from its hosts' (port, address).
                workers = [h.name for h in self.topology.workers[: self.cfg.workers]]
                ps = [h.name for h in self.topology.parameter_servers]
                adms = admissions_from_topology(self.topology, name, JOB_ID, workers, ps)
                Tenancy(client, self.p4info).admit(adms)
                DropSim(client, self.p4info).set(self.cfg.loss)
                if hot_keys and self.topology.switches[name].aggregate:
                    report = HotKeys(client, self.p4info).install(job, hot_keys)
                    self.hot_offsets = dict(report.added)

    # --- watching the processes we started ---

    def watched_switches(self) -> list[Watched]:
        out = []
        for name in self.topology.switches:
            process = self.net.switch(name).process
            if process is not None and process.proc is not None:
                label = f"{self.cfg.target} switch {name}"
                out.append(Watched(label, process.proc, process.log_path))
        return out

    def check_processes(self, when: str, agents: list[Watched] | None = None) -> None:
        """Raise ProcessDied for the first of the switches and `agents` that has died;
        switches first, since a dead switch stalls the agents behind it."""
        for watched in [*self.watched_switches(), *(agents or [])]:
            rc = watched.failed()
            if rc is not None:
                raise ProcessDied(when, watched, rc)

    @contextlib.contextmanager
    def naming_dead_switches(self, when: str) -> Iterator[None]:
        """A P4Runtime failure caused by a switch process that died is reported as that
        death (ProcessDied), not as an unreachable address."""
        from controller.errors import ControllerError

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

    def set_bandwidth(self, mbps: float) -> None:
        """Reshape every link of the running network to `mbps` (both ends; the links were
        built shaped, see preflight), keeping each interface's other settings."""
        from mininet.link import TCIntf

        for link in self.net.net.links:
            for intf in (link.intf1, link.intf2):
                if isinstance(intf, TCIntf):
                    intf.config(**{**intf.params, "bw": mbps})
        self.topology = self.topology.with_bandwidth(mbps)

    def monitor(self, procs: list[tuple[str, subprocess.Popen]]) -> PhaseMonitor:
        """A fidelity monitor over this phase's processes, the switches and every link."""
        pids = {f"switch {name}": self.switch_pid(name) for name in self.topology.switches}
        pids.update((label, proc.pid) for label, proc in procs)
        ps_names = {h.name for h in self.topology.parameter_servers}
        links = []
        for link in self.topology.links:
            # Seen from its switch end (either end of a switch-switch link carries the same).
            if link.is_host_link:
                switch, port = link.node2, link.port2
            else:
                switch, port = link.node1, link.port1
            links.append(
                LinkProbe(
                    f"{link.node1}-{link.node2}",
                    self.net.switch(switch).intfs[port].name,
                    link.bandwidth,
                    to_ps=link.node1 in ps_names,
                )
            )
        return PhaseMonitor({k: v for k, v in pids.items() if v}, links)

    def switch_pid(self, name: str) -> int | None:
        process = self.net.switch(name).process
        return process.proc.pid if process is not None and process.proc is not None else None

    def switch_stats(self) -> dict[str, dict[str, int]]:
        from controller.stats import Stats

        out = {}
        with self.naming_dead_switches("reading the switches' counters"):
            for name, client in self.clients.items():
                cells = Stats(client, self.p4info).read()
                out[name] = {c.name: c.packets for c in cells if c.index < len(Stat)}
        return out

    # --- phases ---

    def _python(self, module: str, *args: str) -> list[str]:
        return [sys.executable, "-m", module, *args]

    def _spawn(
        self, host: str, argv: list[str], err: Path, stdin: int | None = None
    ) -> subprocess.Popen:
        """Start `argv` inside Mininet host `host`; stdout is piped, stderr goes to `err`."""
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1"}
        with open(err, "w") as err_file:  # the child keeps its own descriptor
            return self.net.host(host).popen(
                argv,
                cwd=REPO_ROOT,
                env=env,
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=err_file,
                text=True,
            )

    def _start_together(
        self,
        name: str,
        pdir: Path,
        workers: list[tuple[str, subprocess.Popen]],
        watched: list[Watched],
    ) -> None:
        """Wait until every worker is set up ('ready'), then let them all go at once: Python
        start-up takes tens of ms per process, and workers started one after another would
        otherwise put that skew into iteration 1 (and so into the p99)."""
        deadline = time.monotonic() + 60.0
        for label, proc in workers:
            assert proc.stdout is not None
            sel = selectors.DefaultSelector()
            sel.register(proc.stdout, selectors.EVENT_READ)
            ready: list = []
            while not ready and time.monotonic() < deadline:
                ready = sel.select(timeout=min(WATCH_INTERVAL, deadline - time.monotonic()))
                if not ready:
                    self.check_processes(f"{name}: starting the workers", watched)
            sel.close()
            line = proc.stdout.readline() if ready else ""
            if line.strip() != "ready":
                err = (pdir / f"{label}.err").read_text().strip().splitlines()[-5:]
                raise ExperimentError(
                    f"{label} did not start ({line.strip() or 'no output'}): " + " | ".join(err)
                )
        for label, proc in workers:
            assert proc.stdin is not None
            try:
                proc.stdin.write("go\n")
                proc.stdin.flush()
                proc.stdin.close()
            except OSError as e:  # it died after 'ready'
                err = (pdir / f"{label}.err").read_text().strip().splitlines()[-5:]
                why = f"{label} exited before it could start ({e}): "
                raise ExperimentError(why + " | ".join(err)) from None

    def run_phase(
        self,
        name: str,
        iterations: int,
        collect: bool,
        stream_offset: int = 0,
        drift: bool = False,
        online: Callable[[Path], Any] | None = None,
    ) -> PhaseResult:
        """Run one phase. With --switch-restarts, a switch that dies during it is started
        again, configured as before (fresh pipeline, routes, job, hot keys at the same
        slots) and the whole phase run again from iteration 1: the dead switch took the
        phase's sums, cache and dedup state with it, and only a complete re-run gives the
        phase's exact parameters and clean timings. The failed attempt's files are kept
        in <phase>-failed-<n>/.

        `drift`: the workload drifts as DRIFT says (the measured phases); `online(pdir)`:
        starts a loop (experiment/hotset.py) once the workers go, whose `stop()` is called
        when they are done, and the PS shards keep their frequency counters in files it
        reads (freq_name)."""
        while True:
            try:
                return self._run_phase_once(name, iterations, collect, stream_offset, drift, online)
            except ProcessDied as died:
                switch = died.label.rpartition(" switch ")[2]
                if switch not in self.topology.switches or (
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
        process = self.net.switch(switch).process
        process.log_path.rename(failed / process.log_path.name)  # the death's log
        say(f"{died.what}; restarting it and the {phase} phase ({failed.name}/ has its log)")
        process.start()
        # The controller's session re-arbitrates by itself (controller/client.py); the
        # other switches get a fresh pipeline too, as at the start of any phase.
        self.configure(self.hot_keys)
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

    def _run_phase_once(
        self,
        name: str,
        iterations: int,
        collect: bool,
        stream_offset: int,
        drift: bool,
        online: Callable[[Path], Any] | None,
    ) -> PhaseResult:
        cfg = self.cfg
        pdir = self.run_dir / name
        pdir.mkdir()
        ps_hosts = self.topology.parameter_servers
        shards = len(ps_hosts)
        ps_addrs = ",".join(f"{h.ip}:{HOTAGG_PORT}" for h in ps_hosts)
        deadline = str(int(cfg.phase_timeout))
        procs: list[tuple[str, subprocess.Popen]] = []
        watched: list[Watched] = []  # the agents, watched with the switches
        loop = None  # the online hot-set loop, if any
        steps: list[Any] = []
        workload = [
            "--workload",
            cfg.workload,
            "--keys",
            str(cfg.keys),
            "--skew",
            str(cfg.skew),
            "--seed",
            str(cfg.seed),
            "--stream-offset",
            str(stream_offset),
            "--keys-per-iter",
            str(cfg.keys_per_iter),
            *cfg.extra_workload_args,
            *(["--drift", cfg.drift] if drift and cfg.drift else []),
        ]
        hot_args: list[str] = []
        if collect and self.hot_offsets:
            # The PS fills the cache before iteration 1 and the workers group the hot keys
            # from the start, instead of learning them in the first two iterations.
            write_hot_keys(pdir / "hot_keys.csv", self.hot_offsets)
            hot_args = ["--hot-keys", str(pdir / "hot_keys.csv")]
        try:
            for i, host in enumerate(ps_hosts):
                argv = self._python(
                    "hosts.ps",
                    "--job",
                    str(JOB_ID),
                    "--workers",
                    str(cfg.workers),
                    "--keys",
                    str(cfg.keys),
                    "--iterations",
                    str(iterations),
                    "--bind",
                    f"{host.ip}:{HOTAGG_PORT}",
                    "--shard",
                    f"{i}/{shards}",
                    "--log",
                    str(pdir / f"ps{i}.csv"),
                    "--freq",
                    str(pdir / freq_name(i, dynamic=online is not None)),
                    "--params",
                    str(pdir / f"params{i}.npy"),
                    "--summary",
                    str(pdir / f"ps{i}.json"),
                    "--deadline",
                    deadline,
                )
                if collect:
                    argv += [
                        "--collect",
                        "--switch",
                        str(self.topology.service_ip_for(host.name)),
                        "--hot-slots",
                        str(self.job_slots),
                        *hot_args,
                    ]
                proc = self._spawn(host.name, argv, pdir / f"ps{i}.err")
                procs.append((f"ps{i}", proc))
                # A PS ends with 0 once every worker has passed its last barrier.
                watched.append(
                    Watched(f"PS shard {i} on {host.name}", proc, pdir / f"ps{i}.err", True)
                )
                line = proc.stdout.readline() if proc.stdout else ""
                if "listening" not in line:
                    raise ExperimentError(
                        f"PS on {host.name} did not start: {line.strip()} "
                        f"{(pdir / f'ps{i}.err').read_text().strip()}"
                    )
            workers = []
            for w, host in enumerate(self.topology.workers[: cfg.workers]):
                argv = self._python(
                    "hosts.worker",
                    "--job",
                    str(JOB_ID),
                    "--worker-id",
                    str(w),
                    "--ps",
                    ps_addrs,
                    "--iterations",
                    str(iterations),
                    "--bind",
                    f"{host.ip}:0",
                    "--log",
                    str(pdir / f"w{w}.csv"),
                    "--summary",
                    str(pdir / f"w{w}.json"),
                    "--deadline",
                    deadline,
                    "--progress",
                    "--wait-go",
                    *(["--rto-initial", f"{self.initial_rto:.4f}"] if self.initial_rto else []),
                    *hot_args,
                    *workload,
                )
                proc = self._spawn(host.name, argv, pdir / f"w{w}.err", stdin=subprocess.PIPE)
                procs.append((f"w{w}", proc))
                workers.append(proc)
                watched.append(
                    Watched(f"worker {w} on {host.name}", proc, pdir / f"w{w}.err", may_finish=True)
                )
            self._start_together(name, pdir, procs[len(ps_hosts) :], watched)
            start = time.perf_counter()
            monitor = self.monitor(procs).start()
            try:
                loop = online(pdir) if online is not None else None
                self._follow(name, workers, iterations, watched)
            finally:
                fidelity = monitor.stop()
            if loop is not None:  # the workers are done: no more moves in this phase
                steps = loop.stop()
            seconds = time.perf_counter() - start
            # The PS shards end after the last barrier; a switch can still die meanwhile.
            end = time.monotonic() + cfg.phase_timeout
            while any(p.poll() is None for _, p in procs) and time.monotonic() < end:
                self.check_processes(f"{name}: after the last iteration", watched)
                time.sleep(0.05)
            self.check_processes(f"{name}: at the end", watched)
            for label, proc in procs:
                if proc.poll() is None:
                    raise ExperimentError(
                        f"{name}: {label} did not exit within {cfg.phase_timeout:.0f} s"
                    )
        finally:
            if loop is not None:
                loop.stop(check=False)  # a failed phase: stop it, the phase's error says why
            for _, proc in procs:
                if proc.poll() is None:
                    proc.terminate()
                    try:
                        proc.wait(5)
                    except subprocess.TimeoutExpired:
                        proc.kill()
        return PhaseResult(
            name,
            pdir,
            seconds,
            [json.loads((pdir / f"w{w}.json").read_text()) for w in range(cfg.workers)],
            [json.loads((pdir / f"ps{i}.json").read_text()) for i in range(shards)],
            self.switch_stats(),
            fidelity,
            steps,
        )

    def _follow(
        self,
        name: str,
        workers: list[subprocess.Popen],
        iterations: int,
        watched: list[Watched],
    ) -> None:
        """Show progress as the slowest worker's iteration; returns when all workers exit.
        Raises ProcessDied within WATCH_INTERVAL of a switch, PS or worker dying."""
        done = {id(p): 0 for p in workers}
        sel = selectors.DefaultSelector()
        for p in workers:
            assert p.stdout is not None
            sel.register(p.stdout, selectors.EVENT_READ, p)
        open_streams = len(workers)
        tty = sys.stdout.isatty()

        def show(n: int) -> None:
            bar = "#" * (20 * n // iterations)
            end = "\r" if tty and n < iterations else "\n"
            print(f"hotagg: {name:8s} [{bar:20s}] iteration {n}/{iterations}", end=end, flush=True)

        # The start is shown at once: by the first look at their output the workers may
        # be past iteration 0 already.
        shown = slowest = 0
        show(0)
        while open_streams:
            self.check_processes(f"{name} phase at iteration {slowest}/{iterations}", watched)
            for key, _ in sel.select(timeout=WATCH_INTERVAL):
                line = key.fileobj.readline()  # type: ignore[union-attr]
                if not line:
                    sel.unregister(key.fileobj)
                    open_streams -= 1
                elif line.startswith("progress "):
                    done[id(key.data)] = int(line.split()[1].split("/")[0])
            slowest = min(done.values())
            if slowest != shown and (tty or slowest == iterations or slowest % 5 == 0):
                show(slowest)
                shown = slowest

    def close_clients(self) -> None:
        for client in self.clients.values():
            with contextlib.suppress(Exception):  # best effort on the way out
                client.close()
        self.clients.clear()

    def stop(self) -> None:
        self.close_clients()
        if self.net is not None:
            self.net.stop()
            self.net = None
