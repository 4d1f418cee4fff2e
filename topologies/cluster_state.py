"""What a cluster run made on each server, recorded there, and `make stop` on every server.

A run spread over servers (issue #32) leaves things on machines the coordinator's clean-up
(topologies/network.py `cleanup`) cannot see: remote process groups (agents, switches), node
shells and their network namespaces, vxlan/veth devices in a server's root namespace. And a
SIGKILLed coordinator leaves its ssh clients running (Mininet Cluster Edition `setpgrp`s
them), which keep the remote processes alive. So the run records, as it goes:

- on each server, in that server's own state directory
  (`/tmp/hotagg-state/servers/<host>/<run>.json`, written there over ssh: `record_server`),
  the process groups it started there (by pid and start time, read there), node shells with
  their namespace inode, devices by name and interface index, and the tag of its
  `hx<tag>*` / `hw<tag>*` devices; the coordinator's own root-namespace devices go into the
  same kind of record under `localhost`;
- in the coordinator's state file (`/tmp/hotagg-state/<run>.json`), the servers it used
  (`servers`) and its local ssh clients (`ssh_clients`, by pid and start time).

`cleanup_servers(run_id)` (called by `make stop` before the local clean-up) asks the run's
own process to stop, then runs `python -m topologies.cluster_state cleanup --run-id RUN
--server HOST` on each server over a login of its own (`cleanup_here` there; a master connection
hung on a dead network would hold it up), cleans the coordinator's own record, kills the
recorded ssh clients and closes the servers' ssh master connections that no live run still
uses. A server that cannot be reached is reported in one line and kept in
`/tmp/hotagg-state/cluster-pending/<run>.json`, so that the next `make stop` tries it again.

API for a run: `record_network(run_id, net)` once the Mininet network is up,
`record_process(run_id, label, proc)` for each remote process started later (agents), or
the lower-level `record_server` / `record_ssh_clients`. Every call is one ssh round trip
per server (through its master connection) and merges into what is recorded already.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from topologies.cluster import (
    CHECK_TIMEOUT,
    CONNECT_TIMEOUT,
    DEFAULT_USER,
    LOCALHOST,
    Server,
    close_master,
    parse_server,
    ssh_command,
)
from topologies.network import (
    DEFAULT_STATE_DIR,
    _alive,
    _identity,
    _ifindex,
    _is,
    _kill_node_shell,
    _netns,
    _owner_alive,
    _processes_in,
    _state_lock,
    _states,
    _stop_owners,
    _terminate,
    switch_processes,
)
from topologies.switches import REPO_ROOT

SERVERS_DIR = "servers"  # state_dir/servers/<host>/<run>.json: a server's own record
PENDING_DIR = "cluster-pending"  # state_dir/cluster-pending/<run>.json: servers not reached
DEVICE_MARKS = ("hx", "hw")  # + a run's VxlanPlan tag: its devices in a root namespace
SSH_TUNNEL_TAP = "tap9"  # Mininet's SSH tunnel's hard-wired device (blocks later tunnels)
GROUP_WAIT = 3.0  # seconds a process group gets after SIGTERM before SIGKILL
PID_WAIT = 5.0  # seconds to wait for a remote process's pid line


@dataclass
class ServerRecord:
    """What one run made on one server, as recorded there."""

    run_id: str
    server: str
    process_groups: dict[str, dict] = field(default_factory=dict)  # label -> {pid, start}
    node_shells: dict[str, dict] = field(default_factory=dict)  # name -> {pid, start, netns}
    devices: dict[str, int | None] = field(default_factory=dict)  # name -> interface index
    device_tags: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path) -> ServerRecord:
        data = json.loads(path.read_text())
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    def merge(self, part: Mapping[str, Any]) -> None:
        """Add a part sent by the coordinator (pids only): identities are read here."""
        for label, pid in (part.get("process_groups") or {}).items():
            self.process_groups[label] = _identity(int(pid))
        for name, pid in (part.get("node_shells") or {}).items():
            self.node_shells[name] = {**_identity(int(pid)), "netns": _netns(int(pid))}
        for name in part.get("devices") or ():
            self.devices[name] = _ifindex(name)
        self.device_tags = sorted({*self.device_tags, *(part.get("device_tags") or ())})


def server_dir(host: str, state_dir: str | Path = DEFAULT_STATE_DIR) -> Path:
    """Where a server keeps its records (named after it: a one-machine test's "servers"
    share /tmp)."""
    return Path(state_dir) / SERVERS_DIR / host


def record_here(
    run_id: str, host: str, part: Mapping[str, Any], state_dir: str | Path = DEFAULT_STATE_DIR
) -> ServerRecord:
    """On the server itself: merge `part` into its record of the run."""
    directory = server_dir(host, state_dir)
    with _state_lock(directory):
        path = directory / f"{run_id}.json"
        record = ServerRecord.load(path) if path.exists() else ServerRecord(run_id, host)
        record.merge(part)
        path.write_text(json.dumps(record.__dict__, indent=1))
    return record


def _run_on(
    server: Server, argv: list[str], own_login: bool = False, **run: Any
) -> subprocess.CompletedProcess:
    """argv on the server (as root), over its shared ssh connection (own_login: a login of
    its own, which a master hung on a dead connection cannot hold up); locally for
    localhost."""
    if server.is_local:
        return subprocess.run(argv, capture_output=True, text=True, check=False, **run)
    line = shlex.join(argv if server.user == DEFAULT_USER else ["sudo", "-n", *argv])
    ssh = ssh_command(server)
    if own_login:
        ssh = ["ssh", "-o", "ControlMaster=no", "-o", "ControlPath=none", "-o", "BatchMode=yes",
               "-o", f"ConnectTimeout={CONNECT_TIMEOUT}", "-o", "LogLevel=ERROR",
               server.dest]  # fmt: skip
    return subprocess.run([*ssh, line], capture_output=True, text=True, check=False, **run)


def _hotagg(*args: str) -> list[str]:
    """A hotagg module's command line on a server: the same checkout and venv there."""
    return ["env", "-C", str(REPO_ROOT), sys.executable, "-m", *args]


def _update_state(run_id: str, state_dir: Path, update: Any) -> None:
    """Read-modify-write the coordinator's state file of the run (made if it is missing)."""
    with _state_lock(state_dir):
        path = state_dir / f"{run_id}.json"
        state = json.loads(path.read_text()) if path.exists() else {}
        if not state:
            state = {"run_id": run_id, "checkout": str(REPO_ROOT), "owner": _identity(os.getpid())}
        update(state)
        path.write_text(json.dumps(state, indent=1))


def record_server(
    run_id: str,
    server: Server,
    *,
    process_groups: Mapping[str, int] | None = None,
    node_shells: Mapping[str, int] | None = None,
    devices: Iterable[str] = (),
    device_tags: Iterable[str] = (),
    state_dir: str | Path = DEFAULT_STATE_DIR,
) -> None:
    """Record on `server` (pids are the server's) what the run made there, and list the
    server in the coordinator's state file. Raises RuntimeError if the server does not
    take it."""
    part = {
        "process_groups": dict(process_groups or {}),
        "node_shells": dict(node_shells or {}),
        "devices": list(devices),
        "device_tags": list(device_tags),
    }
    state_dir = Path(state_dir)
    if server.is_local:
        record_here(run_id, LOCALHOST, part, state_dir)
        return

    def add_server(state: dict) -> None:
        state["servers"] = sorted({*state.get("servers", []), str(server)})

    _update_state(run_id, state_dir, add_server)  # first: a failure below still leaves it
    argv = _hotagg("topologies.cluster_state", "record", "--run-id", run_id,
                   "--server", server.host, "--state-dir", str(state_dir))  # fmt: skip
    result = _run_on(server, argv, input=json.dumps(part), timeout=CHECK_TIMEOUT)
    if result.returncode != 0:
        why = (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1]
        raise RuntimeError(f"recording run {run_id} on {server} failed: {why}")


def record_ssh_clients(
    run_id: str, pids: Mapping[str, int], state_dir: str | Path = DEFAULT_STATE_DIR
) -> None:
    """Record the coordinator's ssh clients (label -> local pid) in its state file."""

    def add(state: dict) -> None:
        clients = state.setdefault("ssh_clients", {})
        clients.update({label: _identity(pid) for label, pid in pids.items()})

    _update_state(run_id, Path(state_dir), add)


def _remote_pid(proc: Any) -> int | None:
    deadline = time.monotonic() + PID_WAIT
    while proc.remote_pid is None and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return proc.remote_pid


def record_process(
    run_id: str, label: str, proc: Any, state_dir: str | Path = DEFAULT_STATE_DIR
) -> None:
    """Record a topologies.remote.RemoteProcess: its process group on its server, its ssh
    client here."""
    record_ssh_clients(run_id, {label: proc.pid}, state_dir)
    if (pid := _remote_pid(proc)) is not None:
        record_server(run_id, proc.server, process_groups={label: pid}, state_dir=state_dir)


def record_network(run_id: str, net: Any, state_dir: str | Path = DEFAULT_STATE_DIR) -> None:
    """Record everything a built and started Mininet (Cluster Edition) network holds: remote
    nodes' shells and ssh clients, remote switch processes, their interfaces, and the
    root-namespace devices of its VXLAN links on every server (this one's too)."""
    parts: dict[Server, dict[str, Any]] = {}
    clients: dict[str, int] = {}

    def part(server: Server) -> dict[str, Any]:
        return parts.setdefault(
            server, {"process_groups": {}, "node_shells": {}, "devices": [], "device_tags": []}
        )

    for node in (*net.hosts, *net.switches):
        if not getattr(node, "isRemote", False):
            continue
        there = part(Server(node.serverIP, node.user))
        there["node_shells"][node.name] = node.pid
        clients[f"shell {node.name}"] = node.shell.pid
        if node in net.switches:
            there["devices"] += [i.name for i in node.intfList() if i.name != "lo"]
        proc = getattr(getattr(node, "process", None), "proc", None)
        if proc is not None and (pid := _remote_pid(proc)) is not None:
            there["process_groups"][f"switch {node.name}"] = pid
            clients[f"switch {node.name}"] = proc.pid
    for link in net.links:
        for end in getattr(link, "ends", ()):  # a VXLANLink's ends between servers
            node = end.node
            remote = getattr(node, "isRemote", False)
            there = part(Server(node.serverIP, node.user) if remote else Server(LOCALHOST))
            there["device_tags"].append(link.plan.tag)
            if not end.is_host:  # a switch's port is the vxlan device, in a root namespace
                there["devices"].append(end.intf)
    if clients:
        record_ssh_clients(run_id, clients, state_dir)
    for server, found in parts.items():
        found["device_tags"] = sorted(set(found["device_tags"]))
        record_server(run_id, server, **found, state_dir=state_dir)


# --- clean-up on a server -------------------------------------------------------------------


def _pgrp(pid: int) -> int | None:
    with contextlib.suppress(OSError, IndexError, ValueError):
        stat = Path(f"/proc/{pid}/stat").read_bytes()
        return int(stat.rpartition(b")")[2].split()[2])
    return None


def _ppid(pid: int) -> int | None:
    with contextlib.suppress(OSError, IndexError, ValueError):
        stat = Path(f"/proc/{pid}/stat").read_bytes()
        return int(stat.rpartition(b")")[2].split()[1])
    return None


def _started_by(leaders: Iterable[int]) -> list[int]:
    """The live processes of these process groups, and the leaders' descendants (a leader
    that is not its group's leader after all, e.g. under sudo, still takes its children)."""
    wanted = set(leaders)
    pids = [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit()]
    found = {p for p in pids if _pgrp(p) in wanted} | (wanted & set(pids))
    parents = {p: _ppid(p) for p in pids}
    grew = True
    while grew:
        more = {p for p, parent in parents.items() if parent in found} - found
        found |= more
        grew = bool(more)
    return sorted(p for p in found if _alive(p))


def _end_groups(records: Iterable[dict]) -> list[int]:
    """SIGTERM the recorded process groups (and the leaders' descendants), SIGKILL what is
    left after GROUP_WAIT. A group counts while its leader is the recorded process, or, the
    leader gone, while members remain (a pid stays reserved while it names a group)."""
    groups = [
        r["pid"]
        for r in records
        if isinstance(r.get("pid"), int)
        and (_is(r) or (not _alive(r["pid"]) and _started_by([r["pid"]])))
    ]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in _started_by(groups):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + (GROUP_WAIT if sig == signal.SIGTERM else 1.0)
        while time.monotonic() < deadline and _started_by(groups):
            time.sleep(0.05)
    return groups


def _devices() -> list[str]:
    with contextlib.suppress(OSError):
        return os.listdir("/sys/class/net")
    return []


def _delete_device(name: str) -> bool:
    result = subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)
    return result.returncode == 0


def _tap_held(name: str) -> bool:
    """Whether a process holds the tun/tap device `name` open (its fdinfo names it)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for info in (entry / "fdinfo").iterdir():
                with contextlib.suppress(OSError):
                    if f"iff:\t{name}\n" in info.read_text():
                        return True
    return False


def cleanup_here(
    run_id: str | None, host: str, state_dir: str | Path = DEFAULT_STATE_DIR
) -> list[str]:
    """On a server: end what its records of the run (None: of every run) say the run made
    there, then remove an unheld tap9. Scoped to this server: its own record directory, and
    switch processes by their HOTAGG_RUN mark only in this network namespace (a test's
    "servers" share one PID namespace and /tmp). Returns what was done."""
    directory = server_dir(host, state_dir)
    paths = sorted(directory.glob(f"{run_id}.json" if run_id else "*.json"))
    done: list[str] = []
    here = _netns(os.getpid())
    for path in paths:
        try:
            record = ServerRecord.load(path)
        except (OSError, ValueError, TypeError) as e:
            done.append(f"{host}: unreadable record {path}: {e}")
            continue
        run = record.run_id
        if groups := _end_groups(record.process_groups.values()):
            done.append(f"{host}: ended process groups {groups} of run {run}")
        marked = [p for p in switch_processes(run) if _netns(p) == here]
        if marked:
            _terminate(marked)
            done.append(f"{host}: stopped switch processes {marked} of run {run}")
        shells = record.node_shells
        namespaces = {
            r["netns"]
            for r in shells.values()
            if r.get("netns") not in (None, here) and _is(r) and _netns(r["pid"]) == r["netns"]
        }
        if namespaces and (inside := _processes_in(namespaces)):
            for pid in inside:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            done.append(f"{host}: killed {len(inside)} processes on the hosts of run {run}")
        if killed := [n for n, r in shells.items() if _kill_node_shell(n, r)]:
            done.append(f"{host}: killed node shells {killed} of run {run}")
        present = _devices()
        gone = [n for n, index in record.devices.items()
                if index is not None and _ifindex(n) == index and _delete_device(n)]  # fmt: skip
        marks = tuple(m + tag for tag in record.device_tags for m in DEVICE_MARKS)
        gone += [n for n in present if marks and n.startswith(marks) and _delete_device(n)]
        if gone:
            done.append(f"{host}: deleted devices {sorted(set(gone))} of run {run}")
        path.unlink(missing_ok=True)
    with _state_lock(directory):  # the last record gone: the server's directory too
        if directory.is_dir() and not any(directory.glob("*.json")):
            (directory / ".lock").unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                directory.rmdir()
                directory.parent.rmdir()  # servers/, if no other server has records
    tap = SSH_TUNNEL_TAP
    if tap in _devices() and not _tap_held(tap) and _delete_device(tap):
        done.append(f"{host}: deleted an unheld {tap}")
    return done


# --- clean-up from the coordinator ----------------------------------------------------------


@dataclass
class ServersCleanup:
    """What cleanup_servers did (`lines`) and the servers it could not reach or clean."""

    lines: list[str] = field(default_factory=list)
    unreachable: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.unreachable


def _pending_path(run_id: str, state_dir: Path) -> Path:
    return state_dir / PENDING_DIR / f"{run_id}.json"


def _clean_server(server: Server, run_id: str, state_dir: Path) -> tuple[list[str], str | None]:
    """(what the server's clean-up did, why it could not be done or None)."""
    argv = _hotagg("topologies.cluster_state", "cleanup", "--run-id", run_id,
                   "--server", server.host, "--state-dir", str(state_dir))  # fmt: skip
    try:
        result = _run_on(
            server, argv, own_login=True, timeout=CHECK_TIMEOUT, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        return [], f"no answer within {CHECK_TIMEOUT:.0f} s"
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines() or [f"exit {result.returncode}"]
        what = "unreachable" if result.returncode == 255 else "clean-up failed"
        return [], f"{what}: {lines[-1]}"
    return [line for line in result.stdout.splitlines() if line.strip()], None


def cleanup_servers(
    run_id: str | None = None,
    *,
    checkout: str | Path | None = None,
    state_dir: str | Path = DEFAULT_STATE_DIR,
    owner_timeout: float = 15.0,
) -> ServersCleanup:
    """For each chosen run (one, one checkout's, or all) that used servers: stop its own
    process, clean every server it lists over ssh and this machine's record, kill its
    recorded ssh clients here, and close the ssh masters no live run uses. A run without
    servers is left to topologies.network.cleanup, untouched."""
    state_dir = Path(state_dir)
    home = str(checkout) if checkout is not None else None

    def chosen(state: dict, name: str) -> bool:
        return (run_id is None or state.get("run_id") == run_id or name == run_id) and (
            home is None or state.get("checkout") == home
        )

    runs: dict[str, dict] = {}
    for path, state in _states(state_dir):
        if chosen(state, path.stem) and state.get("servers"):
            runs[str(state.get("run_id") or path.stem)] = state
    for path, left in _states(state_dir / PENDING_DIR):
        if chosen(left, path.stem):
            entry = runs.setdefault(str(left.get("run_id") or path.stem), {})
            entry["servers"] = sorted({*entry.get("servers", []), *left.get("servers", [])})
    report = ServersCleanup()
    if not runs:
        return report
    report.lines += _stop_owners(list(runs.values()), owner_timeout)
    for run, state in runs.items():
        unreached: list[str] = []
        for text in state.get("servers", []):
            server = parse_server(text)
            lines, why = _clean_server(server, run, state_dir)
            if why is None:
                report.lines += lines or [f"{server}: nothing of run {run} left"]
                continue
            unreached.append(text)
            report.unreachable.append(text)
            report.lines.append(f"{server}: {why}; run {run} left there (make stop again)")
        report.lines += cleanup_here(run, LOCALHOST, state_dir)
        clients = [r for r in (state.get("ssh_clients") or {}).values() if isinstance(r, dict)]
        if live := sorted(r["pid"] for r in clients if _is(r)):
            # Each leads its own process group (setpgrp): sudo and the ssh under it.
            for pid in live:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    if _pgrp(pid) == pid:
                        os.killpg(pid, signal.SIGKILL)
                    else:
                        os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 2.0  # a signalled process is not gone at once
            while time.monotonic() < deadline and any(_alive(p) for p in live):
                time.sleep(0.02)
            report.lines.append(f"killed ssh clients {live} of run {run}")
        pending = _pending_path(run, state_dir)
        if unreached:
            pending.parent.mkdir(parents=True, exist_ok=True)
            keep = {"run_id": run, "checkout": state.get("checkout"), "servers": unreached}
            pending.write_text(json.dumps(keep, indent=1))
        else:
            pending.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                pending.parent.rmdir()  # if no other run waits for a server
    in_use = {
        text
        for _, state in _states(state_dir)
        if str(state.get("run_id")) not in runs and _owner_alive(state)
        for text in state.get("servers", [])
    }
    for text in sorted({t for s in runs.values() for t in s.get("servers", [])} - in_use):
        close_master(parse_server(text))
    return report


def main(argv: list[str] | None = None) -> int:
    """What the coordinator runs on a server: `python -m topologies.cluster_state record
    --run-id ID --server HOST` (JSON part on stdin) records there; `... cleanup [--run-id ID]
    --server HOST` cleans what that server's records list (the coordinator's `make stop`)."""
    parser = argparse.ArgumentParser(prog="python -m topologies.cluster_state")
    sub = parser.add_subparsers(dest="command", required=True)
    record = sub.add_parser("record", help="merge a run's part (JSON on stdin) into its record")
    record.add_argument("--run-id", required=True)
    record.add_argument("--server", required=True, help="this server, as the coordinator names it")
    record.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    clean = sub.add_parser("cleanup", help="clean what this server's records of a run list")
    clean.add_argument("--run-id", help="only this run (default: every recorded run)")
    clean.add_argument("--server", required=True, help="this server, as the coordinator names it")
    clean.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    args = parser.parse_args(argv)
    if args.command == "cleanup":
        if os.geteuid() != 0:
            print("error: cleanup needs root", file=sys.stderr)
            return 1
        for line in cleanup_here(args.run_id, args.server, args.state_dir):
            print(line)
        return 0
    try:
        part = json.loads(sys.stdin.read())
    except ValueError as e:
        print(f"error: the part on stdin is not JSON: {e}", file=sys.stderr)
        return 2
    record_here(args.run_id, args.server, part, args.state_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
