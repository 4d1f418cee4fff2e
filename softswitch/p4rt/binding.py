"""Binds the ids of a pushed P4Info to the pipeline's objects (looked up by P4Info name).

The pipeline knows its tables, counters and registers by fully qualified P4Info name; the
controller speaks in P4Info ids. A binding is built once per SetForwardingPipelineConfig
and is read-only afterwards, so gRPC threads share it without locking; only its
EntryMetadata changes, under the server's lock, as table writes do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from p4.config.v1 import p4info_pb2

from p4rt.p4info import P4InfoIndex
from p4rt.wire import TableEncoder


@dataclass
class FieldBinding:
    id: int
    name: str
    bitwidth: int
    kind: str  # "exact" | "lpm"
    position: int  # index into the pipeline's match tuple


@dataclass
class ActionBinding:
    id: int
    name: str
    # (param id, bitwidth) in the order of the pipeline's ActionSpec.params
    params: list[tuple[int, int]]
    param_index: dict[int, int]  # param id -> position


@dataclass
class TableBinding:
    id: int
    name: str
    table: Any  # softswitch.state.Table
    fields: list[FieldBinding]  # P4Info order
    field_by_id: dict[int, FieldBinding]
    direct_counter_id: int = 0
    encoder: TableEncoder = field(init=False)  # serializes read results; set by bind()


class EntryMetadata:
    """TableEntry.metadata of the entries written with one, by table name and match (None:
    the default entry). The bytes are the controller's, opaque to the switch, so they live
    here beside the pipeline's tables, not in them, as in PI (its "table info store")."""

    def __init__(self) -> None:
        self._by_table: dict[str, dict[Any, bytes]] = {}

    def set(self, table: str, key: Any, metadata: bytes) -> None:
        """Keep `metadata` for an entry (none: forget what it had)."""
        if metadata:
            self._by_table.setdefault(table, {})[key] = metadata
        else:
            self.drop(table, key)

    def drop(self, table: str, key: Any) -> None:
        entries = self._by_table.get(table)
        if entries:
            entries.pop(key, None)

    def of(self, table: str) -> dict[Any, bytes]:
        """Key -> metadata of one table's entries that have some: a copy, so that a read
        encoded after the server's lock is released shows the state it snapshot."""
        return dict(self._by_table.get(table) or {})


@dataclass
class Binding:
    index: P4InfoIndex
    tables: dict[int, TableBinding] = field(default_factory=dict)
    actions: dict[int, ActionBinding] = field(default_factory=dict)
    action_ids: dict[str, int] = field(default_factory=dict)
    counters: dict[int, Any] = field(default_factory=dict)  # id -> state.Counter
    direct_counters: dict[int, int] = field(default_factory=dict)  # id -> table id
    registers: dict[int, Any] = field(default_factory=dict)  # id -> state.Register
    packet_in: list[tuple[int, int]] = field(default_factory=list)  # (id, bitwidth)
    packet_out: list[tuple[int, int]] = field(default_factory=list)
    # Lives as long as the tables' contents: a config set without emptying them passes it on.
    metadata: EntryMetadata = field(default_factory=EntryMetadata)


class BindingError(ValueError):
    """The P4Info names objects the pipeline does not have; `problems` lists them."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def _bind_action(action: p4info_pb2.Action, spec: Any, problems: list[str]) -> ActionBinding:
    by_name = {p.name: p for p in P4InfoIndex.params(action)}
    params: list[tuple[int, int]] = []
    for pname, width in spec.params:
        p = by_name.get(pname)
        if p is None:
            problems.append(f"action {action.preamble.name}: no parameter {pname!r}")
            continue
        params.append((p.id, width))
    if len(by_name) != len(spec.params):
        problems.append(
            f"action {action.preamble.name}: {len(by_name)} parameters in the P4Info, "
            f"{len(spec.params)} in the pipeline"
        )
    return ActionBinding(
        id=action.preamble.id,
        name=action.preamble.name,
        params=params,
        param_index={pid: i for i, (pid, _) in enumerate(params)},
    )


def _bind_table(t: p4info_pb2.Table, table: Any, problems: list[str]) -> TableBinding:
    positions = {f.name: i for i, f in enumerate(table.fields)}
    fields = []
    p4_fields = P4InfoIndex.match_fields(t)
    for i, mf in enumerate(p4_fields):
        pos = positions.get(mf.name, i)
        if mf.kind not in ("exact", "lpm"):
            problems.append(f"table {t.preamble.name}: match kind of {mf.name!r} not supported")
            continue
        if pos >= len(table.fields) or table.fields[pos].kind != mf.kind:
            problems.append(f"table {t.preamble.name}: field {mf.name!r} does not fit")
            continue
        fields.append(FieldBinding(mf.id, mf.name, table.fields[pos].bitwidth, mf.kind, pos))
    if len(p4_fields) != len(table.fields):
        problems.append(f"table {t.preamble.name}: wrong number of match fields")
    return TableBinding(
        id=t.preamble.id,
        name=t.preamble.name,
        table=table,
        fields=fields,
        field_by_id={f.id: f for f in fields},
    )


def _encoder(tb: TableBinding, b: Binding) -> TableEncoder:
    # every action the P4Info knows, by name; an entry whose action is missing is an
    # internal error, reported when it is read
    actions = {a.name: (aid, [pid for pid, _ in a.params]) for aid, a in b.actions.items()}
    fields = [(f.position, f.kind, f.id) for f in tb.fields]
    return TableEncoder(tb.id, fields, actions)


def bind(index: P4InfoIndex, pipeline: Any) -> Binding:
    """Binding of a P4Info to `pipeline`; raises BindingError listing what does not fit."""
    problems: list[str] = []
    b = Binding(index)
    p4info = index.message
    for t in p4info.tables:
        table = pipeline.tables.get(t.preamble.name)
        if table is None:
            problems.append(f"table {t.preamble.name} is not in the pipeline")
            continue
        b.tables[t.preamble.id] = _bind_table(t, table, problems)
        for ref, (a, _) in zip(t.action_refs, index.action_refs(t)):
            if not isinstance(a, p4info_pb2.Action):
                problems.append(f"table {t.preamble.name}: unknown action id {ref.id:#x}")
            elif a.preamble.name not in table.actions:
                problems.append(f"table {t.preamble.name}: action {a.preamble.name} unknown")
            elif ref.id not in b.actions:
                b.actions[ref.id] = _bind_action(a, table.actions[a.preamble.name], problems)
    b.action_ids = {a.name: aid for aid, a in b.actions.items()}
    for tb in b.tables.values():
        tb.encoder = _encoder(tb, b)
    for c in p4info.counters:
        counter = pipeline.counters.get(c.preamble.name)
        if counter is None:
            problems.append(f"counter {c.preamble.name} is not in the pipeline")
        else:
            b.counters[c.preamble.id] = counter
    for dc in p4info.direct_counters:
        owner = b.tables.get(dc.direct_table_id)
        if owner is None or not owner.table.has_direct_counter:
            problems.append(f"direct counter {dc.preamble.name}: table has no direct counter")
        else:
            b.direct_counters[dc.preamble.id] = owner.id
            owner.direct_counter_id = dc.preamble.id
    for r in p4info.registers:
        register = pipeline.registers.get(r.preamble.name)
        if register is None:
            problems.append(f"register {r.preamble.name} is not in the pipeline")
        else:
            b.registers[r.preamble.id] = register
    for cpm in p4info.controller_packet_metadata:
        fields = [(m.id, m.bitwidth) for m in index.metadata(cpm)]
        if cpm.preamble.name == "packet_in":
            b.packet_in = fields
        elif cpm.preamble.name == "packet_out":
            b.packet_out = fields
    if problems:
        raise BindingError(problems)
    return b
