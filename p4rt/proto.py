"""protobuf's wire format, as much of it as the P4Runtime messages in wire.py use.

Writing (as the reference serializer writes proto3): field key = number << 3 | wire type;
varint (0) for ints, enums and bools, negative ints as 10-byte two's complement;
length-delimited (2) for bytes, strings and sub-messages; scalars equal to their default
(0, empty) are omitted, a sub-message that was set is written even when empty; fields go in
field-number order.

Reading: `scan` lists a message's fields and raises `Fallback` on anything it does not read
(another wire type, a key of more than one byte, a varint past 64 bits, truncated data), so
the caller hands those bytes to protobuf's own parser and every input gets protobuf's reading.
"""

from __future__ import annotations

VARINT, LEN = 0, 2  # the wire types used
_SMALL = [bytes((i,)) for i in range(128)]  # 1-byte varints, the common case


class Fallback(Exception):
    """The bytes need protobuf's own parser."""


def varint(n: int) -> bytes:
    if 0 <= n < 128:
        return _SMALL[n]
    n &= (1 << 64) - 1  # int32/int64 negatives: two's complement in 10 bytes
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def key(number: int, wire_type: int) -> bytes:
    return varint(number << 3 | wire_type)


def field_varint(number: int, value: int) -> bytes:
    """A varint field, or nothing for 0 (the proto3 default)."""
    return key(number, VARINT) + varint(value) if value else b""


def field_bytes(number: int, payload: bytes) -> bytes:
    """A length-delimited field (bytes or a sub-message that is set)."""
    return key(number, LEN) + varint(len(payload)) + payload


def field_string(number: int, payload: bytes) -> bytes:
    """A bytes or string field, or nothing when empty (the proto3 default)."""
    return field_bytes(number, payload) if payload else b""


def scan(buf: bytes, pos: int, end: int) -> list[tuple[int, int, int]]:
    """(key, a, b) per field of the message in buf[pos:end]: a varint's value is a, a
    length-delimited field is buf[a:b]. Keys are single bytes (field numbers up to 15), so
    callers match a field by its key byte: a field with the wrong wire type is then unknown
    to them, as it is to protobuf. Anything else -> Fallback."""
    out = []
    try:
        while pos < end:
            tag = buf[pos]
            b = buf[pos + 1]
            pos += 2
            if b >= 0x80:
                n = b & 0x7F
                shift = 7
                while True:
                    b = buf[pos]
                    pos += 1
                    n |= (b & 0x7F) << shift
                    if b < 0x80:
                        break
                    shift += 7
                    if shift > 63:
                        raise Fallback
            else:
                n = b
            wtype = tag & 7
            if wtype == VARINT and tag < 0x80:
                out.append((tag, n, 0))
            elif wtype == LEN and tag < 0x80 and pos + n <= end:
                out.append((tag, pos, pos + n))
                pos += n
            else:
                raise Fallback
    except IndexError:
        raise Fallback from None
    if pos != end:
        raise Fallback
    return out
