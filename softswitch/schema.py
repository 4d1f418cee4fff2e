"""The embedded pipeline's own description of its P4Runtime objects (docs/design.md section 2).

Names are P4Info full names; `check_p4info` compares a P4Info (normally the committed
p4src/hotagg.p4info.txtpb) with this description so the server refuses a pipeline it does not
implement instead of misbehaving on it.
"""

from __future__ import annotations

from dataclasses import dataclass

from p4.config.v1 import p4info_pb2

from contract.constants import (
    DEDUP_SIZE,
    HOT_KEYS_SIZE,
    IPV4_LPM_SIZE,
    MAX_ENTRIES,
    MAX_JOBS,
    NUM_SLOTS,
    STATS_SIZE,
)
from softswitch.state import ActionSpec, Counter, MatchField, Register, Table

P = "HotaggIngress."


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


def _hot_keys(i: int) -> TableSchema:
    n = f"{P}lookup{i}."
    return TableSchema(
        name=f"{n}hot_keys",
        size=HOT_KEYS_SIZE,
        fields=(MatchField("job_id", 16, "exact"), MatchField("key", 64, "exact")),
        actions=(ActionSpec(f"{n}set_slot", (("offset", 32),)), ActionSpec(f"{n}miss", ())),
        default_only=frozenset({f"{n}miss"}),
        initial_default=(f"{n}miss", ()),
        direct_counter=f"{n}hits",
    )


TABLES: tuple[TableSchema, ...] = (
    TableSchema(
        name=f"{P}ipv4_lpm",
        size=IPV4_LPM_SIZE,
        fields=(MatchField("dst_addr", 32, "lpm"),),
        actions=(
            ActionSpec(f"{P}ipv4_forward", (("dst_mac", 48), ("port", 9))),
            ActionSpec(f"{P}send_to_cpu", ()),
            ActionSpec(f"{P}drop", ()),
        ),
        default_only=frozenset(),
        initial_default=(f"{P}drop", ()),
    ),
    TableSchema(
        name=f"{P}jobs",
        size=MAX_JOBS,
        fields=(MatchField("job_id", 16, "exact"),),
        actions=(
            ActionSpec(f"{P}set_job", (("job_index", 8), ("slot_base", 32), ("slot_count", 32))),
            ActionSpec(f"{P}unknown_job", ()),
        ),
        default_only=frozenset({f"{P}unknown_job"}),
        initial_default=(f"{P}unknown_job", ()),
    ),
    TableSchema(
        name=f"{P}drop_sim",
        size=1,  # keyless: holds no entries; P4Info sizes of keyless tables are not compared
        fields=(),
        actions=(ActionSpec(f"{P}set_drop_rate", (("rate", 32),)),),
        default_only=frozenset(),
        initial_default=(f"{P}set_drop_rate", (0,)),
    ),
    *(_hot_keys(i) for i in range(MAX_ENTRIES)),
)

COUNTERS: dict[str, int] = {f"{P}stats": STATS_SIZE}  # unit: packets and bytes

REGISTERS: tuple[RegisterSchema, ...] = (
    RegisterSchema(f"{P}dedup_seq", DEDUP_SIZE, 32),
    RegisterSchema(f"{P}dedup_mask", DEDUP_SIZE, 8),
    RegisterSchema(f"{P}agg_value", 2 * NUM_SLOTS, 32, signed=True),
    RegisterSchema(f"{P}agg_iter", 2 * NUM_SLOTS, 32),
    RegisterSchema(f"{P}agg_key", 2 * NUM_SLOTS, 64),
    RegisterSchema(f"{P}cache_value", NUM_SLOTS, 32, signed=True),
    RegisterSchema(f"{P}cache_iter", NUM_SLOTS, 32),
    RegisterSchema(f"{P}cache_key", NUM_SLOTS, 64),
)

# controller header name -> ((metadata id, name, bitwidth), ...)
PACKET_METADATA: dict[str, tuple[tuple[int, str, int], ...]] = {
    "packet_in": ((1, "ingress_port", 9), (2, "_pad", 7)),
    "packet_out": ((1, "egress_port", 9), (2, "_pad", 7)),
}


def build_tables() -> dict[str, Table]:
    return {t.name: t.build() for t in TABLES}


def build_counters() -> dict[str, Counter]:
    return {name: Counter(name, size) for name, size in COUNTERS.items()}


def build_registers() -> dict[str, Register]:
    return {r.name: r.build() for r in REGISTERS}


_KIND = {"exact": p4info_pb2.MatchField.EXACT, "lpm": p4info_pb2.MatchField.LPM}


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
