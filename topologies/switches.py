"""Switch processes: the embedded target (`python -m softswitch`) and BMv2's simple_switch_grpc.

Both are started from an argument list (never a shell string), with P4Runtime on loopback,
and are ready when their gRPC port accepts connections. A switch that does not come up
raises SwitchStartError carrying the tail of its log. The Mininet node classes in
topologies/nodes.py wrap the same launchers.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from contract.constants import CPU_PORT

TARGETS = ("embedded", "bmv2")
# The BMv2 switch binary: BMV2_BINARY=simple_switch_grpc-perf (BMv2's performance build, see
# behavioral-model docs/performance.md) or a path; read when a switch is created.
BMV2_BINARY_ENV = "BMV2_BINARY"
DEFAULT_BMV2_BINARY = "simple_switch_grpc"
P4C_BINARY = "p4c-bm2-ss"
REPO_ROOT = Path(__file__).resolve().parent.parent
RUN_ENV = "HOTAGG_RUN"  # environment variable that marks every switch process we start
CHECKOUT_ENV = "HOTAGG_CHECKOUT"  # ... and the checkout that started it (`make stop`)


class SwitchStartError(RuntimeError):
    """The switch process exited or did not open its gRPC port in time."""


def bmv2_binary() -> str:
    """The BMv2 binary to start: $BMV2_BINARY, else simple_switch_grpc."""
    return os.environ.get(BMV2_BINARY_ENV) or DEFAULT_BMV2_BINARY


def bmv2_missing(binary: str | None = None) -> str | None:
    """Why BMv2 cannot be used here, or None when the BMv2 binary and p4c are on PATH."""
    missing = [b for b in (binary or bmv2_binary(), P4C_BINARY) if shutil.which(b) is None]
    if missing:
        return (
            f"{' and '.join(missing)} not on PATH (BMv2 and p4c are not packaged for Debian "
            "or PyPI: the P4 tutorials VM has them, or build them from p4lang)"
        )
    return None


def free_tcp_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


def listens_on(pid: int, port: int) -> bool:
    """Whether process `pid` holds a listening TCP socket on `port` (True where /proc does
    not tell: not Linux, or another user's process)."""
    inodes = set()
    lines: list[str] = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            lines += Path(table).read_text().splitlines()[1:]
    if not lines:
        return True
    for line in lines:
        fields = line.split()
        # local_address is ADDR:PORT in hex; state 0A is LISTEN
        if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
            inodes.add(f"socket:[{fields[9]}]")
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return True
    for fd in fds:
        try:
            if os.readlink(fd) in inodes:
                return True
        except OSError:
            continue
    return False


def log_tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:]) or "(empty log)"


@dataclass
class SwitchProcess:
    """One switch process. `ports` maps P4 port numbers to interface names."""

    name: str
    ports: dict[int, str]
    target: str = "embedded"
    grpc_port: int = 0
    device_id: int = 0
    cpu_port: int = CPU_PORT
    log_dir: Path = field(default_factory=lambda: Path("/tmp/hotagg-logs"))
    seed: int | None = None
    run_id: str | None = None  # exported as HOTAGG_RUN; default "pid<our pid>"
    bmv2_binary: str = field(default_factory=bmv2_binary)
    proc: subprocess.Popen | None = None

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise ValueError(f"unknown target {self.target!r}; choose one of {TARGETS}")
        if not self.grpc_port:
            self.grpc_port = free_tcp_port()

    @property
    def grpc_addr(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"{self.name}.log"

    def argv(self) -> list[str]:
        intfs = [f"{port}@{ifname}" for port, ifname in sorted(self.ports.items())]
        if self.target == "embedded":
            argv = [sys.executable, "-m", "softswitch", "--name", self.name]
            argv += ["--device-id", str(self.device_id), "--grpc-addr", self.grpc_addr]
            argv += ["--cpu-port", str(self.cpu_port)]
            for intf in intfs:
                argv += ["-i", intf]
            if self.seed is not None:
                argv += ["--seed", str(self.seed)]
            return argv
        argv = [self.bmv2_binary, "--device-id", str(self.device_id), "--no-p4"]
        for intf in intfs:
            argv += ["-i", intf]
        # Thrift (if compiled in) listens on all addresses; give it a free port at least.
        argv += ["--thrift-port", str(free_tcp_port())]
        argv += ["--", "--grpc-server-addr", self.grpc_addr, "--cpu-port", str(self.cpu_port)]
        return argv

    def start(self, timeout: float = 15.0) -> SwitchProcess:
        """Launch the process and wait until its gRPC port accepts connections."""
        return self.launch().wait_ready(timeout)

    def launch(self) -> SwitchProcess:
        """Start the process without waiting (several switches can then boot in parallel)."""
        if self.target == "bmv2" and (why := bmv2_missing(self.bmv2_binary)):
            raise SwitchStartError(why)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
        env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        # The mark by which topologies.network.cleanup() finds our processes, and no others.
        env[RUN_ENV] = self.run_id or f"pid{os.getpid()}"
        env[CHECKOUT_ENV] = str(REPO_ROOT)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.argv(), stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT
            )
        return self

    def wait_ready(self, timeout: float = 15.0) -> SwitchProcess:
        """Wait for the gRPC port; on failure stop the process and raise with the log tail."""
        if self.proc is None:
            raise SwitchStartError(f"{self.name} was never launched")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SwitchStartError(
                    f"{self.name} ({self.target}) exited with code {self.proc.returncode}:\n"
                    + log_tail(self.log_path)
                )
            # Open, and by this process: a port taken by another run's switch in the
            # meantime must not pass for ours (the controller would program that one).
            if port_open("127.0.0.1", self.grpc_port) and listens_on(self.proc.pid, self.grpc_port):
                return self
            time.sleep(0.05)
        self.stop()
        raise SwitchStartError(
            f"{self.name} ({self.target}) did not open {self.grpc_addr} within {timeout:.0f} s:\n"
            + log_tail(self.log_path)
        )

    def stop(self, timeout: float = 5.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout)

    def __enter__(self) -> SwitchProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
