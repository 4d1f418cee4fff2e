"""Pieces shared by the worker and the parameter server: errors, addresses, sockets, deadlines."""

from __future__ import annotations

import errno
import ipaddress
import signal
import socket
import threading
import time
from typing import Callable

SOCKET_BUFFER = 4 << 20  # large buffers: a burst of 64 pushes per worker must not drop locally
RECV_SIZE = 2048


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


class Interrupted(AgentError):
    """The agent was asked to stop (SIGINT/SIGTERM or stop()) before it finished."""
