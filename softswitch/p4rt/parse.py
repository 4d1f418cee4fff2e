"""WriteRequest bytes -> the plain values the server acts on, without protobuf messages.

Parsing a WriteRequest with the pure-Python protobuf 3.20 took ~110 us per table-entry
update, which limited writes to ~9k entries/s. This parser reads the common shapes directly
(~4 us) and gives up, raising `Fallback`, on anything else (an unknown or repeated
sub-message field, a value out of its type's range, another wire type, truncated data, ...).
The caller then parses the request with protobuf, so every input still gets protobuf's exact
reading. Updates whose entity is not a table entry are handed to protobuf one by one.

A table entry, from either parser, becomes an `EntryIn`; entities.py validates only those.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Union

from p4.v1 import p4runtime_pb2

U32 = 1 << 32
I31 = 1 << 31
I63 = 1 << 63
U64 = 1 << 64
NOT_DIRECT = "not a direct action"  # EntryIn.action when TableAction holds something else

# (field id, match kind, value, prefix length); kind is FieldMatch's oneof name or None
Match = tuple[int, Optional[str], bytes, int]
# (action id, [(param id, value)]), or NOT_DIRECT, or None when TableEntry has no action
Action = Union[tuple[int, list[tuple[int, bytes]]], str, None]


class Fallback(Exception):
    """The bytes need protobuf's own parser."""


@dataclass
class EntryIn:
    """The parts of a TableEntry that the server reads."""

    table_id: int = 0
    matches: tuple[Match, ...] = ()
    action: Action = None
    priority: int = 0
    is_default: bool = False
    counters: tuple[int, int] | None = None  # (packet_count, byte_count) if counter_data set


@dataclass
class WriteIn:
    """The parts of a WriteRequest that the server reads. `updates` holds (type, entity):
    an EntryIn for a table entry, else the protobuf Entity."""

    device_id: int
    election: int | None  # None when election_id is unset
    role: str
    atomicity: int
    updates: list[tuple[int, Any]]


def entry_in(te: p4runtime_pb2.TableEntry) -> EntryIn:
    """EntryIn of a protobuf TableEntry."""
    matches = []
    for fm in te.match:
        kind = fm.WhichOneof("field_match_type")
        if kind == "exact":
            matches.append((fm.field_id, kind, fm.exact.value, 0))
        elif kind == "lpm":
            matches.append((fm.field_id, kind, fm.lpm.value, fm.lpm.prefix_len))
        else:
            matches.append((fm.field_id, kind, b"", 0))
    action: Action = None
    if te.HasField("action"):
        if te.action.WhichOneof("type") == "action":
            a = te.action.action
            action = (a.action_id, [(p.param_id, p.value) for p in a.params])
        else:
            action = NOT_DIRECT
    counters = None
    if te.HasField("counter_data"):
        counters = (te.counter_data.packet_count, te.counter_data.byte_count)
    return EntryIn(te.table_id, tuple(matches), action, te.priority, te.is_default_action, counters)


def write_in(req: p4runtime_pb2.WriteRequest) -> WriteIn:
    """WriteIn of a protobuf WriteRequest."""
    election = None
    if req.HasField("election_id"):
        election = (req.election_id.high << 64) | req.election_id.low
    updates = []
    for u in req.updates:
        if u.entity.WhichOneof("entity") == "table_entry":
            updates.append((u.type, entry_in(u.entity.table_entry)))
        else:
            updates.append((u.type, u.entity))
    return WriteIn(req.device_id, election, req.role, req.atomicity, updates)


# ---------------------------------------------------------------- the wire parser
# Fields are matched by their key byte (field number << 3 | wire type), so a field with the
# wrong wire type is "unknown" here, as it is for protobuf, and goes to protobuf.


def _fields(buf: bytes, pos: int, end: int) -> list[tuple[int, int, int]]:
    """(key, a, b) per field of the message in buf[pos:end]: a varint's value is a, a
    length-delimited field is buf[a:b]. Other wire types, keys past one byte -> Fallback."""
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
            if wtype == 0 and tag < 0x80:
                out.append((tag, n, 0))
            elif wtype == 2 and tag < 0x80 and pos + n <= end:
                out.append((tag, pos, pos + n))
                pos += n
            else:
                raise Fallback
    except IndexError:
        raise Fallback from None
    if pos != end:
        raise Fallback
    return out


def _lpm(buf: bytes, pos: int, end: int) -> tuple[bytes, int]:
    value = b""
    plen = 0
    for tag, a, b in _fields(buf, pos, end):
        if tag == 0x0A:  # value (a repeated scalar: the last one wins, as in protobuf)
            value = buf[a:b]
        elif tag == 0x10 and a < I31:  # prefix_len
            plen = a
        else:
            raise Fallback
    return value, plen


def _match(buf: bytes, pos: int, end: int) -> Match:
    # The usual shape, checked byte by byte: 08 <field_id> 12 <n+2> 0a <n> <n value bytes>
    if (
        end - pos > 6
        and buf[pos] == 0x08
        and buf[pos + 1] < 0x80
        and buf[pos + 2] == 0x12
        and buf[pos + 4] == 0x0A
        and buf[pos + 5] < 0x7E
        and buf[pos + 3] == buf[pos + 5] + 2
        and end == pos + 6 + buf[pos + 5]
    ):
        return (buf[pos + 1], "exact", buf[pos + 6 : end], 0)
    field_id = 0
    kind = None
    value = b""
    plen = 0
    for tag, a, b in _fields(buf, pos, end):
        if tag == 0x08 and a < U32:  # field_id
            field_id = a
        elif tag == 0x12 and kind is None:  # exact{value}
            kind = "exact"
            value, plen = _lpm(buf, a, b)
            if plen:
                raise Fallback  # Exact has no field 2
        elif tag == 0x22 and kind is None:  # lpm{value, prefix_len}
            kind = "lpm"
            value, plen = _lpm(buf, a, b)
        else:
            raise Fallback
    return (field_id, kind, value, plen)


def _action(buf: bytes, pos: int, end: int) -> Action:
    fields = _fields(buf, pos, end)
    if len(fields) != 1 or fields[0][0] != 0x0A:  # TableAction.action, nothing else
        raise Fallback
    action_id = 0
    params = []
    for tag, a, b in _fields(buf, fields[0][1], fields[0][2]):
        if tag == 0x08 and a < U32:  # action_id
            action_id = a
        elif tag == 0x22:  # params{param_id, value}
            # the usual shape: 10 <param_id> 1a <n> <n value bytes>
            if (
                b - a > 4
                and buf[a] == 0x10
                and buf[a + 1] < 0x80
                and buf[a + 2] == 0x1A
                and buf[a + 3] == b - a - 4 < 0x80
            ):
                params.append((buf[a + 1], buf[a + 4 : b]))
                continue
            pid = 0
            value = b""
            for t2, a2, b2 in _fields(buf, a, b):
                if t2 == 0x10 and a2 < U32:
                    pid = a2
                elif t2 == 0x1A:
                    value = buf[a2:b2]
                else:
                    raise Fallback
            params.append((pid, value))
        else:
            raise Fallback
    return (action_id, params)


def _counter_data(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    nbytes = packets = 0
    for tag, a, _ in _fields(buf, pos, end):
        if tag == 0x08 and a < I63:  # byte_count
            nbytes = a
        elif tag == 0x10 and a < I63:  # packet_count
            packets = a
        else:
            raise Fallback
    return packets, nbytes


def _table_entry(buf: bytes, pos: int, end: int) -> EntryIn:
    entry = EntryIn()
    matches = []
    seen_action = False
    for tag, a, b in _fields(buf, pos, end):
        if tag == 0x12:  # match
            matches.append(_match(buf, a, b))
        elif tag == 0x08 and a < U32:  # table_id
            entry.table_id = a
        elif tag == 0x1A and not seen_action:  # action
            entry.action = _action(buf, a, b)
            seen_action = True
        elif tag == 0x20 and a < I31:  # priority
            entry.priority = a
        elif tag == 0x3A and entry.counters is None:  # counter_data
            entry.counters = _counter_data(buf, a, b)
        elif tag == 0x40 and a < U64:  # is_default_action
            entry.is_default = bool(a)
        else:
            raise Fallback
    entry.matches = tuple(matches)
    return entry


def _update(buf: bytes, pos: int, end: int) -> tuple[int, Any]:
    kind = 0
    entity = None
    for tag, a, b in _fields(buf, pos, end):
        if tag == 0x08 and a < I31:  # type
            kind = a
        elif tag == 0x12 and entity is None:  # entity
            entity = (a, b)
        else:
            raise Fallback
    if entity is not None:
        fields = _fields(buf, *entity)
        if len(fields) == 1 and fields[0][0] == 0x12:  # Entity.table_entry only
            return kind, _table_entry(buf, fields[0][1], fields[0][2])
    try:
        update = p4runtime_pb2.Update.FromString(buf[pos:end])
    except Exception:
        raise Fallback from None
    return update.type, update.entity


def parse_write_request(buf: bytes) -> WriteIn:
    """WriteIn of serialized WriteRequest bytes; raises Fallback when protobuf must parse."""
    device_id = atomicity = 0
    election = None
    role = ""
    spans = []
    for tag, a, b in _fields(buf, 0, len(buf)):
        if tag == 0x22:  # updates
            spans.append((a, b))
        elif tag == 0x08 and a < U64:  # device_id
            device_id = a
        elif tag == 0x10 and a < U64:  # role_id: deprecated, unused
            pass
        elif tag == 0x1A and election is None:  # election_id{high, low}
            high = low = 0
            for t2, a2, _ in _fields(buf, a, b):
                if t2 == 0x08 and a2 < U64:
                    high = a2
                elif t2 == 0x10 and a2 < U64:
                    low = a2
                else:
                    raise Fallback
            election = (high << 64) | low
        elif tag == 0x28 and a < I31:  # atomicity
            atomicity = a
        elif tag == 0x32:  # role
            try:
                role = buf[a:b].decode("utf-8")
            except UnicodeDecodeError:
                raise Fallback from None
        else:
            raise Fallback
    return WriteIn(device_id, election, role, atomicity, [_update(buf, a, b) for a, b in spans])


@dataclass
class CounterReadIn:
    """A ReadRequest whose entities are all CounterEntry{counter_id, index} (the online
    loop's bulk reads of sketch cells): (counter_id, index, None when not given) each."""

    device_id: int
    cells: list[tuple[int, int | None]]


def parse_counter_read(buf: bytes) -> CounterReadIn:
    """CounterReadIn of serialized ReadRequest bytes; raises Fallback for anything else (a
    role, another entity, a counter entry with data, ...), which protobuf then parses.
    Reading 600 cells' request with protobuf took ~20 ms of the embedded switch's CPU."""
    device_id = 0
    cells: list[tuple[int, int | None]] = []
    for tag, a, b in _fields(buf, 0, len(buf)):
        if tag == 0x08 and a < U64:  # device_id
            device_id = a
        elif tag == 0x12:  # entities
            entity = _fields(buf, a, b)
            if len(entity) != 1 or entity[0][0] != 0x3A:  # Entity.counter_entry alone
                raise Fallback
            counter_id, index = 0, None
            for t2, a2, b2 in _fields(buf, entity[0][1], entity[0][2]):
                if t2 == 0x08 and a2 < U32:  # counter_id
                    counter_id = a2
                elif t2 == 0x12 and index is None:  # index{index}
                    index = 0
                    for t3, a3, _ in _fields(buf, a2, b2):
                        if t3 == 0x08 and a3 < I63:
                            index = a3
                        else:
                            raise Fallback  # a negative index too: protobuf reads it
                else:
                    raise Fallback
            cells.append((counter_id, index))
        else:
            raise Fallback
    if not cells:
        raise Fallback
    return CounterReadIn(device_id, cells)
