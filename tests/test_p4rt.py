"""Unit tests of p4rt/: the message encoders against protobuf's serializer, the decoders'
fallback to protobuf, and the P4Info index's comparison (tests/test_p4runtime_server.py
checks the request parsers against protobuf on corrupted inputs, tests/test_controller.py
the controller's entry encoder)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from p4.v1 import p4runtime_pb2

from contract.names import TABLE_IPV4_LPM, TABLE_JOBS, hot_keys_table
from contract.p4files import P4INFO_PATH
from p4rt import wire
from p4rt.p4info import P4InfoIndex, differences, explain

REPO = Path(__file__).resolve().parent.parent
INDEX = P4InfoIndex.load(P4INFO_PATH)


def exact(te: p4runtime_pb2.TableEntry, field_id: int, value: bytes) -> None:
    te.match.add(field_id=field_id).exact.value = value


def test_entity_encoders_write_what_protobuf_writes() -> None:
    enc = wire.TableEncoder(7, [(1, "exact", 1), (0, "exact", 2)], {"a": (9, [1, 2])})
    te = p4runtime_pb2.TableEntry(table_id=7)
    exact(te, 1, b"\x05")
    exact(te, 2, b"\x01\x00")
    te.action.action.action_id = 9
    te.action.action.params.add(param_id=1, value=b"\x00")
    te.action.action.params.add(param_id=2, value=b"\xff\xff")
    te.counter_data.packet_count, te.counter_data.byte_count = 3, 2**40
    te.metadata = b"\x00opaque"
    assert enc.entry((256, 5), "a", (0, 0xFFFF), (3, 2**40), b"\x00opaque") == (
        te.SerializeToString()
    )
    default = p4runtime_pb2.TableEntry(table_id=7, is_default_action=True, metadata=b"m")
    default.action.CopyFrom(te.action)
    assert enc.default_entry("a", (0, 0xFFFF), b"m") == default.SerializeToString()
    dce = p4runtime_pb2.DirectCounterEntry()
    dce.table_entry.table_id = 7
    dce.table_entry.match.extend(te.match)
    dce.data.SetInParent()  # zero counts: an empty CounterData, still set
    assert enc.direct_counter((256, 5), 0, 0) == dce.SerializeToString()
    for index, data in ((None, None), (0, None), (4095, (1, 2)), (None, (0, 0))):
        ce = p4runtime_pb2.CounterEntry(counter_id=0x12000001)
        if index is not None:
            ce.index.index = index
        if data is not None:
            ce.data.packet_count, ce.data.byte_count = data
        assert wire.counter_entry(0x12000001, index, data) == ce.SerializeToString()
    req = p4runtime_pb2.ReadRequest(device_id=2, role="r\u00f4le")
    req.entities.add().counter_entry.counter_id = 0x12000001  # every cell
    req.entities.add().table_entry.CopyFrom(te)
    raw = [
        wire.counter_entity(ce.counter_id, None),
        wire.entity(wire.ENTITY_TABLE, te.SerializeToString()),
    ]
    assert wire.read_request(2, raw, role="r\u00f4le") == req.SerializeToString()
    wr = p4runtime_pb2.WriteRequest(device_id=1, role="x", atomicity=1)
    wr.election_id.low = 5
    wr.updates.add(type=p4runtime_pb2.Update.MODIFY).entity.table_entry.CopyFrom(te)
    update = wire.update(p4runtime_pb2.Update.MODIFY, te.SerializeToString())
    assert wire.write_request(1, (0, 5), [update], 1, role="x") == wr.SerializeToString()


def test_reply_decoders_read_what_protobuf_reads() -> None:
    """Replies the hand-written decoders take, and ones they hand to protobuf (a field they
    do not read, a negative index): both readings are the same values."""
    reply = p4runtime_pb2.ReadResponse()
    te = reply.entities.add().table_entry
    te.table_id = 5
    exact(te, 1, b"\x01")
    te.action.action.action_id = 3
    te.counter_data.packet_count = 4
    te.metadata = b"m"
    te.idle_timeout_ns = 7
    ce = reply.entities.add().counter_entry
    ce.counter_id, ce.index.index, ce.data.byte_count = 9, 3, 10
    fast = reply.SerializeToString()
    assert wire.table_entries(fast) == [wire.raw_entry(te)]
    assert wire.counter_entries(fast) == [(9, 3, 10, 0)]
    assert list(wire.table_entry_counters(fast)) == [(5, {1: b"\x01"}, 4)]
    te.meter_config.cir = 1  # a field only protobuf reads
    ce.index.index = -1
    slow = reply.SerializeToString()
    assert wire.table_entries(slow) == [wire.raw_entry(te)]
    assert wire.counter_entries(slow) == [(9, -1, 10, 0)]


def test_same_p4info_has_no_differences() -> None:
    other = P4InfoIndex.load(P4INFO_PATH)
    assert differences(INDEX, other) == []


def test_differences_name_each_aspect() -> None:
    other = P4InfoIndex.load(P4INFO_PATH)
    msg = other.message
    lpm = next(t for t in msg.tables if t.preamble.name == TABLE_IPV4_LPM)
    lpm.size = 7
    jobs = next(t for t in msg.tables if t.preamble.name == TABLE_JOBS)
    jobs.preamble.id += 1
    hot = next(t for t in msg.tables if t.preamble.name == hot_keys_table(2))
    del hot.action_refs[1]
    found = differences(INDEX, P4InfoIndex(msg))
    got = {(d.name, d.aspect) for d in found}
    assert (TABLE_IPV4_LPM, "size") in got and (TABLE_JOBS, "id") in got, got
    assert any(d.name == hot.preamble.name and d.aspect.startswith("action ") for d in found)
    assert len(found) == 3, found
    # renumbered objects are the same shape: without ids, only what else changed counts
    assert {d.name for d in differences(INDEX, P4InfoIndex(msg), ids=False)} == {
        TABLE_IPV4_LPM,
        hot.preamble.name,
    }
    lines = [explain(d, ours="here", theirs="there") for d in found]
    assert any(f"{TABLE_IPV4_LPM}: size 7 there, 1024 here" in line for line in lines), lines
    del msg.tables[0]
    (missing,) = [d for d in differences(INDEX, P4InfoIndex(msg), kinds=["tables"])
                  if not d.aspect]  # fmt: skip
    assert explain(missing, theirs="on the switch").endswith("is missing on the switch")


def test_gen_p4info_check_says_what_differs(tmp_path: Path) -> None:
    text = P4INFO_PATH.read_text()
    stale = tmp_path / "stale.p4info.txtpb"
    stale.write_text(text.replace("size: 1024", "size: 512", 1))
    gen = [sys.executable, str(REPO / "scripts" / "gen_p4info.py"), "--check", "--output"]
    done = subprocess.run([*gen, str(stale)], capture_output=True, text=True)
    assert done.returncode == 1
    assert "size 512 in stale.p4info.txtpb, 1024 generated" in done.stderr, done.stderr
    assert subprocess.run([*gen, str(P4INFO_PATH)]).returncode == 0
