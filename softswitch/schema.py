"""The P4Runtime objects the embedded pipeline serves, read from the committed P4Info.

p4src/hotagg.p4info.txtpb (generated from the program's description by scripts/gen_p4info.py,
and what p4c emits for p4src/) is the contract: this module turns it into the table, counter
and register descriptions that softswitch/state.py builds, so the embedded target serves
exactly that P4Info and the lists are written in one place. The pipeline's code
(softswitch/pipeline/) finds its objects by the names in contract/names.py; a P4Info that
lacks one fails when a Pipeline is built.

`check_p4info` compares a P4Info a client pushes with the committed one (p4rt/p4info.py), so
the server refuses a pipeline it does not implement instead of misbehaving on it.
"""

from __future__ import annotations

from dataclasses import dataclass

from p4.config.v1 import p4info_pb2

from contract import names
from contract.p4files import P4INFO_PATH
from p4rt.p4info import P4InfoIndex, bitwidth, differences, explain
from softswitch.state import ActionSpec, Counter, MatchField, Register, Table

# Registers whose cells hold two's complement int32 values (sums and cached parameters). Storage
# only: P4Runtime and v1model see bit<32> (p4src/include/types.p4, value_t).
SIGNED_REGISTERS = frozenset({names.REGISTER_AGG_VALUE, names.REGISTER_CACHE_VALUE})


class SchemaError(ValueError):
    """The P4Info uses something the embedded pipeline does not implement."""


@dataclass(frozen=True)
class TableSchema:
    name: str
    size: int
    fields: tuple[MatchField, ...]
    actions: tuple[ActionSpec, ...]
    default_only: frozenset[str]
    initial_default: tuple[str, tuple[int, ...]]
    direct_counter: str | None = None

    def build(self) -> Table:
        return Table(
            self.name,
            self.size,
            self.fields,
            self.actions,
            self.default_only,
            self.initial_default,
            has_direct_counter=self.direct_counter is not None,
        )


@dataclass(frozen=True)
class RegisterSchema:
    name: str
    size: int
    bitwidth: int
    signed: bool = False  # storage only: values are two's complement int32 on the wire

    def build(self) -> Register:
        return Register(self.name, self.size, self.bitwidth, self.signed)


def _table(index: P4InfoIndex, t: p4info_pb2.Table) -> TableSchema:
    fields = []
    for f in index.match_fields(t):
        if f.kind not in ("exact", "lpm"):
            raise SchemaError(f"table {t.preamble.name}: {f.kind} match is not implemented")
        fields.append(MatchField(f.name, f.bitwidth, f.kind))
    specs, default_only = [], set()
    for a, scope in index.action_refs(t):
        if a is None:
            raise SchemaError(f"table {t.preamble.name}: an action is not in the P4Info")
        if scope == p4info_pb2.ActionRef.TABLE_ONLY:
            raise SchemaError(f"table {t.preamble.name}: TABLE_ONLY actions are not implemented")
        if scope == p4info_pb2.ActionRef.DEFAULT_ONLY:
            default_only.add(a.preamble.name)
        params = tuple((p.name, p.bitwidth) for p in index.params(a))
        specs.append(ActionSpec(a.preamble.name, params))
    if t.const_default_action_id:
        raise SchemaError(f"table {t.preamble.name}: const default actions are not implemented")
    init = t.initial_default_action
    initial = index.by_id(init.action_id)
    if initial is None:
        raise SchemaError(
            f"table {t.preamble.name}: its initial default action is not in the P4Info"
        )
    default = (
        initial.preamble.name,
        tuple(int.from_bytes(arg.value, "big") for arg in init.arguments),
    )
    counter = index.direct_counter_of(t.preamble.id)
    return TableSchema(
        t.preamble.name,
        t.size,
        tuple(fields),
        tuple(specs),
        frozenset(default_only),
        default,
        counter.preamble.name if counter is not None else None,
    )


INDEX = P4InfoIndex.load(P4INFO_PATH)  # the committed P4Info: the pipeline this target implements
P4INFO = INDEX.message

TABLES: tuple[TableSchema, ...] = tuple(_table(INDEX, t) for t in P4INFO.tables)
COUNTERS: dict[str, int] = {c.preamble.name: c.size for c in P4INFO.counters}  # unit: both
REGISTERS: tuple[RegisterSchema, ...] = tuple(
    RegisterSchema(
        r.preamble.name, r.size, bitwidth(r.type_spec), r.preamble.name in SIGNED_REGISTERS
    )
    for r in P4INFO.registers
)
# controller header name -> ((metadata id, name, bitwidth), ...)
PACKET_METADATA: dict[str, tuple[tuple[int, str, int], ...]] = {
    m.preamble.name: tuple((f.id, f.name, f.bitwidth) for f in INDEX.metadata(m))
    for m in P4INFO.controller_packet_metadata
}


def build_tables() -> dict[str, Table]:
    return {t.name: t.build() for t in TABLES}


def build_counters() -> dict[str, Counter]:
    return {name: Counter(name, size) for name, size in COUNTERS.items()}


def build_registers() -> dict[str, Register]:
    return {r.name: r.build() for r in REGISTERS}


# What a pushed P4Info must share with ours (by name: ids are the pusher's to choose; direct
# counters are compared as part of their tables, digests are served as pushed).
_CHECKED_KINDS = ("tables", "actions", "counters", "registers", "controller_packet_metadata")


def check_p4info(p4info: p4info_pb2.P4Info) -> list[str]:
    """Human-readable differences between `p4info` and this pipeline (empty: it fits)."""
    found = differences(INDEX, P4InfoIndex(p4info), _CHECKED_KINDS, ids=False)
    return [explain(d, ours="in the embedded pipeline", theirs="in the P4Info") for d in found]
