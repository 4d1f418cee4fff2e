"""Write and Read of P4Runtime entities against the pipeline's state objects.

Follows PI/BMv2's rules where the spec leaves a choice (so one controller sees the same
answers from both targets): an omitted LPM field is a wildcard, an explicit prefix length 0
is rejected, INSERT/DELETE of the default entry are rejected, a default-entry MODIFY without
an action resets the initial default action, counter DELETE resets the cell to 0.

Writes take table entries as p4rt.wire.RawEntry (from the fast wire parser or from a
protobuf message). Reads run in two steps: `read_entity` checks the request and takes a snapshot of
the state (call it under the server's lock); the snapshot then yields each entity already
serialized (p4rt/wire.py), lazily, so a large read is encoded while it streams.
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


def _write_table(b: Binding, kind: int, entry: RawEntry) -> None:
    tb = _table(b, entry.table_id)
    table = tb.table
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
        return
    match = _match(tb, entry)
    if kind == _DELETE:
        _state_call(table.delete, match)
        return
    if entry.action is None:
        raise P4RTError(INVALID, f"{tb.name}: 'action' must be set")
    name, params = _action(b, tb, entry.action)
    if kind == _INSERT:
        _state_call(table.insert, match, name, params)
    else:
        _state_call(table.modify, match, name, params)
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
        raise P4RTError(UNIMPLEMENTED, "the hotagg pipeline uses no multicast groups or clones")
    else:
        raise P4RTError(UNIMPLEMENTED, f"{which or 'empty entity'}: not supported")


# ---------------------------------------------------------------- pipeline -> bytes


def _tables_for(b: Binding, te: p4runtime_pb2.TableEntry) -> list[TableBinding]:
    if te.table_id == 0:
        if te.match:
            raise P4RTError(INVALID, "a match key needs a table id")
        return list(b.tables.values())
    return [_table(b, te.table_id)]


def _entries(tb: TableBinding, te: p4runtime_pb2.TableEntry) -> list[state.TableEntry]:
    if te.match:
        return [_state_call(tb.table.get, _match(tb, raw_entry(te)))]
    return tb.table.entries()


def _check_actions(tb: TableBinding, names: Iterable[str]) -> None:
    missing = set(names) - tb.encoder.actions.keys()
    if missing:
        name = min(missing)
        raise P4RTError(grpc.StatusCode.INTERNAL, f"action {name} is not in the P4Info")


def _read_tables(b: Binding, req: p4runtime_pb2.TableEntry) -> Iterator[bytes]:
    with_counters = req.HasField("counter_data")
    out: list[Iterator[bytes]] = []
    for tb in _tables_for(b, req):
        enc = tb.encoder
        if req.is_default_action:
            name, params = tb.table.default()
            _check_actions(tb, (name,))
            out.append(iter((wire.response_entity(TABLE, enc.default_entry(name, params)),)))
            continue
        entries = _entries(tb, req)
        _check_actions(tb, {e.action for e in entries})
        out.append(_encode(enc, entries, with_counters and tb.table.has_direct_counter))
    return itertools.chain.from_iterable(out)


def _encode(enc: wire.TableEncoder, entries: list[state.TableEntry], counters: bool) -> Iterator:
    frame = wire.response_entity
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
    snap = [(tb.encoder, _entries(tb, te)) for tb in tables]
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
        raise P4RTError(UNIMPLEMENTED, "the hotagg pipeline uses no multicast groups or clones")
    if which is None:  # spec, Read RPC: "the entity oneof field must always be set"
        raise P4RTError(INVALID, "an empty Entity: set one of its entity fields")
    raise P4RTError(UNIMPLEMENTED, f"{which}: reading is not supported")
