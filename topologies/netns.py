"""Network namespaces and veth pairs for packet tests and benchmarks, without Mininet.

The switch side of each veth pair stays in the root namespace (where a switch process runs,
as in Mininet); the host side goes into a namespace of our own, so test traffic never meets
a real network. Raw sockets for the host side are opened inside that namespace and keep
working from the root namespace afterwards.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

CLONE_NEWNET = 0x40000000
ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4

_libc = ctypes.CDLL(None, use_errno=True)


class NetnsError(RuntimeError):
    """A namespace or link could not be set up; the message names the failing command."""


def run_ip(*args: str, netns: str | None = None) -> None:
    cmd = ["ip", *(["-n", netns] if netns else []), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise NetnsError(f"{' '.join(cmd)}: {proc.stderr.strip()}")


def _sysctl(key: str, value: str, netns: str | None = None) -> None:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    subprocess.run([*prefix, "sysctl", "-qw", f"{key}={value}"], capture_output=True, check=False)


def _ethtool_offload_off(ifname: str, netns: str | None = None) -> None:
    # veth hands frames to AF_PACKET with checksums still to be filled in (CHECKSUM_PARTIAL);
    # the P4 tutorials switch offloads off for the same reason.
    prefix = ["ip", "netns", "exec", netns] if netns else []
    for feature in ("tx", "rx", "sg", "tso", "gso", "gro"):
        subprocess.run(
            [*prefix, "ethtool", "-K", ifname, feature, "off"], capture_output=True, check=False
        )


@contextlib.contextmanager
def in_netns(name: str) -> Iterator[None]:
    """Run the body with the calling thread inside network namespace `name`."""
    own = os.open(f"/proc/{os.getpid()}/task/{threading.get_native_id()}/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if _libc.setns(target, CLONE_NEWNET) != 0:
            raise NetnsError(f"setns({name}): {os.strerror(ctypes.get_errno())}")
        try:
            yield
        finally:
            if _libc.setns(own, CLONE_NEWNET) != 0:
                raise NetnsError(f"setns(back): {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(own)
        os.close(target)


def raw_socket(ifname: str, netns: str | None = None, rcvbuf: int = 4 << 20) -> socket.socket:
    """An AF_PACKET socket bound to `ifname` (opened inside `netns` when given)."""
    ctx = in_netns(netns) if netns else contextlib.nullcontext()
    with ctx:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, rcvbuf)
        sock.bind((ifname, 0))
    return sock


@dataclass
class VethNet:
    """N veth pairs: switch ends `<prefix>s<i>` in the root namespace, host ends `eth<i>`
    in namespace `<prefix>`. Ports are numbered from 1 as in the P4 tutorials."""

    prefix: str
    ports: int
    switch_ifaces: dict[int, str] = field(default_factory=dict)
    host_ifaces: dict[int, str] = field(default_factory=dict)

    def create(self) -> VethNet:
        if os.geteuid() != 0:
            raise NetnsError("creating namespaces and veth pairs needs root")
        self.destroy()
        try:
            self._build()
        except BaseException:
            self.destroy()  # leave no namespace or half-made veth behind
            raise
        return self

    def _build(self) -> None:
        run_ip("netns", "add", self.prefix)
        _sysctl("net.ipv6.conf.all.disable_ipv6", "1", self.prefix)
        _sysctl("net.ipv6.conf.default.disable_ipv6", "1", self.prefix)
        for port in range(1, self.ports + 1):
            sw, host = f"{self.prefix}s{port}", f"eth{port}"
            tmp = f"{self.prefix}h{port}"
            run_ip("link", "add", sw, "type", "veth", "peer", "name", tmp)
            # No IPv6 on the switch side: router solicitations would be noise in every test.
            _sysctl(f"net.ipv6.conf.{sw}.disable_ipv6", "1")
            run_ip("link", "set", tmp, "netns", self.prefix)
            run_ip("link", "set", tmp, "name", host, netns=self.prefix)
            run_ip("link", "set", sw, "mtu", "9000")
            run_ip("link", "set", host, "mtu", "9000", netns=self.prefix)
            run_ip("link", "set", sw, "up")
            run_ip("link", "set", host, "up", netns=self.prefix)
            _ethtool_offload_off(sw)
            _ethtool_offload_off(host, self.prefix)
            self.switch_ifaces[port] = sw
            self.host_ifaces[port] = host
        run_ip("link", "set", "lo", "up", netns=self.prefix)

    def destroy(self) -> None:
        for port in range(1, self.ports + 1):
            subprocess.run(
                ["ip", "link", "del", f"{self.prefix}s{port}"], capture_output=True, check=False
            )
        subprocess.run(["ip", "netns", "del", self.prefix], capture_output=True, check=False)

    def host_socket(self, port: int) -> socket.socket:
        return raw_socket(self.host_ifaces[port], self.prefix)

    def __enter__(self) -> VethNet:
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.destroy()
