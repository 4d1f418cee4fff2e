"""Pieces shared by the worker and the parameter server: errors, addresses, sockets, deadlines."""

from __future__ import annotations

import errno
import ipaddress
import resource
import signal
import socket
import threading
import time
from typing import Callable

SOCKET_BUFFER = 4 << 20  # large buffers: a burst of 64 pushes per worker must not drop locally
RECV_SIZE = 2048
INITIAL_RTO = 0.05  # before any round trip was measured (the first one includes warm-up)


class AgentError(Exception):
    """A configuration or start-up problem the user can fix (bad address, port in use...)."""


class DeadlineExceeded(AgentError):
    """The run did not finish before its overall deadline."""


Address = tuple[str, int]


def parse_address(text: str, default_port: int | None = None) -> Address:
    """'ip[:port]' -> (ip, port); the IP must be a literal IPv4 address."""
    host, sep, port_text = text.strip().rpartition(":")
    if not sep:
        host, port_text = text.strip(), ""
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        raise AgentError(f"{text!r}: {host!r} is not an IPv4 address") from None
    if not port_text:
        if default_port is None:
            raise AgentError(f"{text!r}: a port is required (ip:port)")
        return host, default_port
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise AgentError(f"{text!r}: port must be 0..65535")
    return host, int(port_text)


def open_udp(bind: Address) -> socket.socket:
    """A UDP socket bound to `bind`, with errors that say what to do."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER)
        sock.bind(bind)
    except OSError as exc:
        sock.close()
        where = f"{bind[0]}:{bind[1]}"
        if exc.errno == errno.EADDRINUSE:
            raise AgentError(
                f"cannot bind {where}: address already in use (another agent running? "
                "pick another port or stop it)"
            ) from None
        if exc.errno == errno.EADDRNOTAVAIL:
            raise AgentError(
                f"cannot bind {where}: no interface on this host has that address "
                "(check the host's IP, e.g. `ip -4 addr`)"
            ) from None
        raise AgentError(f"cannot bind {where}: {exc.strerror}") from None
    return sock


class Deadline:
    """An optional overall time limit; `check()` raises DeadlineExceeded once it has passed."""

    def __init__(self, seconds: float | None, what: str) -> None:
        self.at = None if seconds is None else time.monotonic() + seconds
        self.seconds = seconds
        self.what = what

    def remaining(self, cap: float) -> float:
        if self.at is None:
            return cap
        return max(0.0, min(cap, self.at - time.monotonic()))

    def check(self) -> None:
        if self.at is not None and time.monotonic() >= self.at:
            raise DeadlineExceeded(f"{self.what} did not finish within {self.seconds:g} s")


def install_stop_signals(stop: Callable[[], None]) -> None:
    """SIGINT/SIGTERM call `stop` (main thread only; the agent then shuts down cleanly)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda _signum, _frame: stop())


def positive_int(text: str) -> int:
    """argparse type: an integer > 0."""
    value = int(text)
    if value <= 0:
        raise ValueError(f"{text} is not > 0")
    return value


class RttEstimator:
    """Retransmission timeout from measured round trips (RFC 6298: srtt + 4 * rttvar),
    at least `floor`, doubled per retry, at most `cap`; `initial` until the first sample.
    Sample only first transmissions."""

    __slots__ = ("cap", "floor", "initial", "rttvar", "srtt")

    def __init__(self, floor: float, cap: float, initial: float | None = None) -> None:
        self.floor, self.cap = floor, cap
        self.initial = max(floor, min(cap, INITIAL_RTO if initial is None else initial))
        self.srtt: float | None = None
        self.rttvar = 0.0

    def sample(self, rtt: float) -> None:
        if self.srtt is None:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt

    def timeout(self, tries: int = 0) -> float:
        base = self.initial if self.srtt is None else max(self.floor, self.srtt + 4 * self.rttvar)
        return min(self.cap, base * (1 << tries))


def cpu_usage() -> tuple[float, float, int, int]:
    """This process's (user s, system s, voluntary, involuntary context switches) so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime, r.ru_nvcsw, r.ru_nivcsw


def cpu_report(before: tuple, after: tuple) -> dict[str, float]:
    """What a summary says about the CPU used between two cpu_usage() snapshots. Voluntary
    switches are mostly sleeps on the socket, so they count wake-ups."""
    d = [b - a for a, b in zip(before, after)]
    return {
        "user_s": round(d[0], 4),
        "sys_s": round(d[1], 4),
        "wakeups": int(d[2]),
        "preempted": int(d[3]),
    }


class Interrupted(AgentError):
    """The agent was asked to stop (SIGINT/SIGTERM or stop()) before it finished."""
