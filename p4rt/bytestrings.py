"""P4Runtime byte strings <-> Python ints.

Canonical encoding (P4Runtime spec, "Bytestrings"): the shortest big-endian string that
holds the value, at least one byte. Input may be zero-padded on the left; a value that
needs more bits than the P4Info bitwidth, or an empty string, is rejected.
"""

from __future__ import annotations

import grpc

from p4rt.errors import P4RTError

MAX_QUOTED_BYTES = 16  # of a value quoted in an error message


def encode(value: int) -> bytes:
    """Canonical byte string of a non-negative int (0 -> b'\\x00'), as BMv2/PI send it."""
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


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
