"""Fast codec for the hotagg header and entries (docs/design.md section 1), plus raw frames.

The agents send hotagg payloads over ordinary UDP sockets, so `encode`/`decode` handle only the
20-byte header and the 12-byte entries; the kernel builds Ethernet/IPv4/UDP. `encode_frame` and
`decode_frame` build and parse complete Ethernet/IPv4/UDP frames for raw-socket tools, tests
and benchmarks. tests/test_codec.py checks every function here byte for byte against the Scapy
layers in contract/layers.py, which stay the reference. No Scapy here: the agents and the
switch's tools import this module on their hot paths.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Sequence
from itertools import chain
from typing import NamedTuple

import numpy as np

from contract.constants import (
    ENTRY_LEN,
    ETHERTYPE_IPV4,
    HEADER_LEN,
    HOTAGG_PORT,
    INT32_MAX,
    INT32_MIN,
    IP_PROTO_UDP,
    MAX_ENTRIES,
    UDP_HEADER_LEN,
    VERSION,
)

# version, op, flags, count, job_id, worker_id, seq, iteration, mask, cached, aux (FLUSH's
# batch, COLLECT_REPLY's flush count; 0 in every other op, whose receivers ignore it).
HEADER = struct.Struct("!BBBBHHIIBBH")
# One precompiled struct per entry count: unpacking 0..8 entries in one call is the fast path.
_ENTRIES = tuple(struct.Struct("!" + "Qi" * n) for n in range(MAX_ENTRIES + 1))
# numpy view of the entries for bulk work (big endian, packed, 12 bytes each).
ENTRY_DTYPE = np.dtype([("key", ">u8"), ("value", ">i4")])

_ETH = struct.Struct("!6s6sH")
_IPV4 = struct.Struct("!BBHHHBBH4s4s")
_UDP = struct.Struct("!HHHH")
ETH_LEN, IPV4_LEN, UDP_LEN = 14, 20, UDP_HEADER_LEN


class CodecError(ValueError):
    """The bytes are not a well-formed hotagg packet (or the fields do not fit the wire)."""


class Message(NamedTuple):
    """A decoded hotagg packet; keys and values are tuples of Python ints, in entry order."""

    op: int
    flags: int
    job_id: int
    worker_id: int
    seq: int
    iteration: int
    mask: int
    keys: tuple[int, ...] = ()
    values: tuple[int, ...] = ()
    version: int = VERSION
    cached: int = 0  # COLLECT_REPLY: entries whose slot cache now holds the next iteration
    aux: int = 0  # FLUSH (and its partial PUSH): the batch; COLLECT_REPLY: the flush count

    # The header's field name; it hides tuple.count(value), which nothing here needs.
    @property
    def count(self) -> int:  # type: ignore[override]
        return len(self.keys)


def encode(
    op: int,
    job_id: int,
    worker_id: int,
    seq: int,
    iteration: int,
    keys: Sequence[int] | np.ndarray = (),
    values: Sequence[int] | np.ndarray | None = None,
    *,
    flags: int = 0,
    mask: int = 0,
    cached: int = 0,
    aux: int = 0,
    version: int = VERSION,
) -> bytes:
    """Header fields plus entries -> payload bytes. `values=None` means all zero (PULL, COLLECT)."""
    count = len(keys)
    if count > MAX_ENTRIES:
        raise CodecError(f"{count} entries do not fit one packet (at most {MAX_ENTRIES})")
    if values is None:
        values = (0,) * count
    elif len(values) != count:
        raise CodecError(f"{count} keys but {len(values)} values")
    if isinstance(keys, np.ndarray):
        keys = keys.tolist()
    if isinstance(values, np.ndarray):
        values = values.tolist()
    try:
        head = HEADER.pack(
            version, op, flags, count, job_id, worker_id, seq, iteration, mask, cached, aux
        )
        return head + _ENTRIES[count].pack(*chain.from_iterable(zip(keys, values)))
    except struct.error as exc:
        raise CodecError(f"field out of range: {exc}") from None


def encode_message(msg: Message) -> bytes:
    return encode(
        msg.op,
        msg.job_id,
        msg.worker_id,
        msg.seq,
        msg.iteration,
        msg.keys,
        msg.values,
        flags=msg.flags,
        mask=msg.mask,
        cached=msg.cached,
        aux=msg.aux,
        version=msg.version,
    )


def decode(data: bytes | bytearray | memoryview) -> Message:
    """Payload bytes -> Message. Checks in the switch's order: truncated, count, version, length."""
    size = len(data)
    if size < HEADER_LEN:
        raise CodecError(f"short packet: {size} bytes, the header alone is {HEADER_LEN}")
    version, op, flags, count, job, worker, seq, iteration, mask, cached, aux = HEADER.unpack_from(
        data
    )
    if count > MAX_ENTRIES:
        raise CodecError(f"count {count} > {MAX_ENTRIES}")
    expected = HEADER_LEN + ENTRY_LEN * count
    if size < expected:
        raise CodecError(f"truncated: count {count} needs {expected} bytes, got {size}")
    if version != VERSION:
        raise CodecError(f"version {version}, expected {VERSION}")
    if size != expected:
        raise CodecError(f"length {size} != {expected} for count {count}")
    flat = _ENTRIES[count].unpack_from(data, HEADER_LEN)
    return Message(
        op, flags, job, worker, seq, iteration, mask, flat[0::2], flat[1::2], version, cached, aux
    )


def pack_entries(keys: np.ndarray | Sequence[int], values: np.ndarray | Sequence[int]) -> bytes:
    """Any number of entries -> their wire bytes in one numpy pass (slice by ENTRY_LEN)."""
    arr = np.empty(len(keys), dtype=ENTRY_DTYPE)
    try:
        arr["key"] = np.asarray(keys, dtype=np.uint64)
        vals = np.asarray(values, dtype=np.int64)
    except (OverflowError, ValueError) as exc:
        raise CodecError(f"entry out of range: {exc}") from None
    if vals.shape != arr.shape:
        raise CodecError(f"{len(arr)} keys but {vals.size} values")
    if vals.size and (vals.min() < INT32_MIN or vals.max() > INT32_MAX):
        raise CodecError("value outside int32")
    arr["value"] = vals
    return arr.tobytes()


def unpack_entries(data: bytes | memoryview, count: int, offset: int = HEADER_LEN) -> np.ndarray:
    """Entries as a structured array (fields `key`, `value`), without copying."""
    return np.frombuffer(data, dtype=ENTRY_DTYPE, count=count, offset=offset)


# --- Ethernet / IPv4 / UDP framing (for raw sockets; the agents let the kernel do this) ---


class Frame(NamedTuple):
    dst_mac: str
    src_mac: str
    src_ip: str
    dst_ip: str
    ttl: int
    sport: int
    dport: int
    payload: bytes


def _mac(mac: str | bytes) -> bytes:
    if isinstance(mac, bytes):
        if len(mac) != 6:
            raise CodecError(f"MAC must be 6 bytes, got {len(mac)}")
        return mac
    try:
        raw = bytes.fromhex(mac.replace(":", "").replace("-", ""))
    except ValueError:
        raw = b""
    if len(raw) != 6:
        raise CodecError(f"bad MAC address {mac!r}")
    return raw


def _ip(addr: str | bytes) -> bytes:
    if isinstance(addr, bytes) and len(addr) == 4:
        return addr
    try:
        return ipaddress.IPv4Address(addr).packed
    except ValueError as exc:
        raise CodecError(f"bad IPv4 address {addr!r}: {exc}") from None


def ipv4_checksum(header: bytes) -> int:
    """RFC 1071 one's-complement sum of a header whose checksum field is zero."""
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def encode_frame(
    payload: bytes,
    *,
    src_mac: str | bytes,
    dst_mac: str | bytes,
    src_ip: str | bytes,
    dst_ip: str | bytes,
    sport: int,
    dport: int = HOTAGG_PORT,
    ttl: int = 64,
    ip_id: int = 0,
    tos: int = 0,
) -> bytes:
    """Ethernet/IPv4 (IHL 5, no options, DF clear)/UDP (checksum 0) around `payload`."""
    total = IPV4_LEN + UDP_LEN + len(payload)
    try:
        ip = _IPV4.pack(0x45, tos, total, ip_id, 0, ttl, IP_PROTO_UDP, 0, _ip(src_ip), _ip(dst_ip))
        udp = _UDP.pack(sport, dport, UDP_LEN + len(payload), 0)
    except struct.error as exc:
        raise CodecError(f"frame field out of range: {exc}") from None
    ip = ip[:10] + struct.pack("!H", ipv4_checksum(ip)) + ip[12:]
    return _ETH.pack(_mac(dst_mac), _mac(src_mac), ETHERTYPE_IPV4) + ip + udp + payload


def decode_frame(frame: bytes) -> Frame:
    """Parse Ethernet/IPv4/UDP; trailing Ethernet padding beyond the IPv4 length is ignored."""
    if len(frame) < ETH_LEN + IPV4_LEN + UDP_LEN:
        raise CodecError(f"frame of {len(frame)} bytes is too short for Ethernet/IPv4/UDP")
    dst, src, ethertype = _ETH.unpack_from(frame)
    if ethertype != ETHERTYPE_IPV4:
        raise CodecError(f"ethertype 0x{ethertype:04x} is not IPv4")
    vihl, _tos, total, _id, _frag, ttl, proto, _csum, sip, dip = _IPV4.unpack_from(frame, ETH_LEN)
    if vihl != 0x45:
        raise CodecError(f"IPv4 version/IHL byte 0x{vihl:02x}, expected 0x45")
    if proto != IP_PROTO_UDP:
        raise CodecError(f"IP protocol {proto} is not UDP")
    if total < IPV4_LEN + UDP_LEN or ETH_LEN + total > len(frame):
        raise CodecError(f"IPv4 total length {total} does not fit a {len(frame)}-byte frame")
    sport, dport, ulen, _ucsum = _UDP.unpack_from(frame, ETH_LEN + IPV4_LEN)
    if ulen != total - IPV4_LEN:
        raise CodecError(f"UDP length {ulen} != IPv4 payload length {total - IPV4_LEN}")
    start = ETH_LEN + IPV4_LEN + UDP_LEN
    return Frame(
        dst.hex(":"),
        src.hex(":"),
        str(ipaddress.IPv4Address(sip)),
        str(ipaddress.IPv4Address(dip)),
        ttl,
        sport,
        dport,
        bytes(frame[start : ETH_LEN + total]),
    )


def saturate_int32(values: np.ndarray) -> np.ndarray:
    """int64 parameters -> int32 wire values, clamped (what a PULL_REPLY carries)."""
    return np.clip(values, INT32_MIN, INT32_MAX).astype(np.int32)
