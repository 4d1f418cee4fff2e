"""Bring a topology up in Mininet with our P4Runtime switches, and clean up after it.

`start_network()` builds Mininet(controller=None) from a topology file with P4RuntimeSwitch
switches of one target (topologies/targets.py) and HotaggHost (IPv6 and offloads off, static
ARP for every other host and for the switch service addresses, a default route on eth0), runs
each host's tutorial "commands", and returns a Network: hosts by name, switch gRPC addresses,
stop(). The switches start without a pipeline; the controller pushes it and installs routes.

Runs share a machine: each reserves its switch interface prefix and P4Runtime ports in its
state file (/tmp/hotagg-state/<run>.json, under a lock) before it builds anything, and a
prefix or port that a live run holds, or an interface name that exists, is refused (Mininet
deletes an existing interface of the same name before it makes its own).

`cleanup()` (for `make stop` and after crashes) removes what a run left behind, and only
that: it asks the run's process to stop, then kills the switch processes marked with the
run's HOTAGG_RUN mark or recorded in its state file, every process in the hosts' recorded
network namespaces and the node shells (each checked by pid and start time), and deletes the
recorded switch interfaces whose interface index is still the recorded one (never a
same-named interface of another run). `mininet_clean=True` also runs Mininet's own `mn -c`,
which touches every Mininet on the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from topologies.nodes import HotaggHost, P4RuntimeSwitch
from topologies.switches import CHECKOUT_ENV, REPO_ROOT, RUN_ENV, free_tcp_port
from topologies.targets import (
    DEFAULT_LOG_DIR,
    Target,
    TargetName,
    UnknownTarget,
    make_target,
    switch_programs,
)
from topologies.topo import IFNAMSIZ, HotaggTopo, switch_intf_name
from topologies.topology import Topology, load_topology

if TYPE_CHECKING:
    from mininet.net import Mininet
    from mininet.node import Host

    from topologies.cluster import Server

log = logging.getLogger(__name__)

DEFAULT_STATE_DIR = Path("/tmp/hotagg-state")
PREFIX_CHARS = re.compile(r"[a-z][a-z0-9]*")  # safe in interface names and tc/ip commands
AUTO_PREFIX_LEN = 4  # 26 * 36^3 prefixes; names like "hq7zs1-eth12"


def _random_prefix(size: int) -> str:
    if size <= 0:
        return ""
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    return secrets.choice(alphabet[:26]) + "".join(
        secrets.choice(alphabet) for _ in range(size - 1)
    )


class NetworkError(RuntimeError):
    """The network cannot be brought up here; the message says what is missing or failed."""


def missing_prerequisites() -> str | None:
    """Why Mininet cannot run here, or None."""
    if os.geteuid() != 0:
        return "Mininet needs root (run as root or with sudo)"
    missing = [b for b in ("mnexec", "ip", "tc", "ethtool", "ifconfig") if not shutil.which(b)]
    if missing:
        return (
            f"{', '.join(missing)} not on PATH (apt-get install mininet iproute2 ethtool net-tools)"
        )
    return None


def netem_available() -> bool:
    """Whether `tc netem` works, tried in a throwaway network namespace (needs root)."""
    probe = ["unshare", "--net", "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"]
    try:
        return subprocess.run(probe, capture_output=True, check=False).returncode == 0
    except OSError:
        return False


@dataclass
class Network:
    """A running Mininet network of one topology; stop() (or `with`) tears it down."""

    topology: Topology
    net: Mininet
    target: str
    run_id: str
    state_path: Path
    log_dir: Path
    unshaped: list[str] = field(default_factory=list)
    intf_prefix: str = ""
    # node -> server, for a network spread over several (empty: all on this machine)
    placement: dict[str, Server] = field(default_factory=dict)
    # cleans what the run recorded on its servers (start_network's `clean_servers`)
    clean_servers: Callable[[], None] | None = None
    _stopped: bool = False

    def server_of(self, name: str) -> Server | None:
        """The server node `name` runs on, None for this machine."""
        server = self.placement.get(name)
        return None if server is None or server.is_local else server

    @property
    def hosts(self) -> dict[str, Host]:
        """Mininet Host objects by name (use .popen([...]) / .cmd(...) to run programs)."""
        return {h.name: h for h in self.net.hosts}

    def host(self, name: str) -> Host:
        if name not in self.topology.hosts:
            raise KeyError(f"no host {name!r} (have {sorted(self.topology.hosts)})")
        return self.net.get(name)

    def switch(self, name: str) -> P4RuntimeSwitch:
        if name not in self.topology.switches:
            raise KeyError(f"no switch {name!r} (have {list(self.topology.switches)})")
        return self.net.get(name)

    @property
    def grpc_addrs(self) -> dict[str, str]:
        """switch name -> "127.0.0.1:PORT", in topology order."""
        return {name: self.switch(name).grpc_addr for name in self.topology.switches}

    @property
    def device_ids(self) -> dict[str, int]:
        return {name: self.switch(name).device_id for name in self.topology.switches}

    def switch_log(self, name: str) -> Path:
        return self.switch(name).log_path

    def record_agent(self, host: str, pid: int) -> None:
        """Record a program started on one of this machine's hosts (an agent), by pid and
        start time, so that cleanup() ends it if this process dies without stop(): its
        host's shell dies with this process, and then the host's namespace no longer leads
        to it. One record per host: a later agent there replaces the earlier one."""
        with _state_lock(self.state_path.parent):
            state = json.loads(self.state_path.read_text())
            agents = state.setdefault("agent_processes", {})
            agents[host] = {**_identity(pid), "host": host}
            self.state_path.write_text(json.dumps(state, indent=1))

    def stop(self) -> None:
        """Stop the switch processes, then Mininet (links, switches, hosts). Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        try:
            for sw in self.net.switches:
                if isinstance(sw, P4RuntimeSwitch):
                    sw.stop_process()  # before its interfaces vanish under it
            self.net.stop()
        finally:
            if self.clean_servers is not None:
                self.clean_servers()  # before cleanup(), which deletes the run's state file
            cleanup(self.run_id, state_dir=self.state_path.parent)

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_network(
    topology: Topology | str | Path,
    target: str | Target = TargetName.EMBEDDED,
    *,
    grpc_base_port: int = 50051,
    grpc_ports: dict[str, int] | None = None,
    run_id: str | None = None,
    intf_prefix: str | None = "",
    log_dir: str | Path = DEFAULT_LOG_DIR,
    state_dir: str | Path = DEFAULT_STATE_DIR,
    seed: int | None = None,
    start_timeout: float = 30.0,
    placement: Mapping[str, Server] | None = None,
    remote_log_dir: str | Path | None = None,
    record_servers: Callable[[Mininet], None] | None = None,
    clean_servers: Callable[[], None] | None = None,
) -> Network:
    """Build and start the network; on any failure, tear down what was built and raise.

    `grpc_base_port=0` picks free ports; `intf_prefix` keeps the switch interface names of
    concurrent runs apart (names stay within 15 characters), None picks an unused one. Both
    are reserved in the run's state file before anything is built.

    `placement` (node -> server, experiment/placement.py) spreads the network over several
    servers: nodes on another server are Mininet Cluster Edition nodes
    (topologies/remote.py), every link whose ends are on different servers a VXLAN tunnel
    (topologies/remote_links.py). A switch there keeps its log under `remote_log_dir`/<server>
    on its server (default: `log_dir`). `record_servers(net)` is called once the network is
    up, and `clean_servers()` by stop() before the local clean-up: what the run makes on
    its servers is recorded and cleaned there (topologies/cluster_state.py, which imports
    this module, so the caller passes them).
    """
    from mininet.net import Mininet  # imported late: it is big and tests without root skip

    if (why := missing_prerequisites()) is not None:
        raise NetworkError(why)
    try:
        kind = make_target(target)
    except UnknownTarget as e:
        raise NetworkError(str(e)) from None
    topo_obj = topology if isinstance(topology, Topology) else load_topology(topology)
    run_id = run_id or f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    log_dir, state_dir = Path(log_dir), Path(state_dir)
    netem = True
    if any(link.needs_netem for link in topo_obj.links):
        netem = netem_available()
    state_path = state_dir / f"{run_id}.json"
    intf_prefix, ports = _reserve(
        topo_obj, run_id, state_path, intf_prefix, grpc_base_port, dict(grpc_ports or {})
    )
    spread = {n: s for n, s in (placement or {}).items() if not s.is_local}
    try:
        topo = HotaggTopo(
            topo_obj,
            switch_cls=P4RuntimeSwitch,
            host_cls=HotaggHost,
            grpc_base_port=grpc_base_port or 50051,
            grpc_ports=ports,
            intf_prefix=intf_prefix,
            log_dir=log_dir,
            run_id=run_id,
            netem=netem,
            switch_opts={"target": kind, "seed": seed, "start_timeout": start_timeout},
        )
        if spread:
            _spread(topo, spread, Path(remote_log_dir or log_dir))
        if topo.unshaped:
            log.warning(
                "tc netem is not available on this kernel: delay/loss not applied on %d link(s) "
                "(e.g. %s); bandwidth limits still apply",
                len(topo.unshaped),
                topo.unshaped[0],
            )
        net = Mininet(
            topo=topo, controller=None, build=False, autoSetMacs=False, waitConnected=False
        )
        network = Network(
            topo_obj,
            net,
            kind.name,
            run_id,
            state_path,
            log_dir,
            topo.unshaped,
            intf_prefix,
            dict(placement or {}),
            clean_servers,
        )
    except BaseException:
        state_path.unlink(missing_ok=True)  # nothing was built: give the reservation back
        raise
    try:
        net.build()
        _write_state(network)
        net.start()
        _write_state(network)  # now with the switch processes
        if record_servers is not None:
            record_servers(net)
        for host in topo_obj.hosts.values():
            for command in host.commands:  # the tutorials' per-host shell commands
                out = net.get(host.name).cmd(command)
                log.debug("%s$ %s\n%s", host.name, command, out)
    except BaseException:
        network.stop()
        raise
    return network


def _spread(topo: HotaggTopo, spread: Mapping[str, Server], remote_log_dir: Path) -> None:
    """Put the nodes of `spread` on their servers and make every link a VXLANLink (a veth
    pair where both ends share a server), all of them in one VxlanPlan for the run. Only
    those nodes get the cluster classes: this machine's keep the plain ones (RemoteMixin's
    popen starts a process as a group leader, which mnexec -d then forks away from, so the
    Popen would end at once while the process runs on)."""
    from topologies.remote import RemoteHotaggHost, RemoteP4RuntimeSwitch
    from topologies.remote_links import VxlanPlan, use_cross_server_links

    for name, server in spread.items():
        info: dict[str, Any] = topo.nodeInfo(name)
        info.update(server=server.host, user=server.user)
        if topo.isSwitch(name):
            info.update(cls=RemoteP4RuntimeSwitch, log_dir=str(remote_log_dir))
        else:
            info["cls"] = RemoteHotaggHost
    use_cross_server_links(topo, VxlanPlan())


# --- what a run holds ---------------------------------------------------------------------


def switch_interfaces(topology: Topology, prefix: str) -> list[str]:
    """The names of the switch interfaces a run of `topology` with `prefix` creates."""
    ends = [(link.node2, link.port2) for link in topology.links]
    ends += [(link.node1, link.port1) for link in topology.links if link.port1 is not None]
    return sorted(switch_intf_name(prefix, sw, port) for sw, port in ends)


def prefix_problem(topology: Topology, prefix: str) -> str | None:
    """Why `prefix` cannot name this topology's switch interfaces here, or None."""
    if prefix and not PREFIX_CHARS.fullmatch(prefix):
        return f"{prefix!r} must be a lowercase letter, then lowercase letters or digits"
    longest = max((switch_intf_name(prefix, sw, 510) for sw in topology.switches), key=len)
    if len(longest) > IFNAMSIZ:
        room = IFNAMSIZ - len(longest) + len(prefix)
        return (
            f"{prefix!r} makes interface names like {longest!r}, longer than {IFNAMSIZ} "
            f"characters; this topology leaves room for {max(room, 0)}"
        )
    taken = [n for n in switch_interfaces(topology, prefix) if Path(f"/sys/class/net/{n}").exists()]
    if taken:
        return (
            f"interface {taken[0]} exists already (another run's, or left behind: "
            "sudo make stop, or choose another PREFIX)"
        )
    return None


@contextlib.contextmanager
def _state_lock(state_dir: Path):  # type: ignore[no-untyped-def]
    """Serialises the reservations of concurrent runs."""
    state_dir.mkdir(parents=True, exist_ok=True)
    with open(state_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _reserve(
    topology: Topology,
    run_id: str,
    state_path: Path,
    prefix: str | None,
    base_port: int,
    ports: dict[str, int],
) -> tuple[str, dict[str, int]]:
    """Choose (or check) the run's interface prefix and P4Runtime ports against the live runs'
    and write them into its state file: (prefix, port per switch)."""
    with _state_lock(state_path.parent):
        live = [s for _, s in _states(state_path.parent) if _owner_alive(s)]
        held_prefixes = {s.get("prefix"): s.get("run_id") for s in live}
        held_ports = {p: s.get("run_id") for s in live for p in s.get("grpc_ports", {}).values()}
        if prefix is None:
            longest = max(len(switch_intf_name("", sw, 510)) for sw in topology.switches)
            size = min(AUTO_PREFIX_LEN, IFNAMSIZ - longest)
            for _ in range(100):
                candidate = _random_prefix(size)
                if candidate not in held_prefixes and not prefix_problem(topology, candidate):
                    prefix = candidate
                    break
            else:
                raise NetworkError(
                    "found no unused interface prefix (switch names of this topology leave "
                    f"room for {max(size, 0)} characters)"
                )
        elif prefix in held_prefixes:
            raise NetworkError(
                f"interface prefix {prefix!r} is held by the running run {held_prefixes[prefix]}"
            )
        elif why := prefix_problem(topology, prefix):
            raise NetworkError(f"interface prefix: {why}")
        for sw in topology.switches.values():
            if ports.get(sw.name):
                continue
            if base_port:
                ports[sw.name] = sw.grpc_port(base_port)
                continue
            port = free_tcp_port()
            while port in held_ports or port in ports.values():
                port = free_tcp_port()
            ports[sw.name] = port
        for name, port in ports.items():
            if port in held_ports:
                raise NetworkError(
                    f"P4Runtime port {port} ({name}) is held by the running run {held_ports[port]}"
                )
        state = {
            "run_id": run_id,
            "checkout": str(REPO_ROOT),
            "owner": _identity(os.getpid()),
            "prefix": prefix,
            "grpc_ports": ports,
        }
        state_path.write_text(json.dumps(state, indent=1))
    return prefix, ports


def _write_state(network: Network) -> None:
    """Record exactly what this run created, for cleanup() if this process dies without
    stop(): node shells and switch processes by pid and start time, the hosts' network
    namespaces, and the switch interfaces with their interface index."""
    net = network.net
    state = json.loads(network.state_path.read_text())  # the reservation, by _reserve()
    own_netns = _netns(os.getpid())
    nodes = {}
    # A node on another server has its pid and namespace there: recorded as that server's
    # (its clean-up runs there), never as a process of this machine.
    remote = {n.name for n in (*net.hosts, *net.switches) if getattr(n, "isRemote", False)}
    for node in (*net.hosts, *net.switches):
        if node.name in remote:
            continue
        record = _identity(node.pid)
        netns = _netns(node.pid)
        if netns is not None and netns != own_netns:  # switches share the root namespace
            record["netns"] = netns
        nodes[node.name] = record
    interfaces = {}
    for sw in net.switches:
        if sw.name in remote:
            continue
        for intf in sw.intfList():
            index = _ifindex(intf.name)
            if intf.name != "lo" and index is not None:
                interfaces[intf.name] = index
    switches = {}
    for sw in net.switches:
        process = getattr(sw, "process", None)
        if process is not None and process.proc is not None and sw.name not in remote:
            switches[sw.name] = _identity(process.proc.pid)
    state.update(nodes=nodes, interfaces=interfaces, switch_processes=switches)
    network.state_path.write_text(json.dumps(state, indent=1))


# --- cleanup ------------------------------------------------------------------------------


def _read_proc(pid: int, what: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/{what}").read_bytes()
    except OSError:
        return b""


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (with the pid: which process)."""
    stat = _read_proc(pid, "stat")
    fields = stat.rpartition(b")")[2].split()
    return int(fields[19]) if len(fields) > 19 else None


def _identity(pid: int) -> dict[str, int | None]:
    return {"pid": pid, "start": _start_time(pid)}


def _is(record: dict) -> bool:
    """Whether the recorded process is still running as that process (not a reused pid)."""
    pid = record.get("pid")
    return isinstance(pid, int) and _alive(pid) and _start_time(pid) == record.get("start")


def _netns(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def _ifindex(name: str) -> int | None:
    try:
        return int(Path(f"/sys/class/net/{name}/ifindex").read_text())
    except (OSError, ValueError):
        return None


def _states(state_dir: Path) -> list[tuple[Path, dict]]:
    out = []
    for path in sorted(state_dir.glob("*.json")) if state_dir.is_dir() else []:
        with contextlib.suppress(OSError, json.JSONDecodeError):
            state = json.loads(path.read_text())
            if isinstance(state, dict):
                out.append((path, state))
    return out


def _owner_alive(state: dict) -> bool:
    owner = state.get("owner")
    if isinstance(owner, dict):
        return _is(owner)
    return isinstance(state.get("owner_pid"), int) and _alive(state["owner_pid"])  # old format


def runs(state_dir: str | Path = DEFAULT_STATE_DIR) -> list[dict]:
    """The state of every run recorded in state_dir (live or left behind)."""
    return [state for _, state in _states(Path(state_dir))]


def switch_processes(run_id: str | None = None, checkout: str | None = None) -> list[int]:
    """Pids of switch processes we started: all runs', one run's, or one checkout's."""
    run_mark, checkout_mark = f"{RUN_ENV}=".encode(), f"{CHECKOUT_ENV}=".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        cmdline = _read_proc(pid, "cmdline").split(b"\0")
        if not any(p.encode() in arg for arg in cmdline[:3] for p in switch_programs()):
            continue
        env = _read_proc(pid, "environ").split(b"\0")
        runs_ = [v[len(run_mark) :].decode(errors="replace") for v in env if v.startswith(run_mark)]
        homes = [
            v[len(checkout_mark) :].decode(errors="replace")
            for v in env
            if v.startswith(checkout_mark)
        ]
        if not runs_ or (run_id is not None and runs_[0] != run_id):
            continue
        if checkout is not None and homes[:1] != [checkout]:
            continue
        pids.append(pid)
    return pids


def _alive(pid: int) -> bool:
    """Running (a zombie waits only for its parent to reap it: it is gone for us)."""
    stat = _read_proc(pid, "stat")
    return bool(stat) and stat.rpartition(b")")[2].split()[:1] != [b"Z"]


def _terminate(pids: list[int], timeout: float = 3.0) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    for pid in pids:
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _kill_node_shell(name: str, record: dict | int) -> bool:
    """Kill a Mininet node shell (and its process group) if it is still that shell."""
    if isinstance(record, int):  # old state files: the pid alone
        record = {"pid": record, "start": _start_time(record)}
    pid = record["pid"]
    if not _is(record) or f"mininet:{name}".encode() not in _read_proc(pid, "cmdline").split(b"\0"):
        return False
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def _processes_in(namespaces: set[int]) -> list[int]:
    """Pids of the processes in these network namespaces (the agents on a run's hosts)."""
    me = os.getpid()
    return [
        int(e.name)
        for e in Path("/proc").iterdir()
        if e.name.isdigit() and int(e.name) != me and _netns(int(e.name)) in namespaces
    ]


def _stop_owners(states: list[dict], timeout: float) -> list[str]:
    """Ask the runs' own processes to stop (SIGINT: they clean up after themselves, as on
    Ctrl-C), wait for them, then kill those still there."""
    owners = [
        (s.get("run_id"), s["owner"])
        for s in states
        if isinstance(s.get("owner"), dict) and s["owner"].get("pid") != os.getpid()
    ]
    owners = [(run, o) for run, o in owners if _is(o)]
    for _, owner in owners:
        with contextlib.suppress(ProcessLookupError):
            os.kill(owner["pid"], signal.SIGINT)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_is(o) for _, o in owners):
        time.sleep(0.1)
    done = []
    for run, owner in owners:
        if _is(owner):
            with contextlib.suppress(ProcessLookupError):
                os.kill(owner["pid"], signal.SIGKILL)
            done.append(f"killed the process of run {run} (pid {owner['pid']})")
        else:
            done.append(f"stopped run {run} (pid {owner['pid']})")
    return done


def cleanup(
    run_id: str | None = None,
    *,
    checkout: str | Path | None = None,
    state_dir: str | Path = DEFAULT_STATE_DIR,
    mininet_clean: bool = False,
    owner_timeout: float = 15.0,
) -> list[str]:
    """Stop one run, or the runs of one checkout, or (neither given) all of our runs, and
    remove what they left behind.

    The run's own process is asked to stop first. Then: our switch processes of those runs
    (by their HOTAGG_RUN/HOTAGG_CHECKOUT marks, and as recorded), the recorded agents
    (Network.record_agent), every process in the
    hosts' recorded network namespaces, the recorded node shells, and the recorded switch
    interfaces that still have their recorded interface index; then the state files.
    Returns what was done.
    """
    state_dir = Path(state_dir)
    home = str(checkout) if checkout is not None else None
    chosen = [
        (path, state)
        for path, state in _states(state_dir)
        if (run_id is None or state.get("run_id") == run_id or path.stem == run_id)
        and (home is None or state.get("checkout") == home)
    ]
    done = _stop_owners([state for _, state in chosen], owner_timeout)
    # By mark: those of no state file too (a run killed before it wrote one). A run with
    # servers: only this machine's (its root namespace's); each server ends its own
    # (topologies/cluster_state.py), and a test's "servers" share this PID namespace.
    pids = set(switch_processes(run_id, home))
    if any(state.get("servers") for _, state in chosen):
        here = _netns(os.getpid())
        pids = {pid for pid in pids if _netns(pid) == here}
    for _, state in chosen:
        records = (state.get("switch_processes") or {}).values()
        pids.update(r["pid"] for r in records if isinstance(r, dict) and _is(r))
    pids.discard(os.getpid())
    if pids:
        _terminate(sorted(pids))
        done.append(f"stopped switch processes {sorted(pids)}")
    # Agents by record (pid and start time): their host's namespace, found below through
    # its shell, is unreachable once the shell died with the run's process.
    agents = sorted(
        r["pid"]
        for _, state in chosen
        for r in (state.get("agent_processes") or {}).values()
        if isinstance(r, dict) and _is(r) and r["pid"] != os.getpid()
    )
    if agents:
        _terminate(agents)
        done.append(f"stopped agents {agents}")
    for path, state in chosen:
        run = state.get("run_id")
        nodes = state.get("nodes") or {}
        # A namespace's inode is only its own while its shell lives (inodes are reused).
        namespaces = {
            r["netns"]
            for r in nodes.values()
            if isinstance(r, dict) and "netns" in r and _is(r) and _netns(r["pid"]) == r["netns"]
        }
        if namespaces and (inside := _processes_in(namespaces)):
            for pid in inside:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            done.append(f"killed {len(inside)} processes on the hosts of run {run}")
        killed = [n for n, r in nodes.items() if _kill_node_shell(n, r)]
        if killed:
            done.append(f"killed node shells {killed} of run {run}")
        interfaces = state.get("interfaces") or {}
        if isinstance(interfaces, list):  # old state files: names only, which may be reused
            left = [n for n in interfaces if Path(f"/sys/class/net/{n}").exists()]
            if left:
                done.append(f"left {left} alone: run {run}'s old state file cannot tell them apart")
            interfaces = {}
        for ifname, index in interfaces.items():
            if _ifindex(ifname) == index:  # the same interface, not a later one of that name
                subprocess.run(["ip", "link", "del", ifname], capture_output=True, check=False)
                done.append(f"deleted interface {ifname}")
        path.unlink(missing_ok=True)
    if mininet_clean:
        from mininet.clean import cleanup as mn_cleanup  # late: big, and only --mininet needs it

        mn_cleanup()
        done.append("ran Mininet's cleanup (mn -c)")
    return done


def main(argv: list[str] | None = None) -> int:
    """`python -m topologies.network cleanup [--run-id ID] [--mininet]` (for `make stop`; a
    cluster server's part is `python -m topologies.cluster_state cleanup`)."""
    parser = argparse.ArgumentParser(prog="python -m topologies.network")
    sub = parser.add_subparsers(dest="command", required=True)
    clean = sub.add_parser("cleanup", help="remove what hotagg runs left behind")
    clean.add_argument("--run-id", help="only this run (default: all of ours)")
    clean.add_argument("--checkout", help="only the runs started from this checkout")
    clean.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    clean.add_argument("--mininet", action="store_true", help="also run Mininet's mn -c")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("error: cleanup needs root", file=sys.stderr)
        return 1
    for line in cleanup(
        args.run_id, checkout=args.checkout, state_dir=args.state_dir, mininet_clean=args.mininet
    ):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
