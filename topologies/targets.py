"""Switch targets: one class per kind of P4Runtime switch hotagg runs, as Mininet has one
class per kind of switch.

A target owns what differs between switches: its command line, how to tell it is ready,
the device config its pipeline push takes, what it can do over P4Runtime (Capabilities),
where its log goes, and what its cost means for a run (the regime hint's note). Everything
else (topologies/switches.py starts the process, topologies/nodes.py puts it in Mininet, the
experiment programs it) asks the class and never compares a target's name.

A new target is one class here, registered with @register: the options, the runner, the
Mininet nodes and `make stop` find it by its name.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, TypeVar

from contract.enums import NameEnum
from contract.p4files import REPO

DEFAULT_LOG_DIR = Path("/tmp/hotagg-logs")  # where a switch's <name>.log goes by default
# The BMv2 switch binary: BMV2_BINARY=simple_switch_grpc-perf (BMv2's performance build, see
# behavioral-model docs/performance.md) or a path; read when a BMv2 target is made.
BMV2_BINARY_ENV = "BMV2_BINARY"
DEFAULT_BMV2_BINARY = "simple_switch_grpc"
P4C_BINARY = "p4c-bm2-ss"
BMV2_JSON = REPO / "build" / "hotagg.json"  # `make build`'s output: p4src/ compiled for BMv2


class TargetName(NameEnum):
    """The targets hotagg ships; their values are the TARGET= / --target names. A target
    registered elsewhere (a test's) is named by its class's plain string."""

    EMBEDDED = "embedded"
    BMV2 = "bmv2"


class UnknownTarget(ValueError):
    """No target is registered under this name; the message lists the ones that are."""


@dataclass(frozen=True)
class Capabilities:
    """What a target does over P4Runtime beyond what every target does (tables, counters,
    packet I/O, the pipeline push)."""

    # Read of register entries: the embedded target answers it; BMv2 answers UNIMPLEMENTED
    # (p4lang/PI issue 376), so its registers are read through counters or the data plane.
    register_reads: bool


@dataclass(frozen=True)
class LaunchSpec:
    """What a switch's command line is made of, whatever its target."""

    name: str
    ports: Mapping[int, str]  # P4 port number -> interface name
    grpc_addr: str
    device_id: int
    cpu_port: int
    seed: int | None  # of a drop simulator that takes one (None: the target's default)
    # Picks a free TCP port where the switch runs, for a port beside P4Runtime's (None: on
    # this machine; a switch on another server asks there, topologies/remote.py).
    free_port: Callable[[], int] | None = None

    def interfaces(self) -> list[str]:
        """`port@ifname` of every port, in port order (both targets' -i syntax)."""
        return [f"{port}@{ifname}" for port, ifname in sorted(self.ports.items())]


class Target(ABC):
    """One kind of switch. Subclasses set the class attributes and build the command line;
    the defaults suit a switch that serves P4Runtime on a TCP port and needs no config
    beyond the P4Info."""

    name: ClassVar[str]  # TARGET=, and the registry's key
    capabilities: ClassVar[Capabilities]
    # Words in a process's first arguments that mark it as this target's switch, so that
    # `make stop` finds the switches a run left behind (with the run's mark).
    programs: ClassVar[tuple[str, ...]]

    @classmethod
    def from_environment(cls) -> Target:
        """The target as the environment configures it (e.g. $BMV2_BINARY)."""
        return cls()

    @abstractmethod
    def argv(self, spec: LaunchSpec) -> list[str]:
        """The command line that starts one switch."""

    def missing(self) -> str | None:
        """Why this target cannot run on this machine, or None."""
        return None

    def ready(self, pid: int, grpc_port: int) -> bool:
        """Whether the switch of process `pid` is ready: its P4Runtime port accepts, and it
        is this process's (a port taken by another run's switch in the meantime must not
        pass for ours: the controller would program that one)."""
        return port_open("127.0.0.1", grpc_port) and listens_on(pid, grpc_port)

    def device_config(self) -> bytes:
        """The device config of its pipeline push, beside the P4Info (none by default)."""
        return b""

    def log_path(self, log_dir: Path, switch: str) -> Path:
        """Where switch `switch`'s output goes."""
        return log_dir / f"{switch}.log"

    def describe(self) -> str:
        """How a run's first lines name the switch."""
        return f"{self.name} switch"

    def setting(self) -> str | None:
        """The make variable that chose this build, as `VAR=value` (errors name it)."""
        return None

    def record(self) -> dict[str, str]:
        """What a run's config.json keeps about the target beyond its name."""
        return {}

    @classmethod
    def detail_of(cls, record: Mapping[str, object]) -> str | None:
        """The build a run's config.json names (record()), for its configuration line."""
        return None

    @classmethod
    def cost_note(cls, record: Mapping[str, object]) -> str | None:
        """What to change when this target's switch set a run's pace (the regime hint), for
        the build the config.json names; None when only the link rate is left to change."""
        return None


TARGETS: dict[str, type[Target]] = {}
T = TypeVar("T", bound=type[Target])


def register(cls: T) -> T:
    """Class decorator: the target answers to its `name` from now on."""
    if cls.name in TARGETS and TARGETS[cls.name] is not cls:
        raise ValueError(f"target {cls.name!r} is registered already ({TARGETS[cls.name]})")
    TARGETS[cls.name] = cls
    return cls


def target_names() -> tuple[str, ...]:
    """Every registered target's name, the shipped ones first."""
    return tuple(TARGETS)


def target_class(name: str) -> type[Target]:
    """The class registered under `name`; UnknownTarget names the others."""
    try:
        return TARGETS[str(name)]
    except KeyError:
        raise UnknownTarget(
            f"unknown target {str(name)!r}; choose one of {', '.join(target_names())}"
        ) from None


def make_target(target: str | Target) -> Target:
    """A Target as given, or the one registered under a name, as the environment sets it."""
    return target if isinstance(target, Target) else target_class(target).from_environment()


def switch_programs() -> tuple[str, ...]:
    """The process markers of every registered target (`make stop`)."""
    return tuple(p for cls in TARGETS.values() for p in cls.programs)


@register
class EmbeddedTarget(Target):
    """hotagg's embedded Python switch, `python -m softswitch`: it serves the P4Info and
    runs its own model of the P4 program, so its pipeline push needs no device config."""

    name = TargetName.EMBEDDED
    capabilities = Capabilities(register_reads=True)
    programs = ("softswitch",)

    def argv(self, spec: LaunchSpec) -> list[str]:
        argv = [sys.executable, "-m", "softswitch", "--name", spec.name]
        argv += ["--device-id", str(spec.device_id), "--grpc-addr", spec.grpc_addr]
        argv += ["--cpu-port", str(spec.cpu_port)]
        for intf in spec.interfaces():
            argv += ["-i", intf]
        if spec.seed is not None:
            argv += ["--seed", str(spec.seed)]
        return argv


@register
@dataclass(frozen=True)
class Bmv2Target(Target):
    """BMv2's simple_switch_grpc, started without a program (`--no-p4`); its pipeline push
    carries the BMv2 JSON that p4c compiles from p4src/. `binary`: the switch binary, a
    name on PATH or a path (the standard build, or the -perf build, several times faster)."""

    binary: str = DEFAULT_BMV2_BINARY
    name: ClassVar[str] = TargetName.BMV2
    capabilities: ClassVar[Capabilities] = Capabilities(register_reads=False)
    programs: ClassVar[tuple[str, ...]] = (DEFAULT_BMV2_BINARY,)  # the -perf build's too

    @classmethod
    def from_environment(cls) -> Bmv2Target:
        return cls(os.environ.get(BMV2_BINARY_ENV) or DEFAULT_BMV2_BINARY)

    def argv(self, spec: LaunchSpec) -> list[str]:
        argv = [self.binary, "--device-id", str(spec.device_id), "--no-p4"]
        for intf in spec.interfaces():
            argv += ["-i", intf]
        # Thrift (if compiled in) listens on all addresses; give it a free port at least.
        argv += ["--thrift-port", str((spec.free_port or free_tcp_port)())]
        argv += ["--", "--grpc-server-addr", spec.grpc_addr, "--cpu-port", str(spec.cpu_port)]
        return argv

    def missing(self) -> str | None:
        """Why BMv2 cannot be used here: the switch binary or p4c not on PATH."""
        return bmv2_missing(self.binary)

    def device_config(self) -> bytes:
        """The BMv2 JSON of the current p4src/ (make build compiles it when it changed)."""
        subprocess.run(["make", "-s", "-C", str(REPO), "build"], check=True)
        return BMV2_JSON.read_bytes()

    def describe(self) -> str:
        return f"BMv2 ({self.binary})"

    def setting(self) -> str:
        return f"{BMV2_BINARY_ENV}={self.binary}"

    def record(self) -> dict[str, str]:
        return {"bmv2_binary": self.binary}

    @classmethod
    def detail_of(cls, record: Mapping[str, object]) -> str | None:
        binary = record.get("bmv2_binary")
        return str(binary) if binary else None

    @classmethod
    def cost_note(cls, record: Mapping[str, object]) -> str | None:
        binary = cls.detail_of(record)
        if binary and not binary.endswith("-perf"):
            return (
                f"{BMV2_BINARY_ENV}={DEFAULT_BMV2_BINARY}-perf (BMv2's standard build handles "
                "under 1,000 hot pushes/s)"
            )
        return None


def bmv2_binary() -> str:
    """The BMv2 binary to start: $BMV2_BINARY, else simple_switch_grpc."""
    return Bmv2Target.from_environment().binary


def bmv2_missing(binary: str | None = None) -> str | None:
    """Why BMv2 cannot be used here, or None when the BMv2 binary and p4c are on PATH."""
    missing = [b for b in (binary or bmv2_binary(), P4C_BINARY) if shutil.which(b) is None]
    if missing:
        return (
            f"{' and '.join(missing)} not on PATH (BMv2 and p4c are not packaged for Debian "
            "or PyPI: the P4 tutorials VM has them, or build them from p4lang)"
        )
    return None


# --- readiness: a P4Runtime port that accepts, held by the switch's process ---------------


def free_tcp_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


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
