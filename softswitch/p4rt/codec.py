"""P4Runtime byte strings <-> Python ints, and controller packet header (de)serialisation.

Canonical encoding (P4Runtime spec, "Bytestrings"): the shortest big-endian string that
holds the value, at least one byte. Input may be zero-padded on the left; a value that
needs more bits than the P4Info bitwidth, or an empty string, is rejected.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from softswitch.p4rt.errors import P4RTError


def encode(value: int) -> bytes:
    """Canonical byte string of a non-negative int (0 -> b'\\x00'), as BMv2/PI send it."""
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


MAX_QUOTED_BYTES = 16  # of a value quoted in an error message


def quote(data: bytes) -> str:
    """`data` as hex for an error message; a long value shows its first bytes and length
    (a 1 MB match value must not come back as 2 MB of hex)."""
    if len(data) <= MAX_QUOTED_BYTES:
        return f"0x{data.hex()}"
    return f"0x{data[:MAX_QUOTED_BYTES].hex()}... ({len(data)} bytes)"


def decode(data: bytes, bitwidth: int, what: str) -> int:
    """The int in `data`, checked to fit in `bitwidth` bits; `what` names it in errors."""
    if not data:
        raise P4RTError(grpc.StatusCode.INVALID_ARGUMENT, f"{what}: empty byte string")
    value = int.from_bytes(data, "big")
    if value.bit_length() > bitwidth:
        raise P4RTError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"{what}: value {quote(data)} does not fit in {bitwidth} bits",
        )
    return value


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
