"""Switch ports on Linux interfaces: one AF_PACKET raw socket per port, one packet thread.

The packet thread is the only caller of `pipeline.process` (PacketOuts from gRPC threads are
queued to it through `inject`), so the pipeline's register read-modify-writes need no lock.
Frames the kernel reports as outgoing (our own transmissions, seen again by the socket) are
ignored. Errors inside the loop are counted and logged, never fatal.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import logging
import os
import select
import socket
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_IGNORE_OUTGOING = 23  # Linux >= 4.20; pkttype is checked as well
SO_SNDBUFFORCE = 32
SO_RCVBUFFORCE = 33
PACKET_OUTGOING = socket.PACKET_OUTGOING
RX_BATCH = 64  # frames read from one port before the next port gets its turn
MAX_FRAME = 65536
MAX_LOGGED_ERRORS = 20


class PortError(RuntimeError):
    """A port could not be opened (missing interface, no permission)."""


def open_port(ifname: str, bufsize: int = 4 << 20) -> socket.socket:
    """A non-blocking raw socket bound to `ifname`; raises PortError with the reason."""
    try:
        socket.if_nametoindex(ifname)
    except OSError:
        raise PortError(f"interface {ifname!r} does not exist") from None
    try:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    except PermissionError:
        raise PortError(f"opening a raw socket on {ifname!r} needs root (CAP_NET_RAW)") from None
    try:
        sizes = ((SO_RCVBUFFORCE, socket.SO_RCVBUF), (SO_SNDBUFFORCE, socket.SO_SNDBUF))
        for force, plain in sizes:
            try:  # FORCE (root) goes beyond net.core.[rw]mem_max
                sock.setsockopt(socket.SOL_SOCKET, force, bufsize)
            except OSError:
                sock.setsockopt(socket.SOL_SOCKET, plain, bufsize)
        with contextlib.suppress(OSError):
            sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        sock.bind((ifname, 0))
        sock.setblocking(False)
    except OSError as e:
        sock.close()
        raise PortError(f"cannot bind a raw socket to {ifname!r}: {e.strerror}") from None
    return sock


class Runtime:
    """Runs `pipeline` over raw-socket ports. `ports` maps P4 port numbers to interfaces."""

    def __init__(
        self,
        pipeline: Any,
        ports: dict[int, str],
        *,
        cpu_port: int = 255,
        packet_in: Callable[[bytes], None] | None = None,
        bufsize: int = 4 << 20,
    ) -> None:
        self.pipeline = pipeline
        self.ports = dict(ports)
        self.cpu_port = cpu_port
        self.packet_in = packet_in
        self.bufsize = bufsize
        self.socks: dict[int, socket.socket] = {}
        self.stats = collections.Counter()
        self._injected: collections.deque[tuple[int, bytes]] = collections.deque()
        self._wake_r = self._wake_w = -1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def open(self) -> None:
        """Open every port's socket (all or none); raises PortError."""
        try:
            for port, ifname in sorted(self.ports.items()):
                self.socks[port] = open_port(ifname, self.bufsize)
        except PortError:
            self.close()
            raise
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def close(self) -> None:
        for sock in self.socks.values():
            sock.close()
        self.socks.clear()
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                os.close(fd)
        self._wake_r = self._wake_w = -1

    def inject(self, ingress_port: int, frame: bytes) -> None:
        """Queue a frame for the pipeline as if it came in on `ingress_port` (thread safe)."""
        self._injected.append((ingress_port, frame))
        with contextlib.suppress(BlockingIOError):  # a full pipe: the loop is awake anyway
            os.write(self._wake_w, b"\0")

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="packet-loop", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the loop thread and close the sockets."""
        self._stop.set()
        if self._thread is not None:
            if self._wake_w >= 0:
                self.inject(-1, b"")  # wakes poll(); port -1 is never processed
            self._thread.join(5)
            self._thread = None
        self.close()

    def _error(self, what: str) -> None:
        self.stats["loop_errors"] += 1
        if self.stats["loop_errors"] <= MAX_LOGGED_ERRORS:
            log.exception("packet loop: %s", what)

    def _emit(self, outputs: list[tuple[int, bytes]]) -> None:
        for eport, out in outputs:
            sock = self.socks.get(eport)
            if sock is not None:
                try:
                    sock.send(out)
                    self.stats["tx"] += 1
                except BlockingIOError:
                    self.stats["tx_dropped"] += 1  # the interface queue is full
                except OSError as e:
                    self.stats["tx_errors"] += 1
                    if e.errno not in (errno.ENETDOWN, errno.ENXIO):
                        self._error(f"send on port {eport}")
            elif eport == self.cpu_port and self.packet_in is not None:
                self.packet_in(out)
            else:
                self.stats["no_such_port"] += 1

    def _drain_injected(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass
        process = self.pipeline.process
        while self._injected:
            port, frame = self._injected.popleft()
            if port < 0:
                continue
            try:
                self._emit(process(port, frame))
            except Exception:
                self._error(f"injected frame on port {port}")

    def run(self) -> None:
        """The packet loop; returns after stop()."""
        poller = select.poll()
        by_fd = {}
        for port, sock in self.socks.items():
            poller.register(sock.fileno(), select.POLLIN)
            by_fd[sock.fileno()] = (port, sock)
        poller.register(self._wake_r, select.POLLIN)
        buf = bytearray(MAX_FRAME)
        view = memoryview(buf)
        process = self.pipeline.process
        emit = self._emit
        stats = self.stats
        wake = self._wake_r
        while not self._stop.is_set():
            for fd, _ in poller.poll(500):
                if fd == wake:
                    self._drain_injected()
                    continue
                port, sock = by_fd[fd]
                recv = sock.recvfrom_into
                rx = 0
                for _ in range(RX_BATCH):
                    try:
                        n, addr = recv(buf)
                    except BlockingIOError:
                        break
                    except OSError:
                        self._error(f"receive on port {port}")
                        break
                    if addr[2] == PACKET_OUTGOING:
                        continue
                    rx += 1
                    try:
                        emit(process(port, bytes(view[:n])))
                    except Exception:
                        self._error(f"frame from port {port}")
                stats["rx"] += rx


class InlineDataplane:
    """Runs injected frames through the pipeline at once, without sockets (tests, tools).

    `send(port, frame)` receives frames for real ports, `packet_in(frame)` those for the CPU.
    """

    def __init__(
        self,
        pipeline: Any,
        send: Callable[[int, bytes], None],
        packet_in: Callable[[bytes], None],
        cpu_port: int = 255,
    ) -> None:
        self.pipeline = pipeline
        self.send = send
        self.packet_in = packet_in
        self.cpu_port = cpu_port
        self._lock = threading.Lock()

    def inject(self, ingress_port: int, frame: bytes) -> None:
        with self._lock:
            outputs = self.pipeline.process(ingress_port, frame)
        for port, out in outputs:
            if port == self.cpu_port:
                self.packet_in(out)
            else:
                self.send(port, out)
