"""Unit tests of softswitch/state.py (tables, counters, registers) and softswitch/schema.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from softswitch import schema
from softswitch.state import (
    ActionSpec,
    BadAction,
    BadIndex,
    BadMatch,
    BadValue,
    Counter,
    EntryExists,
    EntryNotFound,
    MatchField,
    Register,
    StateError,
    Table,
    TableFull,
)

P = "HotaggIngress."
FWD, CPU, DROP = P + "ipv4_forward", P + "send_to_cpu", P + "drop"
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def tables() -> dict[str, Table]:
    return schema.build_tables()


def test_insert_get_modify_delete(tables):
    jobs = tables[P + "jobs"]
    jobs.insert((7,), P + "set_job", (1, 100, 50))
    e = jobs.get((7,))
    assert (e.match, e.action, e.params, e.packets, e.bytes) == (
        (7,),
        P + "set_job",
        (1, 100, 50),
        0,
        0,
    )
    assert jobs.lookup((7,)) == (P + "set_job", (1, 100, 50), True)
    jobs.modify((7,), P + "set_job", (2, 0, 10))
    assert jobs.get((7,)).params == (2, 0, 10)
    assert len(jobs) == 1
    jobs.delete((7,))
    assert len(jobs) == 0
    assert jobs.lookup((7,)) == (P + "unknown_job", (), False)


def test_entry_exists_and_not_found(tables):
    jobs = tables[P + "jobs"]
    jobs.insert((1,), P + "set_job", (0, 0, 1))
    with pytest.raises(EntryExists, match="already has an entry"):
        jobs.insert((1,), P + "set_job", (0, 0, 1))
    for op in (lambda: jobs.modify((2,), P + "set_job", (0, 0, 1)), lambda: jobs.delete((2,))):
        with pytest.raises(EntryNotFound):
            op()
    with pytest.raises(EntryNotFound):
        jobs.get((2,))
    assert issubclass(EntryNotFound, StateError)


def test_table_full(tables):
    jobs = tables[P + "jobs"]
    for j in range(jobs.size):
        jobs.insert((j,), P + "set_job", (j, 0, 1))
    with pytest.raises(TableFull, match="16 entries"):
        jobs.insert((99,), P + "set_job", (0, 0, 1))
    jobs.modify((0,), P + "set_job", (0, 0, 2))  # a full table can still be modified


@pytest.mark.parametrize(
    "match",
    [
        (),  # too few fields
        (1, 2),  # too many
        (1 << 16,),  # wider than 16 bits
        (-1,),
        ((1, 16),),  # lpm value for an exact field
        ("1",),
        {"job": 1},  # unknown field name
    ],
)
def test_bad_match_exact(tables, match):
    with pytest.raises(BadMatch):
        tables[P + "jobs"].insert(match, P + "set_job", (0, 0, 1))


@pytest.mark.parametrize(
    "match",
    [((0x0A000000, 33),), ((0x0A000001, 24),), ((1 << 32, 8),), (0x0A000000,), ((1, -1),)],
)
def test_bad_match_lpm(tables, match):
    with pytest.raises(BadMatch):
        tables[P + "ipv4_lpm"].insert(match, DROP, ())


def test_match_by_field_name(tables):
    hot = tables[P + "lookup3.hot_keys"]
    hot.insert({"job_id": 1, "key": 1 << 63}, P + "lookup3.set_slot", (5,))
    assert hot.get((1, 1 << 63)).params == (5,)
    with pytest.raises(BadMatch, match="missing"):
        hot.get({"key": 1})
    lpm = tables[P + "ipv4_lpm"]
    lpm.insert({}, DROP, ())  # an omitted lpm field is the /0 wildcard
    assert lpm.get(((0, 0),)).action == DROP


@pytest.mark.parametrize(
    "action,params,msg",
    [
        (P + "jobs", (), "not an action"),
        (P + "unknown_job", (), "default-only"),
        (P + "set_job", (0, 0), "takes 3"),
        (P + "set_job", (256, 0, 0), "8 bits"),
        (P + "set_job", (0, 1 << 32, 0), "32 bits"),
        (P + "set_job", (0, -1, 0), "does not fit"),
    ],
)
def test_bad_action(tables, action, params, msg):
    with pytest.raises(BadAction, match=msg):
        tables[P + "jobs"].insert((1,), action, params)
    assert len(tables[P + "jobs"]) == 0


def test_defaults(tables):
    lpm = tables[P + "ipv4_lpm"]
    assert lpm.default() == (DROP, ())
    lpm.set_default(CPU, ())
    assert lpm.lookup((0x01020304,)) == (CPU, (), False)
    with pytest.raises(BadAction):
        lpm.set_default(FWD, (1 << 48, 1))
    assert lpm.default() == (CPU, ())  # a failed write changes nothing
    lpm.reset_default()
    assert lpm.default() == (DROP, ())
    jobs = tables[P + "jobs"]
    jobs.set_default(P + "unknown_job", ())
    t = Table(
        "t",
        4,
        [MatchField("k", 8, "exact")],
        [ActionSpec("a", ()), ActionSpec("b", ())],
        initial_default=("b", ()),
        table_only=["a"],
    )
    with pytest.raises(BadAction, match="cannot be the default"):
        t.set_default("a", ())


def test_keyless_table_takes_no_entries(tables):
    drop_sim = tables[P + "drop_sim"]
    assert drop_sim.default() == (P + "set_drop_rate", (0,))
    with pytest.raises(BadMatch, match="no key"):
        drop_sim.insert((), P + "set_drop_rate", (5,))
    drop_sim.set_default(P + "set_drop_rate", (65536,))
    assert drop_sim.lookup(()) == (P + "set_drop_rate", (65536,), False)


def test_lpm_longest_prefix(tables):
    lpm = tables[P + "ipv4_lpm"]
    lpm.insert(((0, 0),), FWD, (0xA, 9))
    lpm.insert(((0x0A000000, 8),), FWD, (0xB, 1))
    lpm.insert(((0x0A010000, 16),), FWD, (0xC, 2))
    lpm.insert(((0x0A010200, 24),), FWD, (0xD, 3))
    lpm.insert(((0x0A010203, 32),), FWD, (0xE, 4))
    assert lpm.lookup((0x0A010203,))[1] == (0xE, 4)
    assert lpm.lookup((0x0A010204,))[1] == (0xD, 3)
    assert lpm.lookup((0x0A01FF04,))[1] == (0xC, 2)
    assert lpm.lookup((0x0AFF0000,))[1] == (0xB, 1)
    assert lpm.lookup((0x0B000000,))[1] == (0xA, 9)
    lpm.delete(((0x0A010200, 24),))
    assert lpm.lookup((0x0A010204,))[1] == (0xC, 2)
    lpm.delete(((0, 0),))
    assert lpm.lookup((0x0B000000,)) == (DROP, (), False)
    assert {e.match for e in lpm.entries()} == {
        ((0x0A000000, 8),),
        ((0x0A010000, 16),),
        ((0x0A010203, 32),),
    }


def test_direct_counters_and_clear(tables):
    hot = tables[P + "lookup0.hot_keys"]
    hot.insert((1, 5), P + "lookup0.set_slot", (3,))
    hot.set_direct_counter((1, 5), 10, 1000)
    hot.modify((1, 5), P + "lookup0.set_slot", (4,))
    e = hot.get((1, 5))
    assert (e.params, e.packets, e.bytes) == ((4,), 10, 1000)  # modify keeps the counts
    with pytest.raises(EntryNotFound):
        hot.set_direct_counter((1, 6), 0, 0)
    with pytest.raises(BadValue):
        hot.set_direct_counter((1, 5), -1, 0)
    with pytest.raises(StateError, match="no direct counter"):
        tables[P + "jobs"].set_direct_counter((1,), 0, 0)
    lpm = tables[P + "ipv4_lpm"]
    lpm.insert(((0x0A000000, 8),), DROP, ())
    lpm.set_default(CPU, ())
    for t in (hot, lpm):
        t.clear()
        assert len(t) == 0 and t.entries() == []
    assert lpm.default() == (DROP, ())
    assert lpm.lookup((0x0A000001,)) == (DROP, (), False)


def test_gen_changes_after_every_change_a_lookup_can_see(tables):
    """Table._gen: the pipeline's route cache is valid while it stays the same."""
    lpm = tables[P + "ipv4_lpm"]
    seen = [lpm._gen]

    def changed() -> None:
        assert lpm._gen != seen[-1]
        seen.append(lpm._gen)

    lpm.insert(((0x0A000001, 32),), FWD, (1, 1))
    changed()
    lpm.modify(((0x0A000001, 32),), FWD, (2, 2))
    changed()
    lpm.set_default(CPU, ())
    changed()
    lpm.reset_default()
    changed()
    lpm.delete(((0x0A000001, 32),))
    changed()
    lpm.insert(((0x0A000001, 32),), FWD, (1, 1))
    lpm.clear()
    assert lpm._gen != seen[-1] and len(lpm) == 0
    seen.append(lpm._gen)
    with pytest.raises(EntryNotFound):
        lpm.delete(((0x0A000001, 32),))
    lpm.lookup((0x0A000001,))
    assert lpm._gen == seen[-1]  # failed writes and lookups change nothing


def test_counter():
    c = Counter("c", 4)
    c.count(1, 100)
    c.count(1, 50)
    assert c.read(1) == (2, 150) and c.read(0) == (0, 0)
    c.write(3, 7, 8)
    assert c.read(3) == (7, 8)
    for bad in (4, -1, "0", True):
        with pytest.raises(BadIndex, match="out of range"):
            c.read(bad)
    with pytest.raises(BadValue):
        c.write(0, -1, 0)
    c.clear()
    assert [c.read(i) for i in range(4)] == [(0, 0)] * 4


def test_register():
    r = Register("r", 3, 8)
    r.write(2, 255)
    assert r.read(2) == 255
    with pytest.raises(BadValue, match="8 bits"):
        r.write(0, 256)
    with pytest.raises(BadIndex):
        r.write(3, 0)
    s = Register("s", 2, 32, signed=True)
    s.write(0, 0xFFFFFFFF)
    assert s.values[0] == -1 and s.read(0) == 0xFFFFFFFF  # stored signed, shown unsigned
    s.values[1] = -(1 << 31)
    assert s.read(1) == 1 << 31
    values = s.values
    s.clear()
    assert values is s.values and values == [0, 0]  # cleared in place for the fast path


def test_schema_objects():
    tables = schema.build_tables()
    # ..., the lookups, admission, sketch_config, service_address and chain_next
    assert len(tables) == 3 + 8 + 2 + 1 + 2
    assert tables[P + "sketch_config"].default() == (P + "set_sketch", (0, 0))  # off
    assert tables[P + "service_address"].default() == (P + "set_service_address", (0,))
    assert tables[P + "chain_next"].default() == (P + "set_chain_next", (0,))
    assert tables[P + "lookup7.hot_keys"].has_direct_counter
    workers, ps = tables[P + "worker_admission"], tables[P + "ps_admission"]
    assert [(f.name, f.bitwidth) for f in workers.fields] == [
        ("job_id", 16), ("worker_id", 16), ("ingress_port", 9), ("src_addr", 32)
    ]  # fmt: skip
    assert [(f.name, f.bitwidth) for f in ps.fields] == [
        ("job_id", 16), ("ingress_port", 9), ("src_addr", 32)
    ]  # fmt: skip
    assert workers.default() == ps.default() == (P + "refuse", ())  # default deny
    assert workers.default_only == ps.default_only == {P + "refuse"}
    assert not tables[P + "jobs"].has_direct_counter
    regs = schema.build_registers()
    assert (regs[P + "agg_key"].size, regs[P + "agg_key"].bitwidth) == (32768, 64)
    assert regs[P + "dedup_mask"].bitwidth == 8
    assert schema.build_counters()[P + "stats"].size == 32
    assert schema.build_counters()[P + "sketch_row1"].size == 4096
    assert (regs[P + "sketch_cells0"].size, regs[P + "sketch_cells0"].bitwidth) == (4096, 64)
    assert (regs[P + "flush_count"].size, regs[P + "flush_iter"].bitwidth) == (32, 32)


def p4info_of_schema() -> p4info_pb2.P4Info:
    """A P4Info written from the schema with made-up ids (what a matching program gives)."""
    info = p4info_pb2.P4Info()
    ids: dict[str, int] = {}
    for n, ts in enumerate(schema.TABLES):
        t = info.tables.add()
        t.preamble.id, t.preamble.name, t.size = 0x02000000 + n, ts.name, ts.size
        for i, f in enumerate(ts.fields, 1):
            mt = p4info_pb2.MatchField.EXACT if f.kind == "exact" else p4info_pb2.MatchField.LPM
            t.match_fields.add(id=i, name=f.name, bitwidth=f.bitwidth, match_type=mt)
        for a in ts.actions:
            if a.name not in ids:
                ids[a.name] = 0x01000000 + len(ids)
                pa = info.actions.add()
                pa.preamble.id, pa.preamble.name = ids[a.name], a.name
                for i, (pn, w) in enumerate(a.params, 1):
                    pa.params.add(id=i, name=pn, bitwidth=w)
            scope = 2 if a.name in ts.default_only else 0
            t.action_refs.add(id=ids[a.name], scope=scope)
        if ts.direct_counter:
            d = info.direct_counters.add(direct_table_id=t.preamble.id)
            d.preamble.id, d.preamble.name = 0x13000000 + n, ts.direct_counter
            d.spec.unit = p4info_pb2.CounterSpec.BOTH
    for name, size in schema.COUNTERS.items():
        c = info.counters.add(size=size)
        c.preamble.name, c.spec.unit = name, p4info_pb2.CounterSpec.BOTH
    for rs in schema.REGISTERS:
        r = info.registers.add(size=rs.size)
        r.preamble.name = rs.name
        r.type_spec.bitstring.bit.bitwidth = rs.bitwidth
    for name, fields in schema.PACKET_METADATA.items():
        m = info.controller_packet_metadata.add()
        m.preamble.name = name
        for i, n, w in fields:
            m.metadata.add(id=i, name=n, bitwidth=w)
    return info


def test_check_p4info_accepts_a_matching_p4info():
    assert schema.check_p4info(p4info_of_schema()) == []


def test_check_p4info_reports_each_difference():
    info = p4info_of_schema()
    info.tables[0].size = 512
    info.tables[1].match_fields[0].bitwidth = 8
    del info.tables[3].action_refs[1]  # lookup0.miss
    info.registers[2].type_spec.bitstring.bit.bitwidth = 16
    info.controller_packet_metadata[0].metadata[0].bitwidth = 16
    del info.direct_counters[7]
    extra = info.tables.add()
    extra.preamble.name = P + "surprise"
    errs = schema.check_p4info(info)
    text = "\n".join(errs)
    for needle in [
        "ipv4_lpm: size 512",
        "jobs: match fields",
        "lookup0.miss is missing",
        "agg_value: bitwidth 16",
        "controller header packet_in",
        "lookup7.hot_keys: direct counter",
        "surprise is missing in the embedded pipeline",
    ]:
        assert needle in text, (needle, errs)
    assert len(errs) == 7


def test_committed_p4info_fits_the_pipeline():
    path = REPO / "p4src" / "hotagg.p4info.txtpb"
    if not path.exists():
        pytest.skip("p4src/hotagg.p4info.txtpb is not committed yet")
    info = text_format.Parse(path.read_text(), p4info_pb2.P4Info())
    assert schema.check_p4info(info) == []
