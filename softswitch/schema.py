"""The P4Runtime objects the embedded pipeline serves, read from the committed P4Info.

p4src/hotagg.p4info.txtpb (generated from the program's description by scripts/gen_p4info.py,
and what p4c emits for p4src/) is the contract: this module turns it into the table, counter
and register descriptions that softswitch/state.py builds, so the embedded target serves
exactly that P4Info and the lists are written in one place. The pipeline's code
(softswitch/pipeline/) finds its objects by the names in contract/names.py; a P4Info that
lacks one fails when a Pipeline is built.

`check_p4info` compares a P4Info a client pushes with this description, so the server refuses
a pipeline it does not implement instead of misbehaving on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from contract import names
from contract.p4files import P4INFO_PATH
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


_KIND = {"exact": p4info_pb2.MatchField.EXACT, "lpm": p4info_pb2.MatchField.LPM}
_KIND_NAME = {v: k for k, v in _KIND.items()}


def _table(t: p4info_pb2.Table, actions: dict[int, p4info_pb2.Action], direct: dict) -> TableSchema:
    fields = []
    for m in t.match_fields:
        if m.match_type not in _KIND_NAME:
            kind = p4info_pb2.MatchField.MatchType.Name(m.match_type)
            raise SchemaError(f"table {t.preamble.name}: {kind} match is not implemented")
        fields.append(MatchField(m.name, m.bitwidth, _KIND_NAME[m.match_type]))
    specs, default_only = [], set()
    for ref in t.action_refs:
        a = actions[ref.id]
        if ref.scope == p4info_pb2.ActionRef.TABLE_ONLY:
            raise SchemaError(f"table {t.preamble.name}: TABLE_ONLY actions are not implemented")
        if ref.scope == p4info_pb2.ActionRef.DEFAULT_ONLY:
            default_only.add(a.preamble.name)
        specs.append(ActionSpec(a.preamble.name, tuple((p.name, p.bitwidth) for p in a.params)))
    if t.const_default_action_id:
        raise SchemaError(f"table {t.preamble.name}: const default actions are not implemented")
    init = t.initial_default_action
    default = (
        actions[init.action_id].preamble.name,
        tuple(int.from_bytes(arg.value, "big") for arg in init.arguments),
    )
    counter = direct.get(t.preamble.id)
    return TableSchema(
        t.preamble.name,
        t.size,
        tuple(fields),
        tuple(specs),
        frozenset(default_only),
        default,
        counter.preamble.name if counter is not None else None,
    )


def _width(r: p4info_pb2.Register) -> int:
    bs = r.type_spec.bitstring
    return bs.bit.bitwidth if bs.HasField("bit") else bs.int.bitwidth


def load(path: Path = P4INFO_PATH) -> p4info_pb2.P4Info:
    return text_format.Parse(path.read_text(), p4info_pb2.P4Info())


P4INFO = load()  # the committed P4Info: the pipeline this target implements
_ACTIONS = {a.preamble.id: a for a in P4INFO.actions}
_DIRECT = {d.direct_table_id: d for d in P4INFO.direct_counters}

TABLES: tuple[TableSchema, ...] = tuple(_table(t, _ACTIONS, _DIRECT) for t in P4INFO.tables)
COUNTERS: dict[str, int] = {c.preamble.name: c.size for c in P4INFO.counters}  # unit: both
REGISTERS: tuple[RegisterSchema, ...] = tuple(
    RegisterSchema(r.preamble.name, r.size, _width(r), r.preamble.name in SIGNED_REGISTERS)
    for r in P4INFO.registers
)
# controller header name -> ((metadata id, name, bitwidth), ...)
PACKET_METADATA: dict[str, tuple[tuple[int, str, int], ...]] = {
    m.preamble.name: tuple((f.id, f.name, f.bitwidth) for f in m.metadata)
    for m in P4INFO.controller_packet_metadata
}


def build_tables() -> dict[str, Table]:
    return {t.name: t.build() for t in TABLES}


def build_counters() -> dict[str, Counter]:
    return {name: Counter(name, size) for name, size in COUNTERS.items()}


def build_registers() -> dict[str, Register]:
    return {r.name: r.build() for r in REGISTERS}


def _compare_sets(what: str, ours: set[str], theirs: set[str]) -> list[str]:
    out = [f"{what} {n} is missing from the P4Info" for n in sorted(ours - theirs)]
    out += [f"{what} {n} in the P4Info is not implemented here" for n in sorted(theirs - ours)]
    return out


def check_p4info(p4info: p4info_pb2.P4Info) -> list[str]:
    """Human-readable differences between `p4info` and this pipeline (empty: it fits)."""
    errs: list[str] = []
    actions = {a.preamble.id: a for a in p4info.actions}
    tables = {t.preamble.name: t for t in p4info.tables}
    ours = {t.name: t for t in TABLES}
    errs += _compare_sets("table", set(ours), set(tables))
    direct = {d.direct_table_id: d for d in p4info.direct_counters}
    for name in sorted(set(ours) & set(tables)):
        s, t = ours[name], tables[name]
        if s.fields and t.size != s.size:
            errs.append(f"table {name}: size {t.size}, expected {s.size}")
        got = [(m.name, m.bitwidth, m.match_type) for m in t.match_fields]
        want = [(f.name, f.bitwidth, _KIND[f.kind]) for f in s.fields]
        if got != want:
            errs.append(f"table {name}: match fields {got}, expected {want}")
        refs = {}
        for ref in t.action_refs:
            a = actions.get(ref.id)
            if a is None:
                errs.append(f"table {name}: action id {ref.id:#x} is not in the P4Info")
            else:
                refs[a.preamble.name] = (a, ref.scope)
        spec = {a.name: a for a in s.actions}
        errs += _compare_sets(f"table {name}: action", set(spec), set(refs))
        for aname in sorted(set(spec) & set(refs)):
            a, scope = refs[aname]
            got_p = tuple((p.name, p.bitwidth) for p in a.params)
            if got_p != spec[aname].params:
                errs.append(f"action {aname}: params {got_p}, expected {spec[aname].params}")
            want_scope = (
                p4info_pb2.ActionRef.DEFAULT_ONLY
                if aname in s.default_only
                else p4info_pb2.ActionRef.TABLE_AND_DEFAULT
            )
            if scope != want_scope:
                errs.append(
                    f"table {name}: action {aname} has scope "
                    f"{p4info_pb2.ActionRef.Scope.Name(scope)}, expected "
                    f"{p4info_pb2.ActionRef.Scope.Name(want_scope)}"
                )
        d = direct.get(t.preamble.id)
        if s.direct_counter is None and d is not None:
            errs.append(f"table {name}: unexpected direct counter {d.preamble.name}")
        elif s.direct_counter is not None:
            if d is None:
                errs.append(f"table {name}: direct counter {s.direct_counter} is missing")
            elif d.preamble.name != s.direct_counter:
                errs.append(f"direct counter {d.preamble.name}, expected {s.direct_counter}")
            elif d.spec.unit != p4info_pb2.CounterSpec.BOTH:
                errs.append(f"direct counter {d.preamble.name}: unit is not packets and bytes")
    counters = {c.preamble.name: c for c in p4info.counters}
    errs += _compare_sets("counter", set(COUNTERS), set(counters))
    for name in sorted(set(COUNTERS) & set(counters)):
        c = counters[name]
        if c.size != COUNTERS[name]:
            errs.append(f"counter {name}: size {c.size}, expected {COUNTERS[name]}")
        if c.spec.unit != p4info_pb2.CounterSpec.BOTH:
            errs.append(f"counter {name}: unit is not packets and bytes")
    regs = {r.preamble.name: r for r in p4info.registers}
    ours_r = {r.name: r for r in REGISTERS}
    errs += _compare_sets("register", set(ours_r), set(regs))
    for name in sorted(set(ours_r) & set(regs)):
        r, s = regs[name], ours_r[name]
        bs = r.type_spec.bitstring
        width = bs.bit.bitwidth if bs.HasField("bit") else bs.int.bitwidth
        if (r.size, width) != (s.size, s.bitwidth):
            errs.append(
                f"register {name}: {r.size} x {width} bits, expected {s.size} x {s.bitwidth}"
            )
    meta = {m.preamble.name: m for m in p4info.controller_packet_metadata}
    errs += _compare_sets("controller header", set(PACKET_METADATA), set(meta))
    for name in sorted(set(PACKET_METADATA) & set(meta)):
        got_m = tuple((m.id, m.name, m.bitwidth) for m in meta[name].metadata)
        if got_m != PACKET_METADATA[name]:
            errs.append(f"controller header {name}: {got_m}, expected {PACKET_METADATA[name]}")
    return errs
