"""Whole hotagg frames for the tests, the benchmarks and raw-socket tools, on contract/codec.py.

The test network: host i sits on switch port i, with IP 10.0.0.i and MAC 02:00:00:00:00:0i,
and sends to the switch's MAC 02:00:00:00:00:fe (tests/packet_harness.py, the in-process
pipeline tests, bench/). `hotagg_frame` builds every request and reply the tests send,
including malformed ones: any op, version and aux, and more entries than a packet
may carry. tests/test_frames.py checks it byte for byte against the Scapy layers.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from contract.codec import HEADER, encode_frame, ipv4_checksum, pack_entries
from contract.constants import HOTAGG_PORT, IP_PROTO_UDP, VERSION, Op

SWITCH_MAC = "02:00:00:00:00:fe"
PS_HOST = 3  # the parameter server's host in the packet tests
# A worker's source port is this plus its host number (the agents' ports are the kernel's).
CLIENT_SPORT = 40000
_ETH_IP_LEN = 14 + 20  # UDP header offset in a frame without IPv4 options
_UDP_CHECKSUM = slice(_ETH_IP_LEN + 6, _ETH_IP_LEN + 8)


def host_ip(host: int) -> str:
    return f"10.0.0.{host}"


def host_mac(host: int) -> str:
    return f"02:00:00:00:00:{host:02x}"


def hotagg_payload(
    op: int,
    entries: Iterable[tuple[int, int]] = (),
    *,
    job_id: int = 0,
    worker_id: int = 0,
    seq: int = 0,
    iteration: int = 0,
    flags: int = 0,
    mask: int = 0,
    cached: int = 0,
    version: int = VERSION,
    aux: int = 0,
) -> bytes:
    """The hotagg header and its (key, value) entries. Unlike codec.encode, it takes any
    number of entries (a count past MAX_ENTRIES is malformed input the switch must refuse)."""
    pairs = list(entries)
    head = HEADER.pack(
        version, op, flags, len(pairs), job_id, worker_id, seq, iteration, mask, cached, aux
    )
    return head + pack_entries([k for k, _ in pairs], [v for _, v in pairs])


def udp_frame(
    src: int,
    dst: int,
    payload: bytes,
    *,
    sport: int,
    dport: int,
    ttl: int = 64,
    ip_id: int = 0,
    udp_checksum: bool = False,
) -> bytes:
    """`payload` in Ethernet/IPv4/UDP from host `src` to host `dst` through the switch. The UDP
    checksum is 0 (none) unless `udp_checksum`, as a kernel's sockets would send it."""
    data = encode_frame(
        payload,
        src_mac=host_mac(src),
        dst_mac=SWITCH_MAC,
        src_ip=host_ip(src),
        dst_ip=host_ip(dst),
        sport=sport,
        dport=dport,
        ttl=ttl,
        ip_id=ip_id,
    )
    if not udp_checksum:
        return data
    checksum = _udp_checksum(data[26:34], data[_ETH_IP_LEN:])
    return data[: _UDP_CHECKSUM.start] + struct.pack("!H", checksum) + data[_UDP_CHECKSUM.stop :]


def hotagg_frame(
    src: int,
    dst: int,
    op: int = Op.PUSH,
    entries: Iterable[tuple[int, int]] = (),
    *,
    sport: int | None = None,
    dport: int = HOTAGG_PORT,
    ttl: int = 64,
    ip_id: int = 0,
    udp_checksum: bool = False,
    **header: int,
) -> bytes:
    """A hotagg frame from host `src` (source port CLIENT_SPORT + src unless given) to host
    `dst`; `header`: hotagg_payload's fields (job_id, seq, ...), 0 unless given."""
    return udp_frame(
        src,
        dst,
        hotagg_payload(op, entries, **header),
        sport=CLIENT_SPORT + src if sport is None else sport,
        dport=dport,
        ttl=ttl,
        ip_id=ip_id,
        udp_checksum=udp_checksum,
    )


def push_frame(
    job_id: int, keys: Iterable[int], seq: int = 1, *, worker_id: int = 0, src: int = 1
) -> bytes:
    """A PUSH of value 1 for each key, iteration 1, from host `src` (worker `worker_id` of
    `job_id`) to the PS (PS_HOST): what a tenancy admission of (job_id, worker_id, port
    `src`, host_ip(src)) lets through."""
    return hotagg_frame(
        src,
        PS_HOST,
        Op.PUSH,
        [(k, 1) for k in keys],
        job_id=job_id,
        worker_id=worker_id,
        seq=seq,
        iteration=1,
    )


def _udp_checksum(addresses: bytes, segment: bytes) -> int:
    """RFC 768: over the pseudo-header (addresses, protocol, length) and the segment, whose
    checksum field is zero; a sum of 0 is sent as 0xFFFF."""
    pseudo = addresses + struct.pack("!BBH", 0, IP_PROTO_UDP, len(segment))
    data = pseudo + segment + b"\0" * (len(segment) % 2)
    return ipv4_checksum(data) or 0xFFFF
