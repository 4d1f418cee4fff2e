"""Write and Read of P4Runtime entities against the pipeline's state objects.

Follows PI/BMv2's rules where the spec leaves a choice (so one controller sees the same
answers from both targets): an omitted LPM field is a wildcard, an explicit prefix length 0
is rejected, INSERT/DELETE of the default entry are rejected, a default-entry MODIFY without
an action resets the initial default action, counter DELETE resets the cell to 0, a table
read naming an absent key finds nothing. TableEntry.metadata is kept and read back; no table
has idle timeout. tests/test_p4runtime_conformance.py compares the answers with BMv2's.

Writes take table entries as p4rt.wire.RawEntry (from the fast wire parser or from a
protobuf message). Reads run in two steps: `read_entity` checks the request and takes a
snapshot of the state (call it under the server's lock); the snapshot then yields each
entity already serialized (p4rt/wire.py), lazily, so a large read is encoded while it
streams.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

import grpc
from p4.v1 import p4runtime_pb2

from p4rt import wire
from p4rt.bytestrings import decode
from p4rt.errors import P4RTError
from p4rt.wire import NOT_DIRECT, RawEntry, raw_entry
from softswitch import state
from softswitch.p4rt.binding import Binding, TableBinding
from softswitch.p4rt.errors import from_state_error

INVALID = grpc.StatusCode.INVALID_ARGUMENT
UNIMPLEMENTED = grpc.StatusCode.UNIMPLEMENTED
Update = p4runtime_pb2.Update
_INSERT, _MODIFY, _DELETE = Update.INSERT, Update.MODIFY, Update.DELETE
TABLE = wire.ENTITY_TABLE


def _state_call(fn: Any, *args: Any) -> Any:
    """Call a state method, turning its typed exceptions into P4RTError."""
    try:
        return fn(*args)
    except state.StateError as exc:
        raise from_state_error(exc) from exc


# ---------------------------------------------------------------- request -> pipeline


def _table(b: Binding, table_id: int) -> TableBinding:
    tb = b.tables.get(table_id)
    if tb is None:
        raise P4RTError(INVALID, f"unknown table id {table_id:#x}")
    return tb


def _match(tb: TableBinding, entry: RawEntry) -> tuple:
    values: list[Any] = [None] * len(tb.table.fields)
    for field_id, which, raw, plen in entry.matches:
        f = tb.field_by_id.get(field_id)
        if f is None:
            raise P4RTError(INVALID, f"{tb.name}: no match field with id {field_id}")
        if values[f.position] is not None:
            raise P4RTError(INVALID, f"{tb.name}: match field {f.name} given twice")
        if which != f.kind:
            raise P4RTError(INVALID, f"{tb.name}: field {f.name} is {f.kind}, got {which}")
        what = f"{tb.name} field {f.name}"
        if which == "exact":
            values[f.position] = decode(raw, f.bitwidth, what)
            continue
        if not 1 <= plen <= f.bitwidth:
            raise P4RTError(
                INVALID,
                f"{what}: prefix length {plen} not in 1..{f.bitwidth} "
                "(omit the field for a wildcard)",
            )
        value = decode(raw, f.bitwidth, what)
        if value & ((1 << (f.bitwidth - plen)) - 1):
            raise P4RTError(INVALID, f"{what}: bits set beyond the /{plen} prefix")
        values[f.position] = (value, plen)
    for f in tb.fields:
        if values[f.position] is None:
            if f.kind == "exact":
                raise P4RTError(INVALID, f"{tb.name}: exact match field {f.name} missing")
            values[f.position] = (0, 0)
    return tuple(values)


def _action(b: Binding, tb: TableBinding, action: Any) -> tuple[str, tuple]:
    if action == NOT_DIRECT:
        raise P4RTError(UNIMPLEMENTED, f"{tb.name}: only direct actions are supported")
    action_id, given = action
    ab = b.actions.get(action_id)
    if ab is None or ab.name not in tb.table.actions:
        raise P4RTError(INVALID, f"{tb.name}: action id {action_id:#x} not in this table")
    params: list[int | None] = [None] * len(ab.params)
    for param_id, raw in given:
        i = ab.param_index.get(param_id)
        if i is None:
            raise P4RTError(INVALID, f"{ab.name}: no parameter with id {param_id}")
        if params[i] is not None:
            raise P4RTError(INVALID, f"{ab.name}: parameter id {param_id} given twice")
        params[i] = decode(raw, ab.params[i][1], f"{ab.name} parameter {param_id}")
    if any(v is None for v in params):
        raise P4RTError(INVALID, f"{ab.name}: expects {len(params)} parameters")
    return ab.name, tuple(params)


def _no_idle_timeout(tb: TableBinding, entry: RawEntry, kind: int) -> None:
    """No table here has idle timeout (v1model tables without support_timeout): the spec
    ("Idle timeout") and PI (device_mgr.cpp table_write, validate_entry_ttl) refuse the
    fields that ask for it."""
    if entry.time_since_last_hit:
        raise P4RTError(INVALID, f"{tb.name}: time_since_last_hit must not be set in a write")
    if entry.idle_timeout_ns and kind != _DELETE:
        raise P4RTError(
            INVALID,
            f"{tb.name} has no idle timeout: idle_timeout_ns must be 0, "
            f"got {entry.idle_timeout_ns}",
        )


def _write_table(b: Binding, kind: int, entry: RawEntry) -> None:
    tb = _table(b, entry.table_id)
    table = tb.table
    _no_idle_timeout(tb, entry, kind)
    if entry.priority:
        raise P4RTError(INVALID, f"{tb.name}: priority must be 0 (no ternary/range fields)")
    if entry.is_default:
        if kind != _MODIFY:
            raise P4RTError(INVALID, f"{tb.name}: only MODIFY is allowed for the default entry")
        if entry.matches:
            raise P4RTError(INVALID, f"{tb.name}: default entry with a match key")
        if entry.action is not None:
            _state_call(table.set_default, *_action(b, tb, entry.action))
        else:
            _state_call(table.reset_default)
        # a reset (no action) forgets the metadata too, as PI does
        b.metadata.set(tb.name, None, entry.metadata if entry.action is not None else b"")
        return
    match = _match(tb, entry)
    if kind == _DELETE:
        _state_call(table.delete, match)
        b.metadata.drop(tb.name, match)
        return
    if entry.action is None:
        raise P4RTError(INVALID, f"{tb.name}: 'action' must be set")
    name, params = _action(b, tb, entry.action)
    if kind == _INSERT:
        _state_call(table.insert, match, name, params)
    else:
        _state_call(table.modify, match, name, params)
    b.metadata.set(tb.name, match, entry.metadata)
    if entry.counters is not None and table.has_direct_counter:
        _state_call(table.set_direct_counter, match, *entry.counters)


def _index(msg: Any, what: str) -> int:
    if not msg.HasField("index"):
        raise P4RTError(UNIMPLEMENTED, f"{what}: wildcard writes are not supported")
    if msg.index.index < 0:
        raise P4RTError(INVALID, f"{what}: negative index {msg.index.index}")
    return msg.index.index


def _write_counter(b: Binding, kind: int, ce: p4runtime_pb2.CounterEntry) -> None:
    counter = b.counters.get(ce.counter_id)
    if counter is None:
        raise P4RTError(INVALID, f"unknown (indirect) counter id {ce.counter_id:#x}")
    if kind == _INSERT:
        raise P4RTError(INVALID, f"{counter.name}: INSERT is not allowed for counters")
    index = _index(ce, counter.name)
    if kind == _MODIFY:
        _state_call(counter.write, index, ce.data.packet_count, ce.data.byte_count)
    else:
        _state_call(counter.write, index, 0, 0)


def _write_direct_counter(b: Binding, kind: int, dce: p4runtime_pb2.DirectCounterEntry) -> None:
    te = raw_entry(dce.table_entry)
    tb = _table(b, te.table_id)
    if not tb.table.has_direct_counter:
        raise P4RTError(INVALID, f"{tb.name} has no direct counter")
    if kind == _INSERT:
        raise P4RTError(INVALID, f"{tb.name}: INSERT is not allowed for direct counters")
    if te.is_default:
        raise P4RTError(UNIMPLEMENTED, f"{tb.name}: the default entry has no direct counter")
    match = _match(tb, te)
    data = dce.data if kind == _MODIFY else p4runtime_pb2.CounterData()
    _state_call(tb.table.set_direct_counter, match, data.packet_count, data.byte_count)


def _write_register(b: Binding, kind: int, re: p4runtime_pb2.RegisterEntry) -> None:
    register = b.registers.get(re.register_id)
    if register is None:
        raise P4RTError(INVALID, f"unknown register id {re.register_id:#x}")
    if kind != _MODIFY:
        raise P4RTError(INVALID, f"{register.name}: only MODIFY is allowed for registers")
    index = _index(re, register.name)
    if re.data.WhichOneof("data") != "bitstring":
        raise P4RTError(INVALID, f"{register.name}: data must be a bitstring")
    value = decode(re.data.bitstring, register.bitwidth, register.name)
    _state_call(register.write, index, value)


def write_update(b: Binding, kind: int, entity: RawEntry | p4runtime_pb2.Entity) -> None:
    """Apply one update (a table entry as RawEntry, anything else as its protobuf Entity);
    raises P4RTError with the update's canonical code."""
    if kind not in (_INSERT, _MODIFY, _DELETE):
        raise P4RTError(INVALID, "update type is not set")
    if isinstance(entity, RawEntry):
        _write_table(b, kind, entity)
        return
    which = entity.WhichOneof("entity")
    if which == "counter_entry":
        _write_counter(b, kind, entity.counter_entry)
    elif which == "direct_counter_entry":
        _write_direct_counter(b, kind, entity.direct_counter_entry)
    elif which == "register_entry":
        _write_register(b, kind, entity.register_entry)
    elif which == "packet_replication_engine_entry":
        _write_pre(kind, entity.packet_replication_engine_entry)
    elif which in _ABSENT_KINDS:
        raise P4RTError(INVALID, f"{_named(entity, which) or which}: the P4Info has none")
    else:
        raise P4RTError(UNIMPLEMENTED, f"{which or 'empty entity'}: not supported")


# ---------------------------------------------------------------- what the pipeline lacks
# The hotagg program has no multicast group, clone session, action profile or meter. PI
# answers for such a program (and so does this server): a wildcard read finds nothing; a
# group, session or id named finds nothing to read, modify or delete (pre_mc_mgr.cpp and
# pre_clone_mgr.cpp: NOT_FOUND; an id the P4Info lacks: INVALID_ARGUMENT, check_p4_id).
# Creating a group or session is UNIMPLEMENTED: this target replicates no packets.

# Entity field -> the field of its id; the P4Info has no object of these kinds.
_ABSENT_KINDS = {
    "action_profile_member": "action_profile_id",
    "action_profile_group": "action_profile_id",
    "meter_entry": "meter_id",
    "direct_meter_entry": "table_entry",
}


def _named(entity: p4runtime_pb2.Entity, which: str) -> str:
    """The id an entity of an _ABSENT_KINDS kind names ("" for a wildcard)."""
    msg = getattr(entity, which)
    if which == "direct_meter_entry":
        tid = msg.table_entry.table_id
        return f"direct meter of table {tid:#x}" if tid else "direct meter of no table"
    obj_id = getattr(msg, _ABSENT_KINDS[which])
    return f"{which.replace('_entry', '').replace('_', ' ')} id {obj_id:#x}" if obj_id else ""


def _pre_target(pre: p4runtime_pb2.PacketReplicationEngineEntry) -> tuple[str, int]:
    which = pre.WhichOneof("type")
    if which == "multicast_group_entry":
        return "multicast group", pre.multicast_group_entry.multicast_group_id
    if which == "clone_session_entry":
        return "clone session", pre.clone_session_entry.session_id
    raise P4RTError(INVALID, "Invalid PRE operation: set a multicast group or a clone session")


def _write_pre(kind: int, pre: p4runtime_pb2.PacketReplicationEngineEntry) -> None:
    what, number = _pre_target(pre)
    if kind == _INSERT:
        raise P4RTError(UNIMPLEMENTED, f"{what}s: the hotagg pipeline replicates no packets")
    raise P4RTError(grpc.StatusCode.NOT_FOUND, f"{what} {number} does not exist")


def _read_pre(pre: p4runtime_pb2.PacketReplicationEngineEntry) -> Iterator[bytes]:
    what, number = _pre_target(pre)
    if number:
        raise P4RTError(grpc.StatusCode.NOT_FOUND, f"{what} {number} does not exist")
    return iter(())  # every one of them: none


def _read_absent(entity: p4runtime_pb2.Entity, which: str) -> Iterator[bytes]:
    named = _named(entity, which)
    if named or which == "direct_meter_entry":
        raise P4RTError(INVALID, f"{named or which}: the P4Info has none")
    return iter(())  # a wildcard read: there are none


# ---------------------------------------------------------------- pipeline -> bytes


def _tables_for(b: Binding, te: p4runtime_pb2.TableEntry) -> list[TableBinding]:
    if te.table_id == 0:
        if te.match:
            raise P4RTError(INVALID, "a match key needs a table id")
        return list(b.tables.values())
    return [_table(b, te.table_id)]


def _entries(
    tb: TableBinding, te: p4runtime_pb2.TableEntry, absent_ok: bool
) -> list[state.TableEntry]:
    """The entries `te` asks for: every one, or the one its match names. An absent one is no
    entry with `absent_ok` (a table read filters, spec "Read RPC"; PI reads the one key and
    returns what it finds, device_mgr.cpp table_read_one), else NOT_FOUND (a direct
    counter's entry, spec "DirectCounterEntry")."""
    if not te.match:
        return tb.table.entries()
    try:
        return [_state_call(tb.table.get, _match(tb, raw_entry(te)))]
    except P4RTError as e:
        if absent_ok and e.code == grpc.StatusCode.NOT_FOUND:
            return []
        raise


def _check_actions(tb: TableBinding, names: Iterable[str]) -> None:
    missing = set(names) - tb.encoder.actions.keys()
    if missing:
        name = min(missing)
        raise P4RTError(grpc.StatusCode.INTERNAL, f"action {name} is not in the P4Info")


def _read_tables(b: Binding, req: p4runtime_pb2.TableEntry) -> Iterator[bytes]:
    if req.HasField("time_since_last_hit"):  # PI: "yes, that includes wildcard reads"
        raise P4RTError(INVALID, "time_since_last_hit: no table here has idle timeout")
    with_counters = req.HasField("counter_data")
    out: list[Iterator[bytes]] = []
    for tb in _tables_for(b, req):
        enc = tb.encoder
        if req.is_default_action:
            name, params = tb.table.default()
            _check_actions(tb, (name,))
            metadata = b.metadata.of(tb.name).get(None, b"")
            entry = enc.default_entry(name, params, metadata)
            out.append(iter((wire.response_entity(TABLE, entry),)))
            continue
        entries = _entries(tb, req, absent_ok=True)
        _check_actions(tb, {e.action for e in entries})
        counters = with_counters and tb.table.has_direct_counter
        out.append(_encode(enc, entries, counters, b.metadata.of(tb.name)))
    return itertools.chain.from_iterable(out)


def _encode(
    enc: wire.TableEncoder,
    entries: list[state.TableEntry],
    counters: bool,
    metadata: dict[Any, bytes],
) -> Iterator[bytes]:
    frame = wire.response_entity
    if metadata:  # some entries have metadata (rare): look each one up
        return (
            frame(
                TABLE,
                enc.entry(
                    e.match,
                    e.action,
                    e.params,
                    (e.packets, e.bytes) if counters else None,
                    metadata.get(e.match, b""),
                ),
            )
            for e in entries
        )
    if counters:
        return (
            frame(TABLE, enc.entry(e.match, e.action, e.params, (e.packets, e.bytes)))
            for e in entries
        )
    return (frame(TABLE, enc.entry(e.match, e.action, e.params)) for e in entries)


def _read_direct_counters(b: Binding, req: p4runtime_pb2.DirectCounterEntry) -> Iterator[bytes]:
    te = req.table_entry
    if te.is_default_action:
        raise P4RTError(UNIMPLEMENTED, "the default entry has no direct counter")
    tables = [tb for tb in _tables_for(b, te) if tb.table.has_direct_counter]
    if te.table_id and not tables:
        raise P4RTError(INVALID, f"table id {te.table_id:#x} has no direct counter")
    snap = [(tb.encoder, _entries(tb, te, absent_ok=False)) for tb in tables]
    kind = wire.ENTITY_DIRECT_COUNTER
    return (
        wire.response_entity(kind, enc.direct_counter(e.match, e.packets, e.bytes))
        for enc, es in snap
        for e in es
    )


def _indexes(msg: Any, size: int, what: str) -> range:
    return _index_range(msg.index.index if msg.HasField("index") else None, size, what)


def _index_range(i: int | None, size: int, what: str) -> range:
    """Every index (None: no index given), or the one given if it is in range."""
    if i is None:
        return range(size)
    if i < 0:
        raise P4RTError(INVALID, f"{what}: negative index {i}")
    if i >= size:
        raise P4RTError(grpc.StatusCode.OUT_OF_RANGE, f"{what}: index {i} >= size {size}")
    return range(i, i + 1)


def _read_counters(b: Binding, req: p4runtime_pb2.CounterEntry) -> Iterator[bytes]:
    index = req.index.index if req.HasField("index") else None
    return read_counter(b, req.counter_id, index)


def read_counter(b: Binding, counter_id: int, index: int | None) -> Iterator[bytes]:
    """CounterEntry{counter_id (0: every counter), index (None: every index)}'s cells."""
    if counter_id == 0:
        ids = list(b.counters)
    elif counter_id in b.direct_counters:
        raise P4RTError(INVALID, "a direct counter is read with DirectCounterEntry")
    elif counter_id not in b.counters:
        raise P4RTError(INVALID, f"unknown counter id {counter_id:#x}")
    else:
        ids = [counter_id]
    snap = []
    for cid in ids:
        counter = b.counters[cid]
        snap += [(cid, i, counter.read(i)) for i in _index_range(index, counter.size, counter.name)]
    return (
        wire.response_entity(wire.ENTITY_COUNTER, wire.counter_entry(cid, i, data))
        for cid, i, data in snap
    )


def _read_registers(b: Binding, req: p4runtime_pb2.RegisterEntry) -> Iterator[bytes]:
    if req.register_id == 0:
        ids = list(b.registers)
    elif req.register_id not in b.registers:
        raise P4RTError(INVALID, f"unknown register id {req.register_id:#x}")
    else:
        ids = [req.register_id]
    snap = []
    for rid in ids:
        register = b.registers[rid]
        snap += [(rid, i, register.read(i)) for i in _indexes(req, register.size, register.name)]
    return (wire.response_entity(wire.ENTITY_REGISTER, wire.register_entry(*cell)) for cell in snap)


def read_entity(b: Binding, entity: p4runtime_pb2.Entity) -> Iterator[bytes]:
    """The entities matching one read request, each serialized as a ReadResponse.entities
    element. Checks the request and snapshots the state now (raises P4RTError for a bad
    request); the bytes are produced as the iterator is consumed."""
    which = entity.WhichOneof("entity")
    if which == "table_entry":
        return _read_tables(b, entity.table_entry)
    if which == "counter_entry":
        return _read_counters(b, entity.counter_entry)
    if which == "direct_counter_entry":
        return _read_direct_counters(b, entity.direct_counter_entry)
    if which == "register_entry":
        return _read_registers(b, entity.register_entry)
    if which == "packet_replication_engine_entry":
        return _read_pre(entity.packet_replication_engine_entry)
    if which in _ABSENT_KINDS:
        return _read_absent(entity, which)
    if which is None:  # spec, Read RPC: "the entity oneof field must always be set"
        raise P4RTError(INVALID, "an empty Entity: set one of its entity fields")
    raise P4RTError(UNIMPLEMENTED, f"{which}: reading is not supported")
