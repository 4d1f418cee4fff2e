"""Routing (p4src/include/forwarding.p4): `ipv4_lpm` and the CPU port.

Every frame that leaves gets its IPv4 checksum recomputed here, and every frame that leaves on
CPU_PORT carries a packet_in header with the port it came in on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from contract import names
from contract.constants import CPU_PORT, Stat
from softswitch.pipeline.parser import (
    DROP_PORT,
    ETH_DST,
    ETH_SRC,
    IP_DST,
    IP_TTL,
    PACKET_IN,
    U32,
    is_ipv4,
    set_ipv4_checksum,
)

if TYPE_CHECKING:
    from softswitch.pipeline import Pipeline

IPV4_FORWARD = names.ACTION_IPV4_FORWARD
SEND_TO_CPU = names.ACTION_SEND_TO_CPU
NO_ROUTE = Stat.NO_ROUTE.value

Output = list[tuple[int, bytes]]


def emit(out: bytearray, port: int, ingress_port: int) -> Output:
    """The deparser: checksum, then the frame on `port` (drop port: nothing)."""
    set_ipv4_checksum(out)
    if port == CPU_PORT:
        return [(CPU_PORT, PACKET_IN[ingress_port & 0x1FF] + out)]
    if port == DROP_PORT:
        return []
    return [(port, bytes(out))]


def route(p: Pipeline, out: bytearray, ingress_port: int, hotagg: bool, nbytes: int) -> Output:
    """Step 7 of the ingress: look up the destination of `out` and rewrite it for its hop."""
    t = p.t_lpm
    rec = t.lpm_lookup(U32.unpack_from(out, IP_DST)[0]) if t._lens else None
    if rec is None:
        rec = t._default_rec
    action = rec[0]
    if action == IPV4_FORWARD:
        dst_mac, port = rec[1]
        out[ETH_SRC : ETH_SRC + 6] = out[ETH_DST : ETH_DST + 6]
        out[ETH_DST : ETH_DST + 6] = dst_mac.to_bytes(6, "big")
        out[IP_TTL] = (out[IP_TTL] - 1) & 0xFF
        return emit(out, port, ingress_port)
    if action == SEND_TO_CPU:
        return emit(out, CPU_PORT, ingress_port)
    if hotagg:  # drop
        p.stats_packets[NO_ROUTE] += 1
        p.stats_bytes[NO_ROUTE] += nbytes
    return []


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
