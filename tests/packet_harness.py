"""Shared harness for the packet tests: a switch (either target) on veth pairs, four hosts.

Port i (1..4) leads to host h<i> with IP 10.0.0.<i> and MAC 02:00:00:00:00:0<i>. h1 and h2
are workers, h3 is the parameter server, h4 a worker of another job. Entries are installed
through the project's controller over P4Runtime, the same way for both targets.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from scapy.layers.l2 import Ether

from contract.frames import SWITCH_MAC, host_ip, host_mac, hotagg_frame, udp_frame
from contract.layers import Hotagg
from topologies.netns import VethNet

# The packet tests' names for contract/frames.py's builders, which they import from here.
__all__ = ["N_PORTS", "SWITCH_MAC", "Ports", "frame", "host_ip", "host_mac", "plain_udp"]

N_PORTS = 4
MARKER_SPORT = 7
# frame(src, dst, op, entries, seq=..., job_id=...): a hotagg frame from host src to host dst.
frame = hotagg_frame


def plain_udp(src: int, dst: int, payload: bytes = b"marker", sport: int = MARKER_SPORT) -> bytes:
    """A UDP frame that is not hotagg (destination port 9), such as the harness's markers."""
    return udp_frame(src, dst, payload, sport=sport, dport=9)


@dataclass
class Received:
    port: int
    data: bytes

    @property
    def pkt(self) -> Ether:
        return Ether(self.data)

    @property
    def agg(self) -> Hotagg:
        return self.pkt[Hotagg]


class Ports:
    """Raw sockets on the host ends of the veth pairs."""

    def __init__(self, net: VethNet) -> None:
        self.socks = {p: net.host_socket(p) for p in range(1, N_PORTS + 1)}
        for s in self.socks.values():
            s.setblocking(False)
        self._marker_seq = 0

    def close(self) -> None:
        for s in self.socks.values():
            s.close()

    def send(self, port: int, data: bytes) -> None:
        self.socks[port].send(data)

    def drain(self) -> None:
        for s in self.socks.values():
            with contextlib.suppress(BlockingIOError):
                while True:
                    s.recv(65535)

    def _recv_ipv4(self, timeout: float) -> Received | None:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select(list(self.socks.values()), [], [], left)
            for port, s in self.socks.items():
                if s not in ready:
                    continue
                data, addr = s.recvfrom(65535)
                if addr[2] == socket.PACKET_OUTGOING or data[12:14] != b"\x08\x00":
                    continue  # our own transmissions and non-IPv4 noise
                return Received(port, data)
        return None

    def collect(self, until: Callable[[Received], bool], timeout: float = 3.0) -> list[Received]:
        """Frames received until one satisfies `until` (included), or the timeout."""
        got: list[Received] = []
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            r = self._recv_ipv4(left)
            if r is None:
                break
            got.append(r)
            if until(r):
                return got
        raise AssertionError(f"timed out; received {[(g.port, g.pkt.summary()) for g in got]}")

    def exchange(self, port: int, data: bytes, timeout: float = 3.0) -> list[Received]:
        """Send `data` on `port`; return every frame that it caused, on any port."""
        self.send(port, data)
        return self.settle(port, timeout)

    def settle(self, ingress: int, timeout: float = 3.0) -> list[Received]:
        """Send one marker from `ingress` to every host and wait for all of them: a switch
        keeps order from one ingress port to one egress port, so whatever earlier frames from
        `ingress` caused has arrived by then. This replaces sleeping."""
        self._marker_seq += 1
        tag = b"marker%d" % self._marker_seq
        for dst in self.socks:
            self.send(ingress, plain_udp(ingress, dst, tag + b".%d" % dst))
        pending = {tag + b".%d" % dst for dst in self.socks}

        def is_last_marker(r: Received) -> bool:
            for p in list(pending):
                if r.data.endswith(p):
                    pending.discard(p)
            return not pending

        got = self.collect(is_last_marker, timeout)
        return [r for r in got if tag not in r.data[-16:]]


def unique_prefix() -> str:
    return f"hapt{os.getpid() % 100000}"
