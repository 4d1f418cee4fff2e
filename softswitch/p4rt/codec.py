"""Controller packet headers (packet_in / packet_out) <-> (metadata id, value) pairs.

The embedded pipeline sends frames to the CPU port behind a packet_in header and takes
PacketOuts behind a packet_out header, as v1model targets do; the P4Info's
controller_packet_metadata gives the fields: (metadata id, bitwidth), MSB first.
"""

from __future__ import annotations

from collections.abc import Sequence


def header_len(fields: Sequence[tuple[int, int]]) -> int:
    """Bytes of a controller header made of (metadata id, bitwidth) fields."""
    return (sum(width for _, width in fields) + 7) // 8


def pack_header(fields: Sequence[tuple[int, int]], values: dict[int, int]) -> bytes:
    """Controller header bytes: fields MSB first in P4Info order; missing ids are 0."""
    acc = 0
    nbits = 0
    for mid, width in fields:
        acc = (acc << width) | (values.get(mid, 0) & ((1 << width) - 1))
        nbits += width
    pad = (-nbits) % 8
    return (acc << pad).to_bytes((nbits + pad) // 8, "big")


def unpack_header(fields: Sequence[tuple[int, int]], data: bytes) -> list[tuple[int, int]]:
    """(metadata id, value) per field of a controller header at the start of `data`."""
    n = header_len(fields)
    acc = int.from_bytes(data[:n], "big")
    shift = n * 8
    out = []
    for mid, width in fields:
        shift -= width
        out.append((mid, (acc >> shift) & ((1 << width) - 1)))
    return out
