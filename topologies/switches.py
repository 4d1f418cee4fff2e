"""Switch processes: one switch of any target (topologies/targets.py) as a process.

A switch is started from its target's argument list (never a shell string), with P4Runtime
on loopback, and is ready when its target says so (its gRPC port accepts connections and is
the process's). A switch that does not come up raises SwitchStartError carrying the tail of
its log. The Mininet node class in topologies/nodes.py wraps the same launcher.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from contract.constants import CPU_PORT
from contract.p4files import REPO
from topologies.targets import (
    DEFAULT_BMV2_BINARY,
    DEFAULT_LOG_DIR,
    LaunchSpec,
    Target,
    TargetName,
    bmv2_missing,
    free_tcp_port,
    make_target,
)

# Names other modules import from here: the switch process's and the BMv2 helpers'.
__all__ = [
    "CHECKOUT_ENV",
    "DEFAULT_BMV2_BINARY",
    "REPO_ROOT",
    "RUN_ENV",
    "SwitchProcess",
    "SwitchStartError",
    "bmv2_missing",
    "free_tcp_port",
    "log_tail",
]

REPO_ROOT = REPO
RUN_ENV = "HOTAGG_RUN"  # environment variable that marks every switch process we start
CHECKOUT_ENV = "HOTAGG_CHECKOUT"  # ... and the checkout that started it (`make stop`)


class SwitchStartError(RuntimeError):
    """The switch process exited or did not open its gRPC port in time."""


def log_tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:]) or "(empty log)"


@dataclass
class SwitchProcess:
    """One switch process. `ports` maps P4 port numbers to interface names; `target` is a
    Target, or a registered target's name (then built as the environment sets it, e.g.
    $BMV2_BINARY); it reads as the name afterwards, and `kind` is the Target."""

    name: str
    ports: dict[int, str]
    target: str | Target = TargetName.EMBEDDED
    grpc_port: int = 0
    device_id: int = 0
    cpu_port: int = CPU_PORT
    log_dir: Path = DEFAULT_LOG_DIR
    seed: int | None = None
    run_id: str | None = None  # exported as HOTAGG_RUN; default "pid<our pid>"
    proc: subprocess.Popen | None = None
    kind: Target = field(init=False)

    def __post_init__(self) -> None:
        self.kind = make_target(self.target)  # UnknownTarget (a ValueError) names the others
        self.target = self.kind.name
        if not self.grpc_port:
            self.grpc_port = free_tcp_port()

    @property
    def grpc_addr(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def log_path(self) -> Path:
        return self.kind.log_path(self.log_dir, self.name)

    def spec(self) -> LaunchSpec:
        return LaunchSpec(
            self.name, self.ports, self.grpc_addr, self.device_id, self.cpu_port, self.seed
        )

    def argv(self) -> list[str]:
        return self.kind.argv(self.spec())

    def start(self, timeout: float = 15.0) -> SwitchProcess:
        """Launch the process and wait until its gRPC port accepts connections."""
        return self.launch().wait_ready(timeout)

    def launch(self) -> SwitchProcess:
        """Start the process without waiting (several switches can then boot in parallel)."""
        if why := self.kind.missing():
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
        """Wait until the target says the switch is ready; on failure stop the process and
        raise with the log tail."""
        if self.proc is None:
            raise SwitchStartError(f"{self.name} was never launched")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SwitchStartError(
                    f"{self.describe()} exited with code {self.proc.returncode}:\n"
                    + self.log_tail()
                )
            if self.ready():
                return self
            time.sleep(0.05)
        self.stop()
        raise SwitchStartError(
            f"{self.describe()} did not open {self.grpc_addr} within {timeout:.0f} s:\n"
            + self.log_tail()
        )

    def ready(self) -> bool:
        """Whether the launched switch answers, as its target tells."""
        assert self.proc is not None
        return self.kind.ready(self.proc.pid, self.grpc_port)

    def log_tail(self, lines: int = 20) -> str:
        return log_tail(self.log_path, lines)

    def describe(self) -> str:
        """How errors name it: 's1 (bmv2)'."""
        return f"{self.name} ({self.target})"

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
