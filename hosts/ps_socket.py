"""The PS's UDP socket: datagrams drained in batches with their kernel receive times, and
replies sent without raising (a lost reply is the peer's to retransmit)."""

from __future__ import annotations

import socket
import struct
import time
from collections import Counter

from hosts.agent import RECV_SIZE, Address, open_udp

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux; SCM_TIMESTAMPNS has the same value
_TIMESPEC = struct.Struct("@qq")
_CMSG_SPACE = socket.CMSG_SPACE(_TIMESPEC.size)
_BATCH = 64  # datagrams drained per wake-up; arrival vs start then shows queueing in the PS


class PSSocket:
    """The socket a PS shard serves on; `counters` counts its send and receive errors."""

    def __init__(self, bind: Address, counters: Counter[str]) -> None:
        self.counters = counters
        self.sock = open_udp(bind)
        try:  # kernel receive times, so that queueing in the socket buffer counts as PS queueing
            self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            self._cmsg_space = _CMSG_SPACE
        except OSError:
            self._cmsg_space = 0
        self.address: Address = self.sock.getsockname()

    def close(self) -> None:
        self.sock.close()

    def recv_batch(self, timeout: float) -> list[tuple[bytes, Address, float]]:
        """Up to a batch of datagrams with their arrival times, waiting `timeout` s for the
        first."""
        out: list[tuple[bytes, Address, float]] = []
        self.sock.settimeout(timeout)
        while len(out) < _BATCH:
            try:
                data, ancdata, _flags, addr = self.sock.recvmsg(RECV_SIZE, self._cmsg_space)
            except (TimeoutError, BlockingIOError, InterruptedError):
                break
            except OSError:  # an ICMP error surfaced on the socket: nothing to read
                self.counters["recv_errors"] += 1
                break
            arrival = time.time()
            for level, kind, cdata in ancdata:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(cdata) >= 16:
                    sec, nsec = _TIMESPEC.unpack_from(cdata)
                    arrival = sec + nsec * 1e-9
            out.append((data, addr, arrival))
            self.sock.settimeout(0.0)  # drain what is already queued without waiting
        return out

    def send(self, data: bytes, addr: Address) -> None:
        try:
            self.sock.sendto(data, addr)
        except OSError:  # a lost reply: the peer retransmits
            self.counters["send_errors"] += 1
