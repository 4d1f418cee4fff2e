"""Mininet node classes: P4Runtime switches on their Mininet interfaces, and configured hosts.

`P4RuntimeSwitch` runs a switch of any target (topologies/targets.py: the embedded
`python -m softswitch`, BMv2's `simple_switch_grpc --no-p4`, or one registered later)
through topologies.switches.SwitchProcess (argument lists, no shell strings), in the root
namespace as Mininet's switches are, with P4Runtime on 127.0.0.1:<grpc_port>. Mininet starts
every switch, then calls `batchStartup`, which waits until all gRPC ports accept: the
switches boot in parallel. A switch that does not come up raises SwitchStartError with the
tail of its log. The pipeline is pushed afterwards by the controller (both start empty).
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mininet.node import Host, Switch

from contract.constants import CPU_PORT
from topologies.switches import SwitchProcess, SwitchStartError
from topologies.targets import DEFAULT_LOG_DIR, Target, TargetName, make_target

log = logging.getLogger(__name__)

# veth leaves checksums to the receiver (CHECKSUM_PARTIAL) and offloads merge or split
# frames; a switch that reads and writes raw frames must see them as they are on the wire.
OFFLOADS = ("tx", "rx", "sg", "tso", "gso", "gro")


def _quiet(argv: Sequence[str]) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False)


class P4RuntimeSwitch(Switch):
    """A Mininet switch whose data plane is a P4Runtime switch process of `target`."""

    def __init__(
        self,
        name: str,
        target: str | Target = TargetName.EMBEDDED,
        grpc_port: int = 0,
        device_id: int = 0,
        cpu_port: int = CPU_PORT,
        log_dir: str | Path = DEFAULT_LOG_DIR,
        run_id: str | None = None,
        seed: int | None = None,
        start_timeout: float = 30.0,
        batch: bool = False,
        **params: Any,
    ) -> None:
        """target: a Target, or a registered target's name (topologies/targets.py)
        grpc_port: P4Runtime port on 127.0.0.1 (0: a free one)
        device_id: P4Runtime device id
        cpu_port: the P4 port number of the CPU (PacketIn/PacketOut)
        log_dir: where <name>.log goes
        run_id: tag exported to the process so that cleanup() can find it
        seed: random seed of the embedded target's drop simulator (None: its default)
        start_timeout: seconds to wait for the gRPC port
        batch: set by Mininet when batchStartup will wait for readiness"""
        super().__init__(name, **params)
        self.kind = make_target(target)
        self.grpc_port = grpc_port
        self.device_id = device_id
        self.cpu_port = cpu_port
        self.log_dir = Path(log_dir)
        self.run_id = run_id
        self.seed = seed
        self.start_timeout = start_timeout
        self.batch = batch
        self.process: SwitchProcess | None = None

    @property
    def grpc_addr(self) -> str:
        return f"127.0.0.1:{self.process.grpc_port if self.process else self.grpc_port}"

    @property
    def log_path(self) -> Path:
        return self.kind.log_path(self.log_dir, self.name)

    def p4_ports(self) -> dict[int, str]:
        """P4 port number -> interface name (Mininet's port numbers, from the topology)."""
        return {port: intf.name for port, intf in sorted(self.intfs.items()) if intf.name != "lo"}

    def _prepare_intfs(self) -> None:
        for ifname in self.p4_ports().values():
            # No IPv6 on switch ports: router solicitations would only be noise.
            _quiet(["sysctl", "-qw", f"net.ipv6.conf.{ifname}.disable_ipv6=1"])
            result = _quiet(["ethtool", "-K", ifname, *(x for f in OFFLOADS for x in (f, "off"))])
            if result.returncode != 0:
                log.warning("%s: ethtool -K %s: %s", self.name, ifname, result.stderr.strip())

    def _new_process(self, cls: type[SwitchProcess] = SwitchProcess, **extra: Any) -> SwitchProcess:
        """The process start() launches: a SwitchProcess of this node's settings (a node on
        another server passes its own class and server, topologies/remote.py)."""
        return cls(
            name=self.name,
            ports=self.p4_ports(),
            target=self.kind,
            grpc_port=self.grpc_port,
            device_id=self.device_id,
            cpu_port=self.cpu_port,
            log_dir=self.log_dir,
            seed=self.seed,
            run_id=self.run_id,
            **extra,
        )

    def start(self, controllers: Sequence[Any] = ()) -> None:
        """Launch the switch process on our interfaces; wait for it unless batched."""
        self._prepare_intfs()
        self.process = self._new_process()
        self.grpc_port = self.process.grpc_port  # a free port was chosen if it was 0
        self.process.launch()
        if not self.batch:
            self.process.wait_ready(self.start_timeout)

    @classmethod
    def batchStartup(cls, switches: Sequence[P4RuntimeSwitch]) -> Sequence[P4RuntimeSwitch]:
        """Wait until every switch answers; stop them all if one does not."""
        try:
            for sw in switches:
                if sw.process is None:
                    raise SwitchStartError(f"{sw.name} was not started")
                sw.process.wait_ready(sw.start_timeout)
        except SwitchStartError:
            for sw in switches:
                sw.stop_process()
            raise
        return switches

    def stop_process(self) -> None:
        """Stop the switch process (SIGTERM, then SIGKILL) and keep the interfaces."""
        if self.process is not None:
            self.process.stop()

    def stop(self, deleteIntfs: bool = True) -> None:
        """Stop the process, then let Mininet delete our interfaces."""
        self.stop_process()
        super().stop(deleteIntfs)

    def connected(self) -> bool:
        return (
            self.process is not None
            and self.process.proc is not None
            and (self.process.proc.poll() is None)
        )


class HostConfigError(RuntimeError):
    """A host could not be configured; the message names the host and the failing command."""


class HotaggHost(Host):
    """A host with IPv6 and offloads off, static ARP and a default route on its interface."""

    def config(self, arp: dict[str, str] | None = None, **params: Any) -> dict:
        """arp: IPv4 address -> MAC of every peer this host talks to (static entries)
        params: Mininet's host parameters (ip, mac, ...)"""
        result = super().config(**params)
        intf = self.defaultIntf()
        if intf is None:
            return result
        self._run("sysctl", "-qw", *(
            f"net.ipv6.conf.{x}.disable_ipv6=1" for x in ("all", "default", "lo")
        ))  # fmt: skip
        features = [x for f in OFFLOADS for x in (f, "off")]
        out = self._run("ethtool", "-K", intf.name, *features, check=False)
        if out:
            log.warning("%s: ethtool -K %s: %s", self.name, intf.name, out)
        # The switch routes by IPv4 address; the MAC only needs to be one the switch takes,
        # so every peer is resolved statically and nothing depends on ARP through the switch.
        batch = [f"neigh replace {ip} lladdr {mac} dev {intf.name} nud permanent"
                 for ip, mac in sorted((arp or {}).items())]  # fmt: skip
        batch.append(f"route replace default dev {intf.name}")
        self._run("ip", "-batch", "-", stdin="\n".join(batch) + "\n")
        return result

    def _run(self, *argv: str, stdin: str | None = None, check: bool = True) -> str:
        """Run argv inside this host's namespace (no shell); return stderr, raise on failure."""
        proc = self.popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        _, err = proc.communicate(stdin)
        if check and proc.returncode != 0:
            raise HostConfigError(f"{self.name}: {' '.join(argv)} failed: {err.strip()}")
        return err.strip() if proc.returncode != 0 else ""
