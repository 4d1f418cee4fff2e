"""Hosts and switches on another server, and the processes hotagg starts there.

`RemoteHotaggHost` is Mininet Cluster Edition's RemoteMixin on hotagg's HotaggHost: its node
shell runs on its `server` over ssh (through the server's master connection,
topologies/cluster.py). Its `popen` runs an argument list on that server the way a local
host's does, with what plain RemoteMixin loses (issue #32's spike):
- the arguments are shell-quoted (ssh joins them into one line for the remote shell);
- `cwd` and the caller's own environment variables arrive (`env -C DIR VAR=VALUE argv`);
- a wrapper prints the remote pid first (`hotagg-pid N`) and the exit status last
  (`hotagg-exit RC`) on stderr, where `RemoteProcess` takes both out: a remote process killed
  by signal n reads as killed by it (returncode -n, as Popen reports a local one), not as
  ssh's 255, and a lost connection (255 without the line) can be told apart;
- terminate() and kill() reach the remote process (ending the local ssh alone leaves it
  running), through its process group on the server.
stdin and stdout flow through the ssh unchanged, so the agents' line protocol
(experiment/processes.py: 'ready', 'go', 'progress') works as on a local host.

`RemoteP4RuntimeSwitch` is the same for hotagg's P4RuntimeSwitch, either target: its ports
are prepared through its node shell there, and its process (`RemoteSwitchProcess`) runs in
the server's root namespace through the same wrapper, with the programs by absolute path,
P4Runtime on the server's address and its log kept there (`RemoteLog` reads its tail).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from topologies.cluster import (
    CHECK_TIMEOUT,
    Server,
    ensure_control_dir,
    load_cluster,
    ssh_command,
    ssh_options,
)
from topologies.nodes import OFFLOADS, HotaggHost, P4RuntimeSwitch
from topologies.switches import (
    CHECKOUT_ENV,
    REPO_ROOT,
    RUN_ENV,
    SwitchProcess,
    SwitchStartError,
)
from topologies.targets import LaunchSpec, port_open

log = logging.getLogger(__name__)

_cluster = load_cluster()
RemoteMixin: Any = _cluster.RemoteMixin  # a class of a module loaded by path: untyped

PID_MARK = "hotagg-pid"
EXIT_MARK = "hotagg-exit"
_PID_LINE = re.compile(rb"hotagg-pid (\d+)\n")
_EXIT_AT_END = re.compile(rb"hotagg-exit (\d+)\n?\Z")
# Variables a remote process always gets from `env` (hotagg's own and Python's); any other
# is carried only where the caller's value differs from the coordinator's environment (the
# rest of os.environ, e.g. PATH or HOME, belongs to this machine).
CARRIED_PREFIXES = ("HOTAGG_", "PYTHON")
PID_WAIT = 5.0  # seconds terminate() waits for the remote pid of a process just started
RELAY_WAIT = 5.0  # seconds to wait for the rest of stderr once the ssh has exited


def carried_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """The variables of `env` that must be set on the server (None: none)."""
    if env is None:
        return {}
    return {
        k: v for k, v in env.items() if k.startswith(CARRIED_PREFIXES) or os.environ.get(k) != v
    }


def remote_script(
    argv: Sequence[str], cwd: str | os.PathLike | None, env: Mapping[str, str], merge: bool
) -> str:
    """The sh script that runs argv on the server: its pid (the script's, the leader of the
    process group everything runs in) first, then argv in cwd with env, then its status.
    TERM and INT are caught so that the script outlives the argv they stop and reports it.
    merge: the caller asked for stderr=STDOUT, so argv's stderr joins its stdout there."""
    command = [
        "env",
        *(["-C", os.fspath(cwd)] if cwd else []),
        *(f"{k}={v}" for k, v in env.items()),
    ]
    line = shlex.join([*command, *argv]) + (" 2>&1" if merge else "")
    return (
        f"echo {PID_MARK} $$ >&2; trap : TERM INT; {line}; "
        f"rc=$?; echo {EXIT_MARK} $rc >&2; exit $rc"
    )


class RemoteProcess(subprocess.Popen):
    """The local ssh that runs a wrapped remote process (remote_script): its stderr passes
    through a thread that takes out the pid and exit lines and forwards the rest where the
    caller asked (a file, PIPE, DEVNULL or this process's stderr)."""

    def __init__(
        self,
        argv: Sequence[str],
        server: Server,
        stderr: int | IO[Any] | None = None,
        stdin: int | IO[Any] | None = None,
        **popen: Any,
    ) -> None:
        self.server = server
        self.remote_pid: int | None = None
        self.remote_status: int | None = None  # the hotagg-exit line's code
        self.remote_log: RemoteLog | None = None  # the log it writes there (a switch's)
        self.ssh_returncode: int | None = None
        self._pid_seen = threading.Event()
        self._settled = False
        sink, reader = self._sink(stderr)
        relay_read, relay_write = os.pipe()
        try:
            # An inherited stdin would let ssh read this terminal.
            stdin = subprocess.DEVNULL if stdin is None else stdin
            super().__init__(list(argv), stdin=stdin, stderr=relay_write, **popen)
        except BaseException:
            for fd in (relay_read, sink, reader):
                if fd is not None:
                    os.close(fd)
            raise
        finally:
            os.close(relay_write)
        if reader is not None:
            # Kept open as Popen keeps its pipes: the caller reads and closes it.
            raw = open(reader, "rb")  # noqa: SIM115
            text = any(popen.get(k) for k in ("text", "universal_newlines", "encoding", "errors"))
            self.stderr = (
                io.TextIOWrapper(raw, encoding=popen.get("encoding"), errors=popen.get("errors"))
                if text
                else raw
            )
        self._relay = threading.Thread(
            target=self._relay_stderr, args=(relay_read, sink), daemon=True
        )
        self._relay.start()

    @staticmethod
    def _sink(stderr: int | IO[Any] | None) -> tuple[int | None, int | None]:
        """(descriptor the relay writes to or None to drop, read end for stderr=PIPE)."""
        if stderr == subprocess.DEVNULL:
            return None, None
        if stderr == subprocess.PIPE:
            read, write = os.pipe()
            return write, read
        if stderr is None or stderr == subprocess.STDOUT:  # STDOUT: merged on the server
            return os.dup(2), None
        if isinstance(stderr, int):
            return os.dup(stderr), None
        stderr.flush()  # the caller may close its file once popen returns: keep our own
        return os.dup(stderr.fileno()), None

    def _relay_stderr(self, fd: int, sink: int | None) -> None:
        held = b""  # a line ending in an exit mark: the mark if nothing follows it
        pending = b""

        def forward(data: bytes) -> None:
            if sink is not None and data:
                # The reader may have gone away: keep draining so that ssh never blocks.
                with contextlib.suppress(OSError):
                    os.write(sink, data)

        try:
            with open(fd, "rb", buffering=0) as stream:
                while chunk := stream.read(65536):
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        line += b"\n"
                        pid = _PID_LINE.fullmatch(line)
                        if pid and self.remote_pid is None:
                            self.remote_pid = int(pid.group(1))
                            self._pid_seen.set()
                            continue
                        forward(held)
                        held = b""
                        if _EXIT_AT_END.search(line):
                            held = line
                        else:
                            forward(line)
            if pending:  # a last line without its newline: not the wrapper's (echo ends it)
                forward(held + pending)
                held = b""
            end = _EXIT_AT_END.search(held)
            if end:
                self.remote_status = int(end.group(1))
                held = held[: end.start()]
            forward(held)
        finally:
            self._pid_seen.set()  # no pid will come
            if sink is not None:
                os.close(sink)

    def _settle(self) -> int:
        """Once the ssh has exited: its code, as the remote process's status tells it."""
        assert self.returncode is not None
        if not self._settled:
            self._relay.join(RELAY_WAIT)
            self.ssh_returncode = self.returncode
            status = self.remote_status
            if status is not None:
                # sh reports a process killed by signal n as 128+n
                killed = status - 128
                self.returncode = -killed if 0 < killed < signal.NSIG else status
            self._settled = True
        return self.returncode

    @property
    def connection_lost(self) -> bool:
        """It ended without the wrapper's exit line: the ssh (or the wrapper) died."""
        return self._settled and self.remote_status is None

    def poll(self) -> int | None:
        return None if super().poll() is None else self._settle()

    def wait(self, timeout: float | None = None) -> int:
        super().wait(timeout)
        return self._settle()

    def send_signal(self, sig: int) -> None:
        """Signal the remote process group; the local ssh only if that cannot be reached
        (then the remote process may keep running: `make stop` on that server ends it)."""
        if self.poll() is not None:
            return
        if self._pid_seen.wait(PID_WAIT) and self.remote_pid is not None:
            kill = ["sudo", "kill", "-s", signal.Signals(sig).name[3:], "--", f"-{self.remote_pid}"]
            argv = [
                "ssh",
                *ssh_options(),
                "-o",
                "LogLevel=ERROR",
                self.server.dest,
                shlex.join(kill),
            ]
            result = subprocess.run(
                argv,
                capture_output=True,
                timeout=CHECK_TIMEOUT,
                check=False,
                stdin=subprocess.DEVNULL,
            )
            if result.returncode == 0 and sig != signal.SIGKILL:
                return
        super().send_signal(sig)  # SIGKILL: the local ssh too, so nothing is left waiting


class RemoteHotaggHost(RemoteMixin, HotaggHost):
    """hotagg's host on `server` (localhost: a plain local HotaggHost), reached as `user`."""

    # Mininet's ssh options, with hotagg's first (ssh keeps an option's first value, so
    # these win over RemoteMixin's own ControlPersist): the shared master connection.
    sshbase = ["ssh", "-q", *ssh_options(), *RemoteMixin.sshbase[2:]]

    def __init__(
        self, name: str, server: str = "localhost", user: str = "root", **params: Any
    ) -> None:
        ensure_control_dir()
        self.processes: list[RemoteProcess] = []  # what popen started on the server
        super().__init__(name, server=server, user=user, **params)

    def popen(self, *args: Any, **kwargs: Any) -> subprocess.Popen:
        """Run a command in this host as Node.popen does (a list, a string split on spaces,
        or one shell line with shell=True); on another server through ssh as a
        RemoteProcess, with cwd and env carried."""
        if not self.isRemote:
            return super().popen(*args, **kwargs)
        if len(args) == 1 and isinstance(args[0], str):
            argv = ["sh", "-c", args[0]] if kwargs.get("shell") else args[0].split()
        else:
            argv = [str(a) for a in (args[0] if len(args) == 1 else args)]
        cwd = kwargs.pop("cwd", None)
        env = kwargs.pop("env", None)
        kwargs.pop("shell", None)
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
        script = remote_script(argv, cwd, carried_env(env), kwargs["stderr"] == subprocess.STDOUT)
        inside = ["sudo", "-E", "mnexec", "-da", str(self.pid), "sh", "-c", script]
        ssh = ["ssh", *ssh_options(), "-o", "LogLevel=ERROR", self.dest, shlex.join(inside)]
        # Its own session, as mnexec -d gives a local one: ^C on the coordinator's terminal
        # is the coordinator's to handle.
        proc = RemoteProcess(
            ssh, Server(self.serverIP, self.user), start_new_session=True, **kwargs
        )
        self.processes = [p for p in self.processes if p.returncode is None] + [proc]
        return proc

    def terminate(self) -> None:
        """Also end what popen started there and still runs: its ssh ending would not."""
        for proc in self.processes:
            if proc.poll() is None:
                proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(RELAY_WAIT)
        super().terminate()


# --- switches on another server -----------------------------------------------------------


@dataclass(frozen=True)
class RemoteLog:
    """A log file on a server, read there over ssh."""

    server: Server
    path: Path

    def __str__(self) -> str:
        return f"{self.server.dest}:{self.path}"

    def tail(self, lines: int = 20) -> str:
        """Its last lines, as topologies.switches.log_tail reads a local log."""
        tail = shlex.join(["tail", "-n", str(lines), str(self.path)])
        try:
            result = subprocess.run(
                [*ssh_command(self.server), tail],
                capture_output=True,
                text=True,
                errors="replace",
                timeout=CHECK_TIMEOUT,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            return f"(no log: {self.server} did not answer within {CHECK_TIMEOUT:.0f} s)"
        if result.returncode != 0:
            return f"(no log: {result.stderr.strip() or f'ssh exited with {result.returncode}'})"
        return result.stdout.rstrip("\n") or "(empty log)"


def free_port_on(server: Server) -> int:
    """A TCP port free on every address of `server`, as its kernel picks one there."""
    code = "import socket; s = socket.socket(); s.bind(('', 0)); print(s.getsockname()[1])"
    try:
        result = subprocess.run(
            [*ssh_command(server), shlex.join([sys.executable, "-c", code])],
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise SwitchStartError(f"{server} did not answer within {CHECK_TIMEOUT:.0f} s") from None
    if result.returncode != 0 or not result.stdout.strip().isdigit():
        why = result.stderr.strip() or result.stdout.strip() or f"exit {result.returncode}"
        raise SwitchStartError(f"no free TCP port found on {server}: {why}")
    return int(result.stdout)


def absolute_program(argv: list[str]) -> list[str]:
    """argv with its program by the path it has here: a remote command gets sshd's PATH, and
    a server has the programs at the coordinator's paths (make cluster-check)."""
    found = shutil.which(argv[0])
    return [str(Path(found).absolute()) if found else argv[0], *argv[1:]]


@dataclass
class RemoteSwitchProcess(SwitchProcess):
    """A switch process on `server`, in its root namespace (as a local switch is here),
    started over ssh through remote_script's wrapper, so its pid and exit status come back
    (`proc` is a RemoteProcess). P4Runtime listens on the server's address; the ports are
    chosen on the server; the log stays there, under a directory named after the server in
    `log_dir` (a test's servers share one filesystem: a log read here by mistake would pass
    unseen otherwise), and `proc.remote_log` reads its tail over ssh."""

    server: Server = field(default_factory=lambda: Server("localhost"))

    def __post_init__(self) -> None:
        if self.server.is_local:
            raise ValueError(f"{self.name}: a RemoteSwitchProcess needs another server")
        if not self.grpc_port:
            self.grpc_port = free_port_on(self.server)
        super().__post_init__()

    @property
    def grpc_addr(self) -> str:
        return f"{self.server.host}:{self.grpc_port}"

    @property
    def log_path(self) -> Path:
        """The log's path on its server."""
        return self.kind.log_path(Path(self.log_dir).absolute() / self.server.host, self.name)

    def describe(self) -> str:
        return f"{self.name} ({self.target}) on {self.server}"

    def spec(self) -> LaunchSpec:
        return replace(super().spec(), free_port=lambda: free_port_on(self.server))

    def argv(self) -> list[str]:
        return absolute_program(super().argv())

    def launch(self) -> RemoteSwitchProcess:
        """Start the switch on its server without waiting. Its output goes to its log there,
        with env's (a checkout missing there) and that of a switch that does not start."""
        if why := self.kind.missing():
            raise SwitchStartError(why)
        env = {
            "PYTHONPATH": str(REPO_ROOT),
            # The marks by which `make stop` on that server finds it (cleanup()).
            RUN_ENV: self.run_id or f"pid{os.getpid()}",
            CHECKOUT_ENV: str(REPO_ROOT),
        }
        log = self.log_path
        into_log = ["sh", "-c", 'mkdir -p "${0%/*}" && exec "$@" >"$0" 2>&1', str(log)]
        in_checkout = ["env", "-C", str(REPO_ROOT), *(f"{k}={v}" for k, v in env.items())]
        script = remote_script([*into_log, *in_checkout, *self.argv()], None, {}, merge=False)
        ssh = [*ssh_command(self.server), shlex.join(["sudo", "-E", "sh", "-c", script])]
        # Its own session, as a local switch's process is not in the coordinator's ^C. The
        # wrapper's stderr has only its marks and sh's "Killed" to say (a failed mkdir shows
        # as the log's absence).
        proc = RemoteProcess(
            ssh,
            self.server,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        proc.remote_log = RemoteLog(self.server, log)
        self.proc = proc
        return self

    def ready(self) -> bool:
        """Its P4Runtime port answers from here, where the controller runs."""
        return port_open(self.server.host, self.grpc_port)

    def log_tail(self, lines: int = 20) -> str:
        return RemoteLog(self.server, self.log_path).tail(lines)


class RemoteP4RuntimeSwitch(RemoteMixin, P4RuntimeSwitch):
    """hotagg's P4Runtime switch on `server` (localhost: a plain local P4RuntimeSwitch),
    reached as `user`: its interfaces are prepared through its node shell there and its
    process is a RemoteSwitchProcess. P4Runtime is not authenticated and listens on the
    server's address: the servers' network must be a lab network (docs/cluster.md)."""

    sshbase = RemoteHotaggHost.sshbase

    def __init__(
        self, name: str, server: str = "localhost", user: str = "root", **params: Any
    ) -> None:
        ensure_control_dir()
        super().__init__(name, server=server, user=user, **params)

    @property
    def grpc_addr(self) -> str:
        if not self.isRemote:
            return str(super().grpc_addr)
        return self.process.grpc_addr if self.process else f"{self.serverIP}:{self.grpc_port}"

    def _prepare_intfs(self) -> None:
        if not self.isRemote:
            super()._prepare_intfs()
            return
        features = " ".join(f"{f} off" for f in OFFLOADS)
        for ifname in self.p4_ports().values():
            name = shlex.quote(ifname)
            # As P4RuntimeSwitch does here: no IPv6, no offloads; ethtool's error if it fails.
            out = self.cmd(
                f"sysctl -qw net.ipv6.conf.{name}.disable_ipv6=1 >/dev/null 2>&1; "
                f'err=$(ethtool -K {name} {features} 2>&1 >/dev/null) || echo "$err"'
            ).strip()
            if out:
                log.warning("%s: ethtool -K %s on %s: %s", self.name, ifname, self.server, out)

    def _new_process(self, cls: type[SwitchProcess] = SwitchProcess, **extra: Any) -> SwitchProcess:
        if not self.isRemote:
            return super()._new_process(cls, **extra)
        return super()._new_process(
            RemoteSwitchProcess, server=Server(self.serverIP, self.user), **extra
        )
