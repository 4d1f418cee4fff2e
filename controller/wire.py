"""Protobuf wire encoding of the few P4Runtime messages that bulk writes send, and decoding
of the few replies that bulk reads get.

protobuf 3.20 (pinned by p4runtime-shell) has only its pure-Python implementation here, which
needs ~110 us to build one TableEntry and wrap it in an Update; installing 2000 hot keys into
8 tables spent most of its time there. These helpers write the same bytes directly (~2 us).
tests/test_controller.py checks them byte for byte against SerializeToString.

Encoding rules used (protobuf wire format): field key = number << 3 | wire type; varint
(type 0) for ints and enums; length-delimited (type 2) for bytes and sub-messages; proto3
fields equal to their default (0, empty) are omitted, and fields go in field-number order,
as the reference serializer writes them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from p4.v1 import p4runtime_pb2


def varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def field_varint(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value) if value else b""


def field_bytes(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(payload)) + payload


# --- p4.v1 messages (field numbers from p4runtime.proto, 1.4.1) ---


def exact_match(field_id: int, value: bytes) -> bytes:
    """FieldMatch{field_id, exact{value}}."""
    return field_bytes(2, field_varint(1, field_id) + field_bytes(2, field_bytes(1, value)))


def lpm_match(field_id: int, value: bytes, prefix_len: int) -> bytes:
    """FieldMatch{field_id, lpm{value, prefix_len}}."""
    lpm = field_bytes(1, value) + field_varint(2, prefix_len)
    return field_bytes(2, field_varint(1, field_id) + field_bytes(4, lpm))


def table_action(action_id: int, params: Sequence[tuple[int, bytes]]) -> bytes:
    """TableAction{action{action_id, params[{param_id, value}]}} as TableEntry field 3."""
    action = field_varint(1, action_id)
    for param_id, value in params:
        action += field_bytes(4, field_varint(2, param_id) + field_bytes(3, value))
    return field_bytes(3, field_bytes(1, action))


def table_entry(table_id: int, matches: bytes, action: bytes = b"") -> bytes:
    """TableEntry{table_id, match..., action}; `matches` are exact_match/lpm_match results."""
    return field_varint(1, table_id) + matches + action


def update(type_: int, entry: bytes) -> bytes:
    """Update{type, entity{table_entry}} for a serialized TableEntry."""
    return field_varint(1, type_) + field_bytes(2, field_bytes(2, entry))


def write_request(
    device_id: int, election_id: tuple[int, int], updates: Sequence[bytes], atomicity: int
) -> bytes:
    """WriteRequest{device_id, election_id, updates..., atomicity}; updates already encoded."""
    election = field_varint(1, election_id[0]) + field_varint(2, election_id[1])
    out = [field_varint(1, device_id), field_bytes(3, election)]
    out += [field_bytes(4, u) for u in updates]
    out.append(field_varint(5, atomicity))
    return b"".join(out)


def counter_entity(counter_id: int, index: int) -> bytes:
    """Entity{counter_entry{counter_id, index{index}}}: one cell to read (index 0 too: the
    Index message is there, empty)."""
    entry = field_varint(1, counter_id) + field_bytes(2, field_varint(1, index))
    return field_bytes(7, entry)


def read_request(device_id: int, entities: Sequence[bytes]) -> bytes:
    """ReadRequest{device_id, entities...}; entities already encoded."""
    return field_varint(1, device_id) + b"".join(field_bytes(2, e) for e in entities)


def serialize_update(u: p4runtime_pb2.Update | bytes) -> bytes:
    return u if isinstance(u, bytes) else u.SerializeToString()


# --- decoding the few replies that bulk reads return ---
# The same pure-Python protobuf parses a Read reply at ~40 us per entity: the 8 hot-key
# tables' counters (~700 entries) took ~0.25 s, both rows of the sketch ~0.3 s. These
# read only the fields the loop uses. Unknown fields are skipped, as protobuf does.


def _varint_at(buf: bytes, i: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        b = buf[i]
        i += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n, i
        shift += 7


def fields(buf: bytes) -> Iterator[tuple[int, Any]]:
    """(field number, value) of a serialized message, in order: an int for a varint, the
    bytes of a length-delimited field; fixed-width fields (no p4.v1 message read here has
    them) are skipped."""
    i, end = 0, len(buf)
    while i < end:
        key, i = _varint_at(buf, i)
        kind = key & 7
        if kind == 0:
            value, i = _varint_at(buf, i)
            yield key >> 3, value
        elif kind == 2:
            size, i = _varint_at(buf, i)
            yield key >> 3, buf[i : i + size]
            i += size
        elif kind in (1, 5):
            i += 8 if kind == 1 else 4
        else:
            raise ValueError(f"protobuf wire type {kind} not supported")


def _counter_data(buf: bytes) -> tuple[int, int]:
    """CounterData{byte_count, packet_count}."""
    out = [0, 0]
    for number, value in fields(buf):
        if number in (1, 2):
            out[number - 1] = int(value)
    return out[0], out[1]


def _entities(reply: bytes, kind: int) -> Iterator[bytes]:
    """The Entity field `kind` of each entity of a ReadResponse."""
    for number, entity in fields(reply):
        if number == 1:
            for inner, value in fields(entity):
                if inner == kind:
                    yield value


def counter_entries(reply: bytes) -> Iterator[tuple[int, int, int, int]]:
    """(counter_id, index, byte_count, packet_count) of each CounterEntry in a serialized
    ReadResponse."""
    for entry in _entities(reply, 7):
        counter_id = index = 0
        data = (0, 0)
        for number, value in fields(entry):
            if number == 1:
                counter_id = int(value)
            elif number == 2:
                index = next((int(v) for n, v in fields(value) if n == 1), 0)
            elif number == 3:
                data = _counter_data(value)
        yield counter_id, index, *data


def table_entry_counters(reply: bytes) -> Iterator[tuple[int, dict[int, bytes], int]]:
    """(table_id, {field_id: exact value}, packet_count) of each TableEntry in a serialized
    ReadResponse (read with counter_data: the direct counters)."""
    for entry in _entities(reply, 2):
        table_id = packets = 0
        match: dict[int, bytes] = {}
        for number, value in fields(entry):
            if number == 1:
                table_id = int(value)
            elif number == 2:
                field_id, exact = 0, b""
                for n, v in fields(value):
                    if n == 1:
                        field_id = int(v)
                    elif n == 2:
                        exact = next((bytes(x) for k, x in fields(v) if k == 1), b"")
                match[field_id] = exact
            elif number == 7:
                packets = _counter_data(value)[1]
        yield table_id, match, packets
