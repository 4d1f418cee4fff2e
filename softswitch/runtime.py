"""Switch ports on Linux interfaces: AF_PACKET raw sockets, one packet thread.

The packet thread is the only caller of `pipeline.process` (PacketOuts from gRPC threads are
queued to it through `inject`), so the pipeline's register read-modify-writes need no lock.
Frames the kernel reports as outgoing (our own transmissions, seen again by the socket) are
ignored. Errors inside the loop are counted and logged, never fatal.

VLAN tags: Linux takes the 802.1Q/802.1ad tag out of a received frame before a packet socket
sees it and reports it only in PACKET_AUXDATA. BMv2 reads its ports through libpcap, which
puts the tag back in (pcap-linux.c: a tag is there if tp_vlan_tci != 0 or tp_status has
TP_STATUS_VLAN_VALID; its TPID is tp_vlan_tpid if that is non-zero or
TP_STATUS_VLAN_TPID_VALID is set, else 0x8100), so its parser sees the tag's etherType. To
give the pipeline the same bytes without a recvmsg per frame, each port has two sockets:
the main one, whose kernel filter passes only frames without a tag (read with
recvfrom_into, as before), and a tagged one, whose filter passes only tagged frames and
which has PACKET_AUXDATA on; its frames get the tag put back by `insert_vlan_tag`. Order
between a port's tagged and untagged frames is not kept (both are still in order each).
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import errno
import logging
import os
import select
import socket
import struct
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
ETH_HLEN = 14  # a packet socket refuses (EINVAL) a frame shorter than the Ethernet header

SO_ATTACH_FILTER = 26
PACKET_AUXDATA = 8
TP_STATUS_VLAN_VALID = 0x10
TP_STATUS_VLAN_TPID_VALID = 0x40
ETH_P_8021Q = 0x8100
# struct tpacket_auxdata: tp_status, tp_len, tp_snaplen, tp_mac, tp_net, tp_vlan_tci, tp_vlan_tpid
AUXDATA = struct.Struct("=IIIHHHH")
AUX_SPACE = socket.CMSG_SPACE(AUXDATA.size)
VLAN_TAG = struct.Struct("!HH")  # TPID, TCI
TAGGED_BUFSIZE = 256 << 10


def _vlan_filter(tagged: bool) -> bytes:
    """A classic BPF program passing only frames with (`tagged`) or without a VLAN tag:
    ld vlan_tag_present; jeq #0; ret #262144 / ret #0 (the skb's tag, i.e. what auxdata's
    TP_STATUS_VLAN_VALID reports)."""
    ld_vlan_present = (0x20, 0, 0, 0xFFFFF000 + 48)  # BPF_LD|BPF_W|BPF_ABS, SKF_AD_VLAN_TAG_PRESENT
    jeq_0 = (0x15, 1, 0) if tagged else (0x15, 0, 1)  # BPF_JMP|BPF_JEQ|BPF_K, jt, jf
    insns = (ld_vlan_present, (*jeq_0, 0), (0x06, 0, 0, 0x40000), (0x06, 0, 0, 0))
    return b"".join(struct.pack("=HBBI", *i) for i in insns)


def _attach_filter(sock: socket.socket, program: bytes) -> None:
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = struct.pack("@HP", len(program) // 8, ctypes.addressof(buf))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)


def insert_vlan_tag(frame: bytes | memoryview, ancdata: list) -> bytes:
    """`frame` with the VLAN tag that PACKET_AUXDATA in `ancdata` reports put back after the
    MAC addresses, as libpcap does (the module docstring); unchanged if there is none."""
    for level, kind, data in ancdata:
        if level == SOL_PACKET and kind == PACKET_AUXDATA and len(data) >= AUXDATA.size:
            status, _, _, _, _, tci, tpid = AUXDATA.unpack_from(data)
            if tci or status & TP_STATUS_VLAN_VALID:
                if not (tpid or status & TP_STATUS_VLAN_TPID_VALID):
                    tpid = ETH_P_8021Q
                return b"".join((frame[:12], VLAN_TAG.pack(tpid, tci), frame[12:]))
    return bytes(frame)


class PortError(RuntimeError):
    """A port could not be opened (missing interface, no permission)."""


def open_port(ifname: str, bufsize: int = 4 << 20, tagged: bool = False) -> socket.socket:
    """A non-blocking raw socket bound to `ifname` that receives the frames without a VLAN
    tag, or with `tagged` only those with one (and their PACKET_AUXDATA); raises PortError
    with the reason."""
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
        _attach_filter(sock, _vlan_filter(tagged))
        if tagged:
            sock.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
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
        self.tagged_socks: dict[int, socket.socket] = {}  # VLAN-tagged frames (module doc)
        self.stats: collections.Counter[str] = collections.Counter()
        self._injected: collections.deque[tuple[int, bytes]] = collections.deque()
        self._wake_r = self._wake_w = -1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def open(self) -> None:
        """Open every port's socket (all or none); raises PortError."""
        try:
            for port, ifname in sorted(self.ports.items()):
                self.socks[port] = open_port(ifname, self.bufsize)
                self.tagged_socks[port] = open_port(ifname, TAGGED_BUFSIZE, tagged=True)
        except PortError:
            self.close()
            raise
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def close(self) -> None:
        for sock in (*self.socks.values(), *self.tagged_socks.values()):
            sock.close()
        self.socks.clear()
        self.tagged_socks.clear()
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
                if len(out) < ETH_HLEN:
                    # e.g. a PacketOut with a payload of a few bytes: BMv2's port cannot
                    # send it either; a counted drop, not an error with a traceback
                    self.stats["tx_runt"] += 1
                    continue
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

    def _drain_tagged(self, port: int, sock: socket.socket, buf: bytearray) -> None:
        """Up to RX_BATCH VLAN-tagged frames of `port`, tag put back, through the pipeline."""
        view = memoryview(buf)
        rx = 0
        for _ in range(RX_BATCH):
            try:
                n, ancdata, _, addr = sock.recvmsg_into([buf], AUX_SPACE)
            except BlockingIOError:
                break
            except OSError:
                self._error(f"receive on port {port} (tagged)")
                break
            if addr[2] == PACKET_OUTGOING:
                continue
            rx += 1
            try:
                self._emit(self.pipeline.process(port, insert_vlan_tag(view[:n], ancdata)))
            except Exception:
                self._error(f"tagged frame from port {port}")
        self.stats["rx"] += rx
        self.stats["rx_vlan"] += rx

    def run(self) -> None:
        """The packet loop; returns after stop()."""
        poller = select.poll()
        by_fd = {}
        for port, sock in self.socks.items():
            poller.register(sock.fileno(), select.POLLIN)
            by_fd[sock.fileno()] = (port, sock)
        tagged = {}
        for port, sock in self.tagged_socks.items():
            poller.register(sock.fileno(), select.POLLIN)
            tagged[sock.fileno()] = (port, sock)
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
                if fd in tagged:
                    self._drain_tagged(*tagged[fd], buf)
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
