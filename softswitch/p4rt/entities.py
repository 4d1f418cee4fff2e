"""Write and Read of P4Runtime entities against the pipeline's state objects.

Follows PI/BMv2's rules where the spec leaves a choice (so one controller sees the same
answers from both targets): an omitted LPM field is a wildcard, an explicit prefix length 0
is rejected, INSERT/DELETE of the default entry are rejected, a default-entry MODIFY without
an action resets the initial default action, counter DELETE resets the cell to 0.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
from p4.v1 import p4data_pb2, p4runtime_pb2

from softswitch import state
from softswitch.p4rt.binding import Binding, TableBinding
from softswitch.p4rt.codec import decode, encode
from softswitch.p4rt.errors import P4RTError, from_state_error

INVALID = grpc.StatusCode.INVALID_ARGUMENT
UNIMPLEMENTED = grpc.StatusCode.UNIMPLEMENTED
Update = p4runtime_pb2.Update
Entity = p4runtime_pb2.Entity


def _state_call(fn: Any, *args: Any) -> Any:
    """Call a state method, turning its typed exceptions into P4RTError."""
    try:
        return fn(*args)
    except state.StateError as exc:
        raise from_state_error(exc) from exc


# ---------------------------------------------------------------- proto -> pipeline


def _table(b: Binding, table_id: int) -> TableBinding:
    tb = b.tables.get(table_id)
    if tb is None:
        raise P4RTError(INVALID, f"unknown table id {table_id:#x}")
    return tb


def _match(tb: TableBinding, entry: p4runtime_pb2.TableEntry) -> tuple:
    values: list[Any] = [None] * len(tb.table.fields)
    for fm in entry.match:
        f = tb.field_by_id.get(fm.field_id)
        if f is None:
            raise P4RTError(INVALID, f"{tb.name}: no match field with id {fm.field_id}")
        if values[f.position] is not None:
            raise P4RTError(INVALID, f"{tb.name}: match field {f.name} given twice")
        which = fm.WhichOneof("field_match_type")
        if which != f.kind:
            raise P4RTError(INVALID, f"{tb.name}: field {f.name} is {f.kind}, got {which}")
        what = f"{tb.name} field {f.name}"
        if f.kind == "exact":
            values[f.position] = decode(fm.exact.value, f.bitwidth, what)
            continue
        plen = fm.lpm.prefix_len
        if not 1 <= plen <= f.bitwidth:
            raise P4RTError(
                INVALID,
                f"{what}: prefix length {plen} not in 1..{f.bitwidth} "
                "(omit the field for a wildcard)",
            )
        value = decode(fm.lpm.value, f.bitwidth, what)
        if value & ((1 << (f.bitwidth - plen)) - 1):
            raise P4RTError(INVALID, f"{what}: bits set beyond the /{plen} prefix")
        values[f.position] = (value, plen)
    for f in tb.fields:
        if values[f.position] is None:
            if f.kind == "exact":
                raise P4RTError(INVALID, f"{tb.name}: exact match field {f.name} missing")
            values[f.position] = (0, 0)
    return tuple(values)


def _action(b: Binding, tb: TableBinding, ta: p4runtime_pb2.TableAction) -> tuple[str, tuple]:
    if ta.WhichOneof("type") != "action":
        raise P4RTError(UNIMPLEMENTED, f"{tb.name}: only direct actions are supported")
    action = ta.action
    ab = b.actions.get(action.action_id)
    if ab is None or ab.name not in tb.table.actions:
        raise P4RTError(INVALID, f"{tb.name}: action id {action.action_id:#x} not in this table")
    params: list[int | None] = [None] * len(ab.params)
    for p in action.params:
        i = ab.param_index.get(p.param_id)
        if i is None:
            raise P4RTError(INVALID, f"{ab.name}: no parameter with id {p.param_id}")
        if params[i] is not None:
            raise P4RTError(INVALID, f"{ab.name}: parameter id {p.param_id} given twice")
        params[i] = decode(p.value, ab.params[i][1], f"{ab.name} parameter {p.param_id}")
    if any(v is None for v in params):
        raise P4RTError(INVALID, f"{ab.name}: expects {len(params)} parameters")
    return ab.name, tuple(params)


def _write_table(b: Binding, kind: int, entry: p4runtime_pb2.TableEntry) -> None:
    tb = _table(b, entry.table_id)
    table = tb.table
    if entry.priority:
        raise P4RTError(INVALID, f"{tb.name}: priority must be 0 (no ternary/range fields)")
    if entry.is_default_action:
        if kind != Update.MODIFY:
            raise P4RTError(INVALID, f"{tb.name}: only MODIFY is allowed for the default entry")
        if entry.match:
            raise P4RTError(INVALID, f"{tb.name}: default entry with a match key")
        if entry.HasField("action"):
            _state_call(table.set_default, *_action(b, tb, entry.action))
        else:
            _state_call(table.reset_default)
        return
    match = _match(tb, entry)
    if kind == Update.DELETE:
        _state_call(table.delete, match)
        return
    if not entry.HasField("action"):
        raise P4RTError(INVALID, f"{tb.name}: 'action' must be set")
    name, params = _action(b, tb, entry.action)
    if kind == Update.INSERT:
        _state_call(table.insert, match, name, params)
    else:
        _state_call(table.modify, match, name, params)
    if entry.HasField("counter_data") and table.has_direct_counter:
        cd = entry.counter_data
        _state_call(table.set_direct_counter, match, cd.packet_count, cd.byte_count)


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
    if kind == Update.INSERT:
        raise P4RTError(INVALID, f"{counter.name}: INSERT is not allowed for counters")
    index = _index(ce, counter.name)
    if kind == Update.MODIFY:
        _state_call(counter.write, index, ce.data.packet_count, ce.data.byte_count)
    else:
        _state_call(counter.write, index, 0, 0)


def _write_direct_counter(b: Binding, kind: int, dce: p4runtime_pb2.DirectCounterEntry) -> None:
    tb = _table(b, dce.table_entry.table_id)
    if not tb.table.has_direct_counter:
        raise P4RTError(INVALID, f"{tb.name} has no direct counter")
    if kind == Update.INSERT:
        raise P4RTError(INVALID, f"{tb.name}: INSERT is not allowed for direct counters")
    if dce.table_entry.is_default_action:
        raise P4RTError(UNIMPLEMENTED, f"{tb.name}: the default entry has no direct counter")
    match = _match(tb, dce.table_entry)
    data = dce.data if kind == Update.MODIFY else p4runtime_pb2.CounterData()
    _state_call(tb.table.set_direct_counter, match, data.packet_count, data.byte_count)


def _write_register(b: Binding, kind: int, re: p4runtime_pb2.RegisterEntry) -> None:
    register = b.registers.get(re.register_id)
    if register is None:
        raise P4RTError(INVALID, f"unknown register id {re.register_id:#x}")
    if kind != Update.MODIFY:
        raise P4RTError(INVALID, f"{register.name}: only MODIFY is allowed for registers")
    index = _index(re, register.name)
    if re.data.WhichOneof("data") != "bitstring":
        raise P4RTError(INVALID, f"{register.name}: data must be a bitstring")
    value = decode(re.data.bitstring, register.bitwidth, register.name)
    _state_call(register.write, index, value)


def write_update(b: Binding, update: p4runtime_pb2.Update) -> None:
    """Apply one update; raises P4RTError with the update's canonical code."""
    kind = update.type
    if kind not in (Update.INSERT, Update.MODIFY, Update.DELETE):
        raise P4RTError(INVALID, "update type is not set")
    which = update.entity.WhichOneof("entity")
    if which == "table_entry":
        _write_table(b, kind, update.entity.table_entry)
    elif which == "counter_entry":
        _write_counter(b, kind, update.entity.counter_entry)
    elif which == "direct_counter_entry":
        _write_direct_counter(b, kind, update.entity.direct_counter_entry)
    elif which == "register_entry":
        _write_register(b, kind, update.entity.register_entry)
    elif which == "packet_replication_engine_entry":
        raise P4RTError(UNIMPLEMENTED, "the hotagg pipeline uses no multicast groups or clones")
    else:
        raise P4RTError(UNIMPLEMENTED, f"{which or 'empty entity'}: not supported")


# ---------------------------------------------------------------- pipeline -> proto


def _match_proto(tb: TableBinding, match: tuple, out: p4runtime_pb2.TableEntry) -> None:
    for f in tb.fields:
        v = match[f.position]
        if f.kind == "exact":
            out.match.add(field_id=f.id).exact.value = encode(v)
        elif v[1]:  # a /0 prefix is a wildcard: the field is omitted
            fm = out.match.add(field_id=f.id)
            fm.lpm.value = encode(v[0])
            fm.lpm.prefix_len = v[1]


def _action_proto(b: Binding, name: str, params: tuple, out: p4runtime_pb2.TableEntry) -> None:
    aid = b.action_ids.get(name)
    if aid is None:
        raise P4RTError(grpc.StatusCode.INTERNAL, f"action {name} is not in the P4Info")
    action = out.action.action
    action.action_id = aid
    for (pid, _), v in zip(b.actions[aid].params, params):
        action.params.add(param_id=pid, value=encode(v))


def _tables_for(b: Binding, te: p4runtime_pb2.TableEntry) -> list[TableBinding]:
    if te.table_id == 0:
        if te.match:
            raise P4RTError(INVALID, "a match key needs a table id")
        return list(b.tables.values())
    return [_table(b, te.table_id)]


def _entries(tb: TableBinding, te: p4runtime_pb2.TableEntry) -> list[Any]:
    if te.match:
        return [_state_call(tb.table.get, _match(tb, te))]
    return tb.table.entries()


def _read_tables(b: Binding, req: p4runtime_pb2.TableEntry) -> Iterator[Entity]:
    with_counters = req.HasField("counter_data")
    for tb in _tables_for(b, req):
        if req.is_default_action:
            ent = Entity()
            out = ent.table_entry
            out.table_id = tb.id
            out.is_default_action = True
            _action_proto(b, *tb.table.default(), out)
            yield ent
            continue
        for e in _entries(tb, req):
            ent = Entity()
            out = ent.table_entry
            out.table_id = tb.id
            _match_proto(tb, e.match, out)
            _action_proto(b, e.action, e.params, out)
            if with_counters and tb.table.has_direct_counter:
                out.counter_data.packet_count = e.packets
                out.counter_data.byte_count = e.bytes
            yield ent


def _read_direct_counters(b: Binding, req: p4runtime_pb2.DirectCounterEntry) -> Iterator[Entity]:
    te = req.table_entry
    if te.is_default_action:
        raise P4RTError(UNIMPLEMENTED, "the default entry has no direct counter")
    tables = [tb for tb in _tables_for(b, te) if tb.table.has_direct_counter]
    if te.table_id and not tables:
        raise P4RTError(INVALID, f"table id {te.table_id:#x} has no direct counter")
    for tb in tables:
        for e in _entries(tb, te):
            ent = Entity()
            out = ent.direct_counter_entry
            out.table_entry.table_id = tb.id
            _match_proto(tb, e.match, out.table_entry)
            out.data.packet_count = e.packets
            out.data.byte_count = e.bytes
            yield ent


def _indexes(msg: Any, size: int, what: str) -> range:
    if not msg.HasField("index"):
        return range(size)
    i = msg.index.index
    if i < 0:
        raise P4RTError(INVALID, f"{what}: negative index {i}")
    if i >= size:
        raise P4RTError(grpc.StatusCode.OUT_OF_RANGE, f"{what}: index {i} >= size {size}")
    return range(i, i + 1)


def _read_counters(b: Binding, req: p4runtime_pb2.CounterEntry) -> Iterator[Entity]:
    if req.counter_id == 0:
        ids = list(b.counters)
    elif req.counter_id in b.direct_counters:
        raise P4RTError(INVALID, "a direct counter is read with DirectCounterEntry")
    elif req.counter_id not in b.counters:
        raise P4RTError(INVALID, f"unknown counter id {req.counter_id:#x}")
    else:
        ids = [req.counter_id]
    for cid in ids:
        counter = b.counters[cid]
        for i in _indexes(req, counter.size, counter.name):
            packets, nbytes = counter.read(i)
            ent = Entity()
            ce = ent.counter_entry
            ce.counter_id = cid
            ce.index.index = i
            ce.data.packet_count = packets
            ce.data.byte_count = nbytes
            yield ent


def _read_registers(b: Binding, req: p4runtime_pb2.RegisterEntry) -> Iterator[Entity]:
    if req.register_id == 0:
        ids = list(b.registers)
    elif req.register_id not in b.registers:
        raise P4RTError(INVALID, f"unknown register id {req.register_id:#x}")
    else:
        ids = [req.register_id]
    for rid in ids:
        register = b.registers[rid]
        for i in _indexes(req, register.size, register.name):
            ent = Entity()
            re = ent.register_entry
            re.register_id = rid
            re.index.index = i
            re.data.CopyFrom(p4data_pb2.P4Data(bitstring=encode(register.read(i))))
            yield ent


def read_entity(b: Binding, entity: p4runtime_pb2.Entity) -> Iterator[Entity]:
    """The entities matching one read request; raises P4RTError for a bad request."""
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
    raise P4RTError(UNIMPLEMENTED, f"{which or 'empty entity'}: reading is not supported")
