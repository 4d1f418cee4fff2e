"""Protobuf wire encoding of the entities a Read returns, written directly as bytes.

protobuf 3.20 (pinned by p4runtime-shell) runs its pure-Python implementation here: building
one table Entity message and serialising it costs ~300 us, so a 16384-entry table took
seconds to read. These encoders write the same bytes in a few us per entity.
tests/test_p4runtime_server.py compares them byte for byte with SerializeToString.

Rules (protobuf wire format, as the reference serializer writes proto3): field key =
number << 3 | wire type; varint (0) for ints, enums and bools, negative ints as 10-byte two's
complement; length-delimited (2) for bytes and sub-messages; scalars equal to their default
(0, empty) are omitted, a sub-message that was set is written even when empty; fields go in
field-number order.

Each encoder returns one `ReadResponse.entities` element (key 1, length, Entity), so a
ReadResponse is the concatenation of such elements; `chunks` joins them into messages of
bounded size for the Read stream.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

import grpc

from softswitch.p4rt.codec import encode
from softswitch.p4rt.errors import P4RTError

READ_CHUNK = 1000  # at most this many entities per ReadResponse message
READ_CHUNK_BYTES = 1 << 20  # and at most ~this many bytes (gRPC's default limit is 4 MB)
_SMALL = [bytes((i,)) for i in range(128)]  # 1-byte varints, the common case


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
    return key(number, 0) + varint(value) if value else b""


def field_bytes(number: int, payload: bytes) -> bytes:
    """A length-delimited field (bytes or a sub-message that is set)."""
    return key(number, 2) + varint(len(payload)) + payload


def counter_data(packets: int, nbytes: int) -> bytes:
    """CounterData{byte_count=1, packet_count=2} (the message body). The fields are int64;
    a count the state holds beyond that (2**63 and up) is an error, as in protobuf."""
    if (packets | nbytes) >> 63:
        raise P4RTError(
            grpc.StatusCode.OUT_OF_RANGE,
            f"counter value {max(packets, nbytes)} does not fit P4Runtime's int64 counts",
        )
    return field_varint(1, nbytes) + field_varint(2, packets)


_ENTITY_TABLE = key(2, 2)
_ENTITY_COUNTER = key(7, 2)
_ENTITY_DIRECT_COUNTER = key(8, 2)
_ENTITY_REGISTER = key(11, 2)
_RESPONSE_ENTITY = key(1, 2)


def _framed(entity_key: bytes, body: bytes) -> bytes:
    """ReadResponse.entities element holding Entity{<entity_key>: body}."""
    ent = entity_key + varint(len(body)) + body
    return _RESPONSE_ENTITY + varint(len(ent)) + ent


class TableEncoder:
    """Encodes the entries of one table; built once per pipeline config (see binding.bind).

    `fields`: (position in the pipeline's match tuple, "exact" | "lpm", field id) in P4Info
    order. `actions`: action name -> (action id, param ids in the pipeline's param order).
    """

    def __init__(
        self,
        table_id: int,
        fields: Sequence[tuple[int, str, int]],
        actions: Mapping[str, tuple[int, Sequence[int]]],
    ) -> None:
        self.head = field_varint(1, table_id)
        self.fields = [(pos, kind == "exact", field_varint(1, fid)) for pos, kind, fid in fields]
        # name -> (Action field prefix, Param prefixes); a hot path, so prebuilt
        self.actions = {
            name: (field_varint(1, aid), [field_varint(2, pid) + b"\x1a" for pid in pids])
            for name, (aid, pids) in actions.items()
        }

    def match(self, match: tuple) -> bytes:
        """The TableEntry.match fields (key 2) of a pipeline match tuple; /0 lpm is omitted."""
        out = b""
        for pos, exact, fid in self.fields:
            v = match[pos]
            if exact:
                val = encode(v)
                # FieldMatch{field_id, exact{value}}: 0x12 = key(2, LEN), 0x0a = key(1, LEN)
                inner = b"\x0a" + varint(len(val)) + val
                fm = fid + b"\x12" + varint(len(inner)) + inner
            else:
                value, plen = v
                if not plen:
                    continue
                val = encode(value)
                # lpm{value, prefix_len}: 0x22 = key(4, LEN), 0x10 = key(2, VARINT)
                inner = b"\x0a" + varint(len(val)) + val + b"\x10" + varint(plen)
                fm = fid + b"\x22" + varint(len(inner)) + inner
            out += b"\x12" + varint(len(fm)) + fm
        return out

    def action(self, name: str, params: Sequence[int]) -> bytes:
        """TableEntry.action (key 3): TableAction{action{action_id, params}}; KeyError if
        the action is not in the P4Info."""
        head, pkeys = self.actions[name]
        body = head
        for pk, v in zip(pkeys, params):
            val = encode(v)
            p = pk + varint(len(val)) + val  # Param{param_id=2, value=3}
            body += b"\x22" + varint(len(p)) + p  # Action.params = key(4, LEN)
        ta = b"\x0a" + varint(len(body)) + body  # TableAction.action = key(1, LEN)
        return b"\x1a" + varint(len(ta)) + ta

    def entry(
        self, match: tuple, action: str, params: Sequence[int], counters: tuple | None
    ) -> bytes:
        """Entity{table_entry{table_id, match, action[, counter_data]}}, framed."""
        body = self.head + self.match(match) + self.action(action, params)
        if counters is not None:
            cd = counter_data(*counters)
            body += b"\x3a" + varint(len(cd)) + cd  # key(7, LEN)
        return _framed(_ENTITY_TABLE, body)

    def default_entry(self, action: str, params: Sequence[int]) -> bytes:
        """Entity{table_entry{table_id, action, is_default_action: true}}, framed."""
        body = self.head + self.action(action, params) + b"\x40\x01"  # key(8, VARINT), true
        return _framed(_ENTITY_TABLE, body)

    def direct_counter(self, match: tuple, packets: int, nbytes: int) -> bytes:
        """Entity{direct_counter_entry{table_entry{table_id, match}, data}}, framed."""
        te = self.head + self.match(match)
        cd = counter_data(packets, nbytes)
        body = field_bytes(1, te) + field_bytes(2, cd)
        return _framed(_ENTITY_DIRECT_COUNTER, body)


def _index(index: int) -> bytes:
    return field_bytes(2, field_varint(1, index))  # index{index}, set even for 0


def counter_entry(counter_id: int, index: int, packets: int, nbytes: int) -> bytes:
    """Entity{counter_entry{counter_id, index{index}, data}}, framed."""
    data = counter_data(packets, nbytes)
    body = field_varint(1, counter_id) + _index(index) + field_bytes(3, data)
    return _framed(_ENTITY_COUNTER, body)


def register_entry(register_id: int, index: int, value: int) -> bytes:
    """Entity{register_entry{register_id, index{index}, data{bitstring}}}, framed."""
    data = field_bytes(1, encode(value))  # P4Data.bitstring = 1
    body = field_varint(1, register_id) + _index(index) + field_bytes(3, data)
    return _framed(_ENTITY_REGISTER, body)


def chunks(
    entities: Iterable[bytes], max_count: int = READ_CHUNK, max_bytes: int = READ_CHUNK_BYTES
) -> Iterator[bytes]:
    """ReadResponse bytes of at most `max_count` entities and, unless one entity is bigger,
    `max_bytes` bytes each; one empty response when there are none (a Read always answers)."""
    part: list[bytes] = []
    size = 0
    sent = False
    for ent in entities:
        if part and (len(part) >= max_count or size + len(ent) > max_bytes):
            yield b"".join(part)
            sent = True
            part = []
            size = 0
        part.append(ent)
        size += len(ent)
    if part or not sent:
        yield b"".join(part)
