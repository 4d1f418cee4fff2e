"""Bring a topology up in Mininet with our P4Runtime switches, and clean up after it.

`start_network()` builds Mininet(controller=None) from a topology file with EmbeddedSwitch or
Bmv2Switch and HotaggHost (IPv6 and offloads off, static ARP for every other host and for the
switch service addresses, a default route on eth0), runs each host's tutorial "commands", and
returns a Network: hosts by name, switch gRPC addresses, stop(). The switches start without a
pipeline; the controller pushes it and installs routes.

`cleanup()` (for `make stop` and after crashes) removes what a run left behind, and only
that: switch processes marked with our HOTAGG_RUN environment variable, and the node shells
and interfaces recorded in the run's state file. `mininet_clean=True` also runs Mininet's own
`mn -c`, which touches every Mininet on the machine.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from topologies.nodes import SWITCH_CLASSES, HotaggHost, P4RuntimeSwitch
from topologies.switches import RUN_ENV
from topologies.topo import HotaggTopo
from topologies.topology import Topology, load_topology

if TYPE_CHECKING:
    from mininet.net import Mininet
    from mininet.node import Host

log = logging.getLogger(__name__)

DEFAULT_LOG_DIR = Path("/tmp/hotagg-logs")
DEFAULT_STATE_DIR = Path("/tmp/hotagg-state")
SWITCH_PROGRAMS = ("softswitch", "simple_switch_grpc")


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
    _stopped: bool = False

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
            cleanup(self.run_id, state_dir=self.state_path.parent)

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_network(
    topology: Topology | str | Path,
    target: str = "embedded",
    *,
    grpc_base_port: int = 50051,
    grpc_ports: dict[str, int] | None = None,
    run_id: str | None = None,
    intf_prefix: str = "",
    log_dir: str | Path = DEFAULT_LOG_DIR,
    state_dir: str | Path = DEFAULT_STATE_DIR,
    seed: int | None = None,
    start_timeout: float = 30.0,
) -> Network:
    """Build and start the network; on any failure, tear down what was built and raise.

    `grpc_base_port=0` picks free ports (for tests); `intf_prefix` keeps the switch
    interface names of concurrent runs apart (names stay within 15 characters).
    """
    from mininet.net import Mininet  # imported late: it is big and tests without root skip

    if (why := missing_prerequisites()) is not None:
        raise NetworkError(why)
    if target not in SWITCH_CLASSES:
        raise NetworkError(f"unknown target {target!r}; choose one of {sorted(SWITCH_CLASSES)}")
    topo_obj = topology if isinstance(topology, Topology) else load_topology(topology)
    run_id = run_id or f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    log_dir, state_dir = Path(log_dir), Path(state_dir)
    netem = True
    if any(link.needs_netem for link in topo_obj.links):
        netem = netem_available()
    ports = dict(grpc_ports or {})
    if grpc_base_port == 0:
        from topologies.switches import free_tcp_port

        ports = {name: ports.get(name) or free_tcp_port() for name in topo_obj.switches}
    topo = HotaggTopo(
        topo_obj,
        switch_cls=SWITCH_CLASSES[target],
        host_cls=HotaggHost,
        grpc_base_port=grpc_base_port or 50051,
        grpc_ports=ports,
        intf_prefix=intf_prefix,
        log_dir=log_dir,
        run_id=run_id,
        netem=netem,
        switch_opts={"seed": seed, "start_timeout": start_timeout},
    )
    if topo.unshaped:
        log.warning(
            "tc netem is not available on this kernel: delay/loss not applied on %d link(s) "
            "(e.g. %s); bandwidth limits still apply",
            len(topo.unshaped),
            topo.unshaped[0],
        )
    net = Mininet(topo=topo, controller=None, build=False, autoSetMacs=False, waitConnected=False)
    network = Network(
        topo_obj, net, target, run_id, state_dir / f"{run_id}.json", log_dir, topo.unshaped
    )
    try:
        net.build()
        _write_state(network)
        net.start()
        for host in topo_obj.hosts.values():
            for command in host.commands:  # the tutorials' per-host shell commands
                out = net.get(host.name).cmd(command)
                log.debug("%s$ %s\n%s", host.name, command, out)
    except BaseException:
        network.stop()
        raise
    return network


def _write_state(network: Network) -> None:
    """Record what cleanup() must remove if this process dies without stop()."""
    net = network.net
    state = {
        "run_id": network.run_id,
        "owner_pid": os.getpid(),
        "nodes": {n.name: n.pid for n in (*net.hosts, *net.switches)},
        "interfaces": sorted(
            intf.name for sw in net.switches for intf in sw.intfList() if intf.name != "lo"
        ),
    }
    network.state_path.parent.mkdir(parents=True, exist_ok=True)
    network.state_path.write_text(json.dumps(state, indent=1))


# --- cleanup ------------------------------------------------------------------------------


def _read_proc(pid: int, what: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/{what}").read_bytes()
    except OSError:
        return b""


def switch_processes(run_id: str | None = None) -> list[int]:
    """Pids of switch processes we started (all runs, or one run)."""
    mark = f"{RUN_ENV}=".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        cmdline = _read_proc(pid, "cmdline").split(b"\0")
        if not any(p.encode() in arg for arg in cmdline[:3] for p in SWITCH_PROGRAMS):
            continue
        env = _read_proc(pid, "environ").split(b"\0")
        tags = [v[len(mark) :].decode(errors="replace") for v in env if v.startswith(mark)]
        if tags and (run_id is None or tags[0] == run_id):
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


def _kill_node_shell(name: str, pid: int) -> bool:
    """Kill a Mininet node shell (and its process group) if `pid` is still that shell."""
    if f"mininet:{name}".encode() not in _read_proc(pid, "cmdline").split(b"\0"):
        return False
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def cleanup(
    run_id: str | None = None,
    *,
    state_dir: str | Path = DEFAULT_STATE_DIR,
    mininet_clean: bool = False,
) -> list[str]:
    """Remove the leftovers of one run (or of all our runs when run_id is None).

    Kills our switch processes (found by the HOTAGG_RUN mark in their environment), the
    Mininet node shells recorded in state files (the hosts' namespaces die with them) and
    deletes the recorded switch interfaces, then the state files. Returns what was done.
    """
    done: list[str] = []
    pids = switch_processes(run_id)
    if pids:
        _terminate(pids)
        done.append(f"stopped switch processes {pids}")
    state_dir = Path(state_dir)
    pattern = f"{run_id}.json" if run_id else "*.json"
    for path in sorted(state_dir.glob(pattern)) if state_dir.is_dir() else []:
        try:
            state = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            path.unlink(missing_ok=True)
            continue
        killed = [n for n, p in state.get("nodes", {}).items() if _kill_node_shell(n, p)]
        if killed:
            done.append(f"killed node shells {killed} of run {state.get('run_id')}")
        for ifname in state.get("interfaces", []):
            if Path(f"/sys/class/net/{ifname}").exists():
                subprocess.run(["ip", "link", "del", ifname], capture_output=True, check=False)
                done.append(f"deleted interface {ifname}")
        path.unlink(missing_ok=True)
    if mininet_clean:
        from mininet.clean import cleanup as mn_cleanup

        mn_cleanup()
        done.append("ran Mininet's cleanup (mn -c)")
    return done


def main(argv: list[str] | None = None) -> int:
    """`python -m topologies.network cleanup [--run-id ID] [--mininet]` (for `make stop`)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m topologies.network")
    sub = parser.add_subparsers(dest="command", required=True)
    clean = sub.add_parser("cleanup", help="remove what hotagg runs left behind")
    clean.add_argument("--run-id", help="only this run (default: all of ours)")
    clean.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    clean.add_argument("--mininet", action="store_true", help="also run Mininet's mn -c")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("error: cleanup needs root", file=sys.stderr)
        return 1
    for line in cleanup(args.run_id, state_dir=args.state_dir, mininet_clean=args.mininet):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
