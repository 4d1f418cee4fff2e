"""Routing (p4src/include/forwarding.p4): `ipv4_lpm` and the CPU port.

Every frame that leaves gets its IPv4 checksum recomputed here, and every frame that leaves on
CPU_PORT carries a packet_in header with the port it came in on.
"""

from __future__ import annotations

from enum import Enum
from struct import Struct
from typing import TYPE_CHECKING, Final

from contract import names
from contract.constants import CPU_PORT, Stat
from softswitch.pipeline.parser import (
    DROP_PORT,
    ETH_DST,
    ETH_SRC,
    IP,
    IP_CSUM,
    IP_DST,
    IP_ID,
    IP_TTL,
    IP_WORDS,
    PACKET_IN,
    U16,
    U32,
    UDP,
    answer_headers,
    is_ipv4,
    set_ipv4_checksum,
    shrink_lengths,
)

if TYPE_CHECKING:
    from softswitch.pipeline import Pipeline

    # ipv4_lpm's decision for a destination (_decide) and a cached head (_head_template)
    Route = tuple[int, bytes | None] | None
    HeadKey = tuple[bytes, bytes, bytes]
    HeadTemplate = tuple[int, bytes, int] | None

IPV4_FORWARD = names.ACTION_IPV4_FORWARD
SEND_TO_CPU = names.ACTION_SEND_TO_CPU
NO_ROUTE = Stat.NO_ROUTE.value
TTL_EXPIRED = Stat.TTL_EXPIRED.value

Output = list[tuple[int, bytes]]


def emit(out: bytearray, port: int, ingress_port: int) -> Output:
    """The deparser: checksum, then the frame on `port` (drop port: nothing)."""
    set_ipv4_checksum(out)
    if port == CPU_PORT:
        return [(CPU_PORT, PACKET_IN[ingress_port & 0x1FF] + out)]
    if port == DROP_PORT:
        return []
    return [(port, bytes(out))]


ROUTE_CACHE_SIZE = 4096  # destinations remembered per version of ipv4_lpm


class _Miss(Enum):
    """Not cached yet (None is a cached decision: drop); an enum so a type checker narrows."""

    MISS = 0


_MISS: Final = _Miss.MISS


def _decide(p: Pipeline, dst: int) -> Route:
    """What ipv4_lpm does with `dst`: (port, new destination MAC) for ipv4_forward,
    (CPU_PORT, None) for send_to_cpu, None for drop."""
    t = p.t_lpm
    rec = t.lpm_lookup(dst) if t._lens else None
    if rec is None:
        rec = t._default_rec
    action = rec[0]
    if action == IPV4_FORWARD:
        dst_mac, port = rec[1]
        return port, dst_mac.to_bytes(6, "big")
    if action == SEND_TO_CPU:
        return CPU_PORT, None
    return None


def route(p: Pipeline, out: bytearray, ingress_port: int, hotagg: bool, nbytes: int) -> Output:
    """Step 7 of the ingress: look up the destination of `out` and rewrite it for its hop.

    Lookup results are cached per destination address for as long as ipv4_lpm does not
    change (Table._gen), so a packet costs one dict lookup instead of the longest-prefix
    search; the header rewrite and the checksum are done for every packet.
    """
    gen = p.t_lpm._gen
    cache = p.route_cache
    if p.route_gen != gen:  # ipv4_lpm changed since the cache was filled: start afresh
        cache = p.route_cache = {}
        p.route_gen = gen
    dst = U32.unpack_from(out, IP_DST)[0]
    hit = cache.get(dst, _MISS)
    if hit is _MISS:
        hit = _decide(p, dst)
        if len(cache) < ROUTE_CACHE_SIZE:
            cache[dst] = hit
    if hit is None:  # drop
        if hotagg:
            p.stats_packets[NO_ROUTE] += 1
            p.stats_bytes[NO_ROUTE] += nbytes
        return []
    port, dst_mac = hit
    if dst_mac is not None:  # ipv4_forward
        ttl = out[IP_TTL]
        if ttl <= 1:  # it would leave with TTL 0: dropped, hotagg or not (send_to_cpu: kept)
            p.stats_packets[TTL_EXPIRED] += 1
            p.stats_bytes[TTL_EXPIRED] += nbytes
            return []
        out[ETH_SRC : ETH_SRC + 6] = out[ETH_DST : ETH_DST + 6]
        out[ETH_DST : ETH_DST + 6] = dst_mac
        out[IP_TTL] = ttl - 1
    # the deparser's checksum (set_ipv4_checksum, inlined): the sum of all words but the
    # old checksum
    w = IP_WORDS.unpack_from(out, IP)
    c = sum(w) - w[5]
    c = (c & 0xFFFF) + (c >> 16)
    U16.pack_into(out, IP_CSUM, ~((c & 0xFFFF) + (c >> 16)) & 0xFFFF)
    if port == CPU_PORT:
        return [(CPU_PORT, PACKET_IN[ingress_port & 0x1FF] + out)]
    if port == DROP_PORT:
        return []
    return [(port, bytes(out))]


ANSWER, FORWARD = 0, 1  # the header changes a head template stands for
HEAD = UDP + 8  # Ethernet, IPv4, UDP: all that route() and those changes touch
HEAD_CACHE_SIZE = 4096  # heads remembered per change, shrink and version of ipv4_lpm
# an input head without the IPv4 id, the IPv4 checksum and the UDP checksum
HEAD_KEY = Struct("!18s2x4s2x14s")


def head_out(
    p: Pipeline, frame: bytes, change: int, shrink: int = 0
) -> tuple[int, bytearray] | None:
    """(port, first HEAD bytes out) for `frame` after `change` and route(), if that sends it
    to a port by ipv4_forward; None otherwise (CPU, drop: the caller takes the general path).

    ANSWER is parser.answer_headers with `shrink` (which udp.length in the head fixes),
    FORWARD processed()'s UDP checksum 0 and shrink_lengths by `shrink` (entries taken out).
    The output head depends on the input head, the change and ipv4_lpm only, and on the
    IPv4 id and checksum and the UDP checksum not at all but for the id itself and the new
    checksum. So the output head computed for id 0 is cached per change, shrink and input
    head without those fields (one per flow and length) while ipv4_lpm stays the same
    (Table._gen), like route_cache, and each packet gets its id and the checksum from the
    cached one's sum plus the id: ones' complement sums are exact under regrouping, so this
    is the same checksum as set_ipv4_checksum's.
    """
    gen = p.t_lpm._gen
    caches = p.head_cache
    if p.head_gen != gen:
        caches = p.head_cache = {}
        p.head_gen = gen
    variant = -1 if change == ANSWER else shrink  # ANSWER's shrink is in the head
    cache = caches.get(variant)
    if cache is None:
        cache = caches[variant] = {}
    key = HEAD_KEY.unpack_from(frame)
    hit = cache.get(key, _MISS)
    if hit is _MISS:
        hit = _head_template(p, key, change, shrink)
        if len(cache) < HEAD_CACHE_SIZE:
            cache[key] = hit
    if hit is None:
        return None
    port, head, base = hit
    out = bytearray(head)
    out[IP_ID] = hi = frame[IP_ID]
    out[IP_ID + 1] = lo = frame[IP_ID + 1]
    c = base + (hi << 8 | lo)
    U16.pack_into(out, IP_CSUM, ~((c & 0xFFFF) + (c >> 16)) & 0xFFFF)
    return port, out


def _head_template(p: Pipeline, key: HeadKey, change: int, shrink: int) -> HeadTemplate:
    """(port, output head for IPv4 id 0, its header's ones' complement sum) or None."""
    before_id, after_id, after_csum = key
    out = bytearray(b"".join((before_id, b"\0\0", after_id, b"\0\0", after_csum, b"\0\0")))
    if out[IP_TTL] <= 1:  # route() would count TTL_EXPIRED: the general path does, once
        return None
    if change == ANSWER:
        answer_headers(out, out, shrink)
    elif shrink:
        shrink_lengths(out, shrink)
    routed = route(p, out, 0, False, 0)
    if len(routed) != 1 or routed[0][0] == CPU_PORT:
        return None
    port, head = routed[0]
    return port, head, ~U16.unpack_from(head, IP_CSUM)[0] & 0xFFFF


def packet_out(frame: bytes) -> Output:
    """Step 1: a frame from the controller goes out on packet_out.egress_port untouched
    (except the IPv4 checksum, which the deparser recomputes on every IPv4 frame)."""
    if len(frame) < 2:
        return []  # no valid packet_out header: the parser fails and nothing is IPv4
    port = (frame[0] << 1) | (frame[1] >> 7)
    out = bytearray(frame[2:])
    if is_ipv4(out):
        return emit(out, port, CPU_PORT)
    if port == CPU_PORT:
        return [(CPU_PORT, PACKET_IN[CPU_PORT] + out)]
    return [] if port == DROP_PORT else [(port, bytes(out))]
