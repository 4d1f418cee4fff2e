"""The embedded switch's P4Runtime server, in process on 127.0.0.1 port 0, with the real
Pipeline, spoken to with the generated stubs and p4runtime-shell's P4RuntimeClient."""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time

import grpc
import pytest
from google.protobuf import text_format
from google.rpc import code_pb2, status_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc
from p4runtime_sh.p4runtime import P4RuntimeClient, P4RuntimeWriteException
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from contract.constants import HOTAGG_PORT, Op, Stat
from contract.layers import Entry, Hotagg
from contract.names import hot_keys_table, miss_action, set_slot_action
from contract.p4files import P4INFO_PATH
from p4rt.p4info import P4InfoIndex
from p4rt.wire import READ_CHUNK, READ_CHUNK_BYTES
from softswitch import schema
from softswitch.p4rt import P4RuntimeServer
from softswitch.p4rt.errors import STATUS_DETAILS_KEY
from softswitch.pipeline import Pipeline
from softswitch.runtime import InlineDataplane

P = "HotaggIngress."
HOT0 = hot_keys_table(0)
Update = p4runtime_pb2.Update
SetReq = p4runtime_pb2.SetForwardingPipelineConfigRequest
GetReq = p4runtime_pb2.GetForwardingPipelineConfigRequest


def load_p4info() -> p4info_pb2.P4Info:
    """The committed P4Info (a fresh message each call: tests modify it)."""
    return text_format.Parse(P4INFO_PATH.read_text(), p4info_pb2.P4Info())


@pytest.fixture(scope="module")
def p4info() -> p4info_pb2.P4Info:
    return load_p4info()


class Ids(P4InfoIndex):
    """P4Info name -> id lookups."""

    def __init__(self, info: p4info_pb2.P4Info) -> None:
        super().__init__(info)
        self.info = info

    def _id(self, kind: str, name: str) -> int:
        return self.find(kind, name).preamble.id

    def table(self, name: str) -> int:
        return self._id("tables", name)

    def field(self, table: str, field: str) -> int:
        return next(f.id for f in self.match_fields(self.find("tables", table)) if f.name == field)

    def action(self, name: str) -> int:
        return self._id("actions", name)

    def param(self, action: str, param: str) -> int:
        return next(p.id for p in self.params(self.find("actions", action)) if p.name == param)

    def counter(self, name: str) -> int:
        return self._id("counters", name)

    def register(self, name: str) -> int:
        return self._id("registers", name)


class Switch:
    def __init__(self, **server_options) -> None:
        self.pipeline = Pipeline(seed=1)
        self.server = P4RuntimeServer(
            self.pipeline, device_id=0, address="127.0.0.1:0", **server_options
        )
        self.sent: queue.Queue[tuple[int, bytes]] = queue.Queue()
        self.dataplane = InlineDataplane(
            self.pipeline, lambda p, f: self.sent.put((p, f)), self.server.packet_in
        )
        self.server.attach_dataplane(self.dataplane)
        self.port = self.server.start()
        self.addr = f"127.0.0.1:{self.port}"
        self.channel = grpc.insecure_channel(self.addr)
        self.stub = p4runtime_pb2_grpc.P4RuntimeStub(self.channel)
        self.client: P4RuntimeClient | None = None  # set by the `ready` fixture
        self.ids: Ids | None = None


@pytest.fixture
def sw():
    s = Switch()
    yield s
    s.channel.close()
    s.server.stop(grace=None)


class Clients:
    """p4runtime-shell clients, torn down at the end of the test."""

    def __init__(self, sw: Switch) -> None:
        self.sw = sw
        self.live: list[P4RuntimeClient] = []

    def __call__(self, election: tuple[int, int], device_id: int = 0) -> P4RuntimeClient:
        c = P4RuntimeClient(device_id, self.sw.addr, election)
        self.live.append(c)
        return c

    def close(self, c: P4RuntimeClient) -> None:
        self.live.remove(c)
        c.tear_down()


@pytest.fixture
def clients(sw):
    cs = Clients(sw)
    yield cs
    for c in list(cs.live):
        cs.close(c)


def set_pipeline(stub, info, election=(0, 1), action=SetReq.VERIFY_AND_COMMIT, cookie=None):
    req = SetReq(device_id=0, action=action)
    req.election_id.high, req.election_id.low = election
    req.config.p4info.CopyFrom(info)
    req.config.p4_device_config = b'{"bmv2": "json"}'
    if cookie is not None:
        req.config.cookie.cookie = cookie
    return stub.SetForwardingPipelineConfig(req)


@pytest.fixture
def ready(sw, clients, p4info):
    """A switch with the pipeline set by primary client `ready.client` (election 0:1)."""
    c = clients((0, 1))
    set_pipeline(sw.stub, p4info)
    sw.client = c
    sw.ids = Ids(p4info)
    return sw


def hot_entry(ids: Ids, job: int, key: int, offset: int | None, table: str = HOT0, **kw):
    e = p4runtime_pb2.TableEntry(table_id=ids.table(table), **kw)
    e.match.add(field_id=ids.field(table, "job_id")).exact.value = job.to_bytes(2, "big")
    e.match.add(field_id=ids.field(table, "key")).exact.value = key.to_bytes(8, "big")
    if offset is not None:
        a = table.replace("hot_keys", "set_slot")
        e.action.action.action_id = ids.action(a)
        e.action.action.params.add(param_id=ids.param(a, "offset"), value=offset.to_bytes(4, "big"))
    return e


def route_entry(ids: Ids, prefix: bytes, plen: int, port: int | None, mac: int = 0x020000000002):
    t = f"{P}ipv4_lpm"
    e = p4runtime_pb2.TableEntry(table_id=ids.table(t))
    fm = e.match.add(field_id=ids.field(t, "dst_addr"))
    fm.lpm.value = prefix
    fm.lpm.prefix_len = plen
    a = e.action.action
    if port is None:
        a.action_id = ids.action(f"{P}send_to_cpu")
    else:
        fwd = f"{P}ipv4_forward"
        a.action_id = ids.action(fwd)
        a.params.add(param_id=ids.param(fwd, "dst_mac"), value=mac.to_bytes(6, "big"))
        a.params.add(param_id=ids.param(fwd, "port"), value=port.to_bytes(2, "big"))
    return e


def entity_field(entity) -> str:
    return {
        "TableEntry": "table_entry",
        "CounterEntry": "counter_entry",
        "DirectCounterEntry": "direct_counter_entry",
        "RegisterEntry": "register_entry",
        "PacketReplicationEngineEntry": "packet_replication_engine_entry",
    }[entity.DESCRIPTOR.name]


def write_batch(sw, updates, election=(0, 1)):
    req = p4runtime_pb2.WriteRequest(device_id=0)
    req.election_id.high, req.election_id.low = election
    for kind, entity in updates:
        getattr(req.updates.add(type=kind).entity, entity_field(entity)).CopyFrom(entity)
    return sw.stub.Write(req)


def batch_errors(err: grpc.RpcError) -> list[p4runtime_pb2.Error]:
    """Unpack the per-update p4.Error list the way PI clients do."""
    assert err.code() == grpc.StatusCode.UNKNOWN
    blob = dict(err.trailing_metadata())[STATUS_DETAILS_KEY]
    status = status_pb2.Status.FromString(blob)
    out = []
    for any_msg in status.details:
        e = p4runtime_pb2.Error()
        assert any_msg.Unpack(e)
        out.append(e)
    return out


def read(sw, *entities) -> list[p4runtime_pb2.Entity]:
    req = p4runtime_pb2.ReadRequest(device_id=0)
    for ent in entities:
        getattr(req.entities.add(), entity_field(ent)).CopyFrom(ent)
    return [e for resp in sw.stub.Read(req) for e in resp.entities]


def udp_frame(dst: str, payload: bytes = b"hello") -> bytes:
    return bytes(
        Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:fe")
        / IP(src="10.0.0.1", dst=dst, ttl=64)
        / UDP(sport=1234, dport=5678)
        / payload
    )


def test_capabilities_and_no_pipeline_yet(sw, clients):
    caps = sw.stub.Capabilities(p4runtime_pb2.CapabilitiesRequest())
    assert caps.p4runtime_api_version == "1.4.1"
    got = sw.stub.GetForwardingPipelineConfig(GetReq(device_id=0))
    assert not got.HasField("config")
    with pytest.raises(grpc.RpcError) as e:
        read(sw, p4runtime_pb2.TableEntry())
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(grpc.RpcError) as e:
        write_batch(sw, [], election=(0, 0))
    # no stream open -> nobody is primary, with or without an election id (PI accepts the
    # latter: a debugging convenience its code marks as not for production)
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.RpcError) as e:
        sw.stub.Write(p4runtime_pb2.WriteRequest(device_id=0))
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    clients((0, 1))
    with pytest.raises(grpc.RpcError) as e:
        write_batch(sw, [], election=(0, 1))
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_wrong_device_id_is_not_found(sw, p4info):
    for call in (
        lambda: sw.stub.Write(p4runtime_pb2.WriteRequest(device_id=7)),
        lambda: list(sw.stub.Read(p4runtime_pb2.ReadRequest(device_id=7))),
        lambda: sw.stub.GetForwardingPipelineConfig(GetReq(device_id=7)),
        lambda: sw.stub.SetForwardingPipelineConfig(SetReq(device_id=7, action=SetReq.VERIFY)),
    ):
        with pytest.raises(grpc.RpcError) as e:
            call()
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
        assert "device" in e.value.details()
    req = p4runtime_pb2.StreamMessageRequest()
    req.arbitration.device_id = 7
    with pytest.raises(grpc.RpcError) as e:
        list(sw.stub.StreamChannel(iter([req]), timeout=5))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


def arbitration_of(c: P4RuntimeClient) -> p4runtime_pb2.MasterArbitrationUpdate:
    msg = c.get_stream_packet("arbitration", timeout=3)
    assert msg is not None, "no arbitration update"
    return msg.arbitration


def test_arbitration_primary_backup_and_promotion(ready, clients):
    sw, ids = ready, ready.ids
    low = sw.client  # election 0:1, primary so far
    high = clients((0, 5))
    # the old primary hears that 0:5 is primary now and that it is a backup
    upd = arbitration_of(low)
    assert upd.status.code == code_pb2.ALREADY_EXISTS
    assert (upd.election_id.high, upd.election_id.low) == (0, 5)
    entry = hot_entry(ids, 1, 2, 3)
    with pytest.raises(grpc.RpcError) as e:
        write_batch(sw, [(Update.INSERT, entry)], election=(0, 1))
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.RpcError) as e:
        set_pipeline(sw.stub, ids.info, election=(0, 1))
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    write_batch(sw, [(Update.INSERT, entry)], election=(0, 5))
    # a third, lower client is told it is a backup; nobody else is notified
    mid = clients((0, 3))
    assert mid.stream_in_q["arbitration"].qsize() == 0  # handshake consumed its update
    assert low.get_stream_packet("arbitration", timeout=0.3) is None
    clients.close(high)
    for c in (mid, low):
        upd = arbitration_of(c)
        assert (upd.election_id.high, upd.election_id.low) == (0, 3)
        assert upd.status.code == (code_pb2.OK if c is mid else code_pb2.ALREADY_EXISTS)
    write_batch(sw, [(Update.DELETE, entry)], election=(0, 3))


def test_equal_election_id_is_rejected(ready):
    req = p4runtime_pb2.StreamMessageRequest()
    req.arbitration.device_id = 0
    req.arbitration.election_id.low = 1  # ready.client holds 0:1
    with pytest.raises(grpc.RpcError) as e:
        list(ready.stub.StreamChannel(iter([req]), timeout=5))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    write_batch(ready, [], election=(0, 1))  # the primary is unaffected


def test_set_and_get_pipeline(sw, clients, p4info, tmp_path):
    c = clients((0, 1))
    info_path = tmp_path / "hotagg.p4info.txtpb"
    info_path.write_text(text_format.MessageToString(p4info))
    (tmp_path / "hotagg.json").write_bytes(b"{}")
    c.set_fwd_pipe_config(str(info_path), str(tmp_path / "hotagg.json"))
    assert c.get_p4info() == p4info
    set_pipeline(sw.stub, p4info, cookie=42)
    got = sw.stub.GetForwardingPipelineConfig(GetReq(device_id=0)).config
    assert got.p4info == p4info and got.cookie.cookie == 42
    assert got.p4_device_config == b'{"bmv2": "json"}'
    got = sw.stub.GetForwardingPipelineConfig(GetReq(device_id=0, response_type=GetReq.COOKIE_ONLY))
    assert got.config.cookie.cookie == 42 and not got.config.HasField("p4info")
    got = sw.stub.GetForwardingPipelineConfig(
        GetReq(device_id=0, response_type=GetReq.DEVICE_CONFIG_AND_COOKIE)
    )
    assert got.config.p4_device_config and not got.config.HasField("p4info")
    with pytest.raises(grpc.RpcError) as e:
        set_pipeline(sw.stub, p4info, action=SetReq.COMMIT)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # COMMIT carries no config
    req = SetReq(device_id=0, action=SetReq.COMMIT)
    req.election_id.low = 1
    with pytest.raises(grpc.RpcError) as e:
        sw.stub.SetForwardingPipelineConfig(req)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND  # nothing saved


def test_mismatching_p4info_is_rejected(ready, p4info):
    bad = p4info_pb2.P4Info()
    bad.CopyFrom(p4info)
    t = next(t for t in bad.tables if t.preamble.name == f"{P}jobs")
    t.match_fields[0].bitwidth = 24
    del bad.registers[:]
    for action in (SetReq.VERIFY, SetReq.VERIFY_AND_COMMIT):
        with pytest.raises(grpc.RpcError) as e:
            set_pipeline(ready.stub, bad, action=action)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert f"{P}jobs" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        set_pipeline(ready.stub, p4info_pb2.P4Info())
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # the committed pipeline still works
    write_batch(ready, [(Update.INSERT, hot_entry(ready.ids, 1, 1, 1))])


def test_recommit_clears_state_verify_keeps_it(ready, p4info):
    sw, ids = ready, ready.ids
    write_batch(sw, [(Update.INSERT, hot_entry(ids, 1, 1, 1))])
    set_pipeline(sw.stub, p4info, action=SetReq.VERIFY)
    set_pipeline(sw.stub, p4info, action=SetReq.RECONCILE_AND_COMMIT)
    assert len(read(sw, p4runtime_pb2.TableEntry(table_id=ids.table(HOT0)))) == 1
    set_pipeline(sw.stub, p4info, action=SetReq.VERIFY_AND_COMMIT)
    assert read(sw, p4runtime_pb2.TableEntry(table_id=ids.table(HOT0))) == []


def test_hot_keys_insert_read_modify_delete(ready):
    sw, ids = ready, ready.ids
    key = (1 << 63) + 5
    write_batch(sw, [(Update.INSERT, hot_entry(ids, 1, key, 7))])  # padded bytes accepted
    (ent,) = read(sw, p4runtime_pb2.TableEntry(table_id=ids.table(HOT0)))
    te = ent.table_entry
    by_id = {m.field_id: m.exact.value for m in te.match}
    assert by_id[ids.field(HOT0, "job_id")] == b"\x01"  # canonical: leading zeros stripped
    assert by_id[ids.field(HOT0, "key")] == key.to_bytes(8, "big")
    assert te.action.action.action_id == ids.action(set_slot_action(0))
    assert te.action.action.params[0].value == b"\x07"
    assert sw.pipeline.tables[HOT0].get((1, key)).params == (7,)
    write_batch(sw, [(Update.MODIFY, hot_entry(ids, 1, key, 0x1234))])
    (ent,) = read(sw, hot_entry(ids, 1, key, None))  # a read by exact key
    assert ent.table_entry.action.action.params[0].value == b"\x12\x34"
    write_batch(sw, [(Update.DELETE, hot_entry(ids, 1, key, None))])
    assert read(sw, p4runtime_pb2.TableEntry(table_id=ids.table(HOT0))) == []
    assert read(sw, hot_entry(ids, 1, key, None)) == []  # a key read filters: none is no error
    # every table at once (table_id 0): the one entry of another table shows up
    write_batch(sw, [(Update.INSERT, hot_entry(ids, 2, 9, 1, table=hot_keys_table(3)))])
    (ent,) = read(sw, p4runtime_pb2.TableEntry())
    assert ent.table_entry.table_id == ids.table(hot_keys_table(3))


def test_ipv4_lpm_entries_and_bad_values(ready):
    sw, ids = ready, ready.ids
    write_batch(sw, [(Update.INSERT, route_entry(ids, bytes([10, 0, 1, 0]), 24, 2))])
    (ent,) = read(sw, p4runtime_pb2.TableEntry(table_id=ids.table(f"{P}ipv4_lpm")))
    (m,) = ent.table_entry.match
    assert (m.lpm.value, m.lpm.prefix_len) == (bytes([10, 0, 1, 0]), 24)
    params = [p.value for p in ent.table_entry.action.action.params]
    assert params == [bytes.fromhex("020000000002"), b"\x02"]
    bad = [
        route_entry(ids, bytes([10, 0, 1, 1]), 24, 2),  # bits beyond the prefix
        route_entry(ids, bytes([1, 10, 0, 2, 0]), 24, 2),  # wider than 32 bits
        route_entry(ids, bytes([10, 0, 3, 0]), 33, 2),  # prefix longer than the field
        route_entry(ids, bytes([10, 0, 4, 0]), 24, 512),  # port wider than 9 bits
    ]
    with pytest.raises(grpc.RpcError) as e:
        write_batch(sw, [(Update.INSERT, b) for b in bad])
    errs = batch_errors(e.value)
    assert [x.canonical_code for x in errs] == [code_pb2.INVALID_ARGUMENT] * 4
    assert "prefix" in errs[0].message and "32 bits" in errs[1].message
    lpm = sw.pipeline.tables[f"{P}ipv4_lpm"]
    assert len(lpm) == 1
    write_batch(sw, [(Update.MODIFY, route_entry(ids, bytes([10, 0, 1, 0]), 24, None))])
    assert lpm.get(((0x0A000100, 24),)).action == f"{P}send_to_cpu"
    write_batch(sw, [(Update.DELETE, route_entry(ids, bytes([10, 0, 1, 0]), 24, None))])
    assert len(lpm) == 0


def test_batch_reports_every_update(ready):
    sw, ids = ready, ready.ids
    miss = hot_entry(ids, 1, 5, None)
    a = miss.action.action
    a.action_id = ids.action(miss_action(0))  # default-only action in an entry
    foreign = hot_entry(ids, 1, 6, 1)
    foreign.action.action.action_id = ids.action(set_slot_action(1))  # other table's
    wide = hot_entry(ids, 1, 7, 1)
    wide.match[0].exact.value = b"\x01\x00\x00"  # job_id 65536 in a 16-bit field
    updates = [
        (Update.INSERT, hot_entry(ids, 1, 1, 1)),
        (Update.INSERT, hot_entry(ids, 1, 1, 2)),
        (Update.DELETE, hot_entry(ids, 1, 99, None)),
        (Update.MODIFY, hot_entry(ids, 1, 98, 1)),
        (Update.INSERT, wide),
        (Update.INSERT, foreign),
        (Update.INSERT, miss),
        (Update.INSERT, p4runtime_pb2.TableEntry(table_id=0x02FFFFFF)),
        (Update.INSERT, hot_entry(ids, 1, 2, 2)),
    ]
    with pytest.raises(grpc.RpcError) as e:
        write_batch(sw, updates)
    errs = batch_errors(e.value)
    I = code_pb2.INVALID_ARGUMENT  # noqa: E741
    assert [x.canonical_code for x in errs] == [
        code_pb2.OK, code_pb2.ALREADY_EXISTS, code_pb2.NOT_FOUND, code_pb2.NOT_FOUND, I, I, I, I,
        code_pb2.OK,
    ]  # fmt: skip
    assert all(x.message for x in errs if x.canonical_code != code_pb2.OK)
    assert not errs[0].message and "default" in errs[6].message
    assert sorted(e.match for e in sw.pipeline.tables[HOT0].entries()) == [(1, 1), (1, 2)]
    # p4runtime-shell unpacks a failed single update into a readable exception
    c = sw.client
    with pytest.raises(P4RuntimeWriteException) as e:
        c.write_update(Update(type=Update.INSERT, entity=p4runtime_pb2.Entity(table_entry=miss)))
    assert e.value.errors[0][0] == 0
    assert e.value.errors[0][1].canonical_code == code_pb2.INVALID_ARGUMENT
    assert "INVALID_ARGUMENT" in str(e.value)


def test_full_table_is_resource_exhausted(ready):
    sw, ids = ready, ready.ids
    t = f"{P}jobs"
    a = f"{P}set_job"

    def job(j: int):
        e = p4runtime_pb2.TableEntry(table_id=ids.table(t))
        e.match.add(field_id=ids.field(t, "job_id")).exact.value = j.to_bytes(2, "big")
        e.action.action.action_id = ids.action(a)
        for name in ("job_index", "slot_base", "slot_count"):
            e.action.action.params.add(param_id=ids.param(a, name), value=b"\x01")
        return e

    with pytest.raises(grpc.RpcError) as e:
        write_batch(sw, [(Update.INSERT, job(j)) for j in range(17)])
    codes = [x.canonical_code for x in batch_errors(e.value)]
    assert codes == [code_pb2.OK] * 16 + [code_pb2.RESOURCE_EXHAUSTED]


def test_default_actions(ready):
    sw, ids = ready, ready.ids
    t = f"{P}drop_sim"
    a = f"{P}set_drop_rate"
    default = p4runtime_pb2.TableEntry(table_id=ids.table(t), is_default_action=True)
    (ent,) = read(sw, default)
    assert ent.table_entry.is_default_action
    assert ent.table_entry.action.action.action_id == ids.action(a)
    assert ent.table_entry.action.action.params[0].value == b"\x00"
    new = p4runtime_pb2.TableEntry()
    new.CopyFrom(default)
    new.action.action.action_id = ids.action(a)
    new.action.action.params.add(param_id=ids.param(a, "rate"), value=b"\x00\x01\x00\x00")
    write_batch(sw, [(Update.MODIFY, new)])
    assert sw.pipeline.tables[t].default() == (a, (65536,))
    (ent,) = read(sw, default)
    assert ent.table_entry.action.action.params[0].value == b"\x01\x00\x00"
    write_batch(sw, [(Update.MODIFY, default)])  # no action: back to the initial default
    assert sw.pipeline.tables[t].default() == (a, (0,))
    with pytest.raises(grpc.RpcError) as e:
        write_batch(sw, [(Update.INSERT, new), (Update.DELETE, default)])
    assert [x.canonical_code for x in batch_errors(e.value)] == [code_pb2.INVALID_ARGUMENT] * 2
    # every table's default at once
    defaults = read(sw, p4runtime_pb2.TableEntry(is_default_action=True))
    assert len(defaults) == len(ids.info.tables)


def push_frame(job: int, keys: list[int], seq: int) -> bytes:
    agg = Hotagg(
        op=Op.PUSH, job_id=job, worker_id=1, seq=seq, iteration=1,
        entries=[Entry(key=k, value=5) for k in keys],
    )  # fmt: skip
    return bytes(
        Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:fe")
        / IP(src="10.0.0.1", dst="10.0.0.3", ttl=64)
        / UDP(sport=40001, dport=HOTAGG_PORT, chksum=0)
        / agg
    )


def test_counters_and_direct_counters_after_packets(ready):
    sw, ids = ready, ready.ids
    t, a = f"{P}jobs", f"{P}set_job"
    job = p4runtime_pb2.TableEntry(table_id=ids.table(t))
    job.match.add(field_id=ids.field(t, "job_id")).exact.value = b"\x01"
    job.action.action.action_id = ids.action(a)
    for name, v in (("job_index", 0), ("slot_base", 0), ("slot_count", 100)):
        job.action.action.params.add(param_id=ids.param(a, name), value=bytes([v]))
    t = f"{P}worker_admission"  # push_frame's worker 1, 10.0.0.1 on port 1 (tenancy)
    admit = p4runtime_pb2.TableEntry(table_id=ids.table(t))
    for name, v in (("job_id", b"\x01"), ("worker_id", b"\x01"), ("ingress_port", b"\x01"),
                    ("src_addr", bytes([10, 0, 0, 1]))):  # fmt: skip
        admit.match.add(field_id=ids.field(t, name)).exact.value = v
    admit.action.action.action_id = ids.action(f"{P}admit")
    write_batch(
        sw,
        [
            (Update.INSERT, job),
            (Update.INSERT, admit),
            (Update.INSERT, hot_entry(ids, 1, 11, 3)),
            (Update.INSERT, hot_entry(ids, 1, 12, 4)),
            (Update.INSERT, route_entry(ids, bytes([10, 0, 0, 3]), 32, 3)),
        ],
    )
    frame = push_frame(1, [11, 99], seq=1)
    sw.dataplane.inject(1, frame)
    sw.dataplane.inject(1, push_frame(1, [11, 99], seq=2))
    assert sw.sent.get(timeout=2)[0] == 3  # the cold entry went on to the PS
    stats = ids.counter(f"{P}stats")
    ce = p4runtime_pb2.CounterEntry(counter_id=stats)
    ce.index.index = Stat.PUSH
    (ent,) = read(sw, ce)
    assert ent.counter_entry.data.packet_count == 2
    assert ent.counter_entry.data.byte_count == 2 * len(frame)
    every = read(sw, p4runtime_pb2.CounterEntry(counter_id=stats))
    assert [e.counter_entry.index.index for e in every] == list(range(schema.COUNTERS[f"{P}stats"]))
    # counter_id 0: every cell of every counter
    assert len(read(sw, p4runtime_pb2.CounterEntry())) == sum(schema.COUNTERS.values())
    ce.index.index = 32
    with pytest.raises(grpc.RpcError) as e:
        read(sw, ce)
    assert e.value.code() == grpc.StatusCode.OUT_OF_RANGE
    # direct counters: key 11 was hit twice in lookup0, key 12 never
    dce = p4runtime_pb2.DirectCounterEntry(
        table_entry=p4runtime_pb2.TableEntry(table_id=ids.table(HOT0))
    )
    got = {
        e.direct_counter_entry.table_entry.match[1].exact.value: e.direct_counter_entry.data
        for e in read(sw, dce)
    }
    assert got[b"\x0b"].packet_count == 2 and got[b"\x0b"].byte_count == 2 * len(frame)
    assert got[b"\x0c"].packet_count == 0
    with_counters = p4runtime_pb2.TableEntry(table_id=ids.table(HOT0))
    with_counters.counter_data.SetInParent()
    hits = {
        e.table_entry.match[1].exact.value: e.table_entry.counter_data
        for e in read(sw, with_counters)
    }
    assert hits == got
    # writes: reset a counter cell and a direct counter
    ce.index.index = Stat.PUSH
    ce.data.packet_count, ce.data.byte_count = 7, 700
    dce = p4runtime_pb2.DirectCounterEntry(table_entry=hot_entry(ids, 1, 11, None))
    dce.data.packet_count = 0
    write_batch(sw, [(Update.MODIFY, ce), (Update.MODIFY, dce)])
    assert sw.pipeline.counters[f"{P}stats"].read(Stat.PUSH) == (7, 700)
    (ent,) = read(sw, p4runtime_pb2.DirectCounterEntry(table_entry=hot_entry(ids, 1, 11, None)))
    assert ent.direct_counter_entry.data.packet_count == 0


def test_packet_out_and_packet_in(ready):
    sw, ids = ready, ready.ids
    c = sw.client
    frame = udp_frame("10.0.0.2")
    req = p4runtime_pb2.StreamMessageRequest()
    req.packet.payload = frame
    req.packet.metadata.add(metadata_id=1, value=b"\x02")
    req.packet.metadata.add(metadata_id=2, value=b"\x00")
    c.stream_out_q.put(req)
    assert sw.sent.get(timeout=3) == (2, frame)
    write_batch(sw, [(Update.INSERT, route_entry(ids, bytes([10, 0, 9, 0]), 24, None))])
    to_cpu = udp_frame("10.0.9.9")
    sw.dataplane.inject(4, to_cpu)
    msg = c.get_stream_packet("packet", timeout=3)
    assert msg is not None, "no PacketIn"
    assert msg.packet.payload == to_cpu
    meta = {m.metadata_id: m.value for m in msg.packet.metadata}
    assert meta == {1: b"\x04", 2: b"\x00"}


def test_packet_out_from_backup_is_dropped(ready, clients):
    sw = ready
    backup = clients((0, 0))
    req = p4runtime_pb2.StreamMessageRequest()
    req.packet.payload = udp_frame("10.0.0.2")
    req.packet.metadata.add(metadata_id=1, value=b"\x02")
    backup.stream_out_q.put(req)
    err = backup.get_stream_packet("unknown", timeout=3)
    assert err is not None and err.error.canonical_code == code_pb2.PERMISSION_DENIED
    assert sw.sent.empty()


def test_registers_extension_and_unimplemented(ready):
    sw, ids = ready, ready.ids
    reg = p4runtime_pb2.RegisterEntry(register_id=ids.register(f"{P}dedup_seq"))
    reg.index.index = 5
    reg.data.bitstring = b"\x00\x00\x01\x00"
    far = p4runtime_pb2.RegisterEntry()
    far.CopyFrom(reg)
    far.index.index = 1 << 20
    pre = p4runtime_pb2.PacketReplicationEngineEntry()
    pre.multicast_group_entry.multicast_group_id = 1
    with pytest.raises(grpc.RpcError) as e:
        write_batch(sw, [(Update.MODIFY, reg), (Update.MODIFY, far), (Update.INSERT, pre)])
    codes = [x.canonical_code for x in batch_errors(e.value)]
    assert codes == [code_pb2.OK, code_pb2.OUT_OF_RANGE, code_pb2.UNIMPLEMENTED]
    one = p4runtime_pb2.RegisterEntry(register_id=reg.register_id)
    one.index.index = 5
    (ent,) = read(sw, one)
    assert ent.register_entry.data.bitstring == b"\x01\x00"
    assert sw.pipeline.registers[f"{P}dedup_seq"].read(5) == 256


def test_large_read_is_chunked(ready):
    sw, ids = ready, ready.ids
    write_batch(sw, [(Update.INSERT, hot_entry(ids, 3, k, k)) for k in range(2500)])
    req = p4runtime_pb2.ReadRequest(device_id=0)
    req.entities.add().table_entry.table_id = ids.table(HOT0)
    sizes = [len(r.entities) for r in sw.stub.Read(req)]
    assert len(sizes) >= 3 and sum(sizes) == 2500
    assert max(sizes) <= READ_CHUNK
    raw = raw_read(sw, req.entities[0].table_entry)
    assert len(raw) == len(sizes) and max(map(len, raw)) <= READ_CHUNK_BYTES


def test_concurrent_writes_and_packets(ready):
    """Writes from gRPC threads while the data plane runs frames: no error, no lost entry."""
    sw, ids = ready, ready.ids
    write_batch(sw, [(Update.INSERT, route_entry(ids, bytes([10, 0, 0, 2]), 32, 2))])
    stop = threading.Event()

    def traffic() -> None:
        while not stop.is_set():
            sw.dataplane.inject(1, udp_frame("10.0.0.2"))

    th = threading.Thread(target=traffic)
    th.start()
    try:
        for k in range(20):
            write_batch(sw, [(Update.INSERT, hot_entry(ids, 4, 100 * k + j, j)) for j in range(50)])
    finally:
        stop.set()
        th.join()
    assert len(sw.pipeline.tables[HOT0]) == 1000
    assert sw.sent.qsize() > 0


# --- Read bytes and Write parsing: the hand-written wire code against protobuf ---


def canon(v: int) -> bytes:
    return v.to_bytes(max(1, (v.bit_length() + 7) // 8), "big")


def ref_table_entity(sw, name: str, e, with_counters: bool, default: bool = False):
    """The Entity the server built with protobuf messages before it wrote bytes itself."""
    t, pt = sw.ids.find("tables", name), sw.pipeline.tables[name]
    pos = {f.name: i for i, f in enumerate(pt.fields)}
    ent = p4runtime_pb2.Entity()
    te = ent.table_entry
    te.table_id = t.preamble.id
    if default:
        te.is_default_action = True
        action, params = pt.default()
    else:
        action, params = e.action, e.params
        for mf in t.match_fields:
            v = e.match[pos[mf.name]]
            if mf.match_type == p4info_pb2.MatchField.EXACT:
                te.match.add(field_id=mf.id).exact.value = canon(v)
            elif v[1]:
                fm = te.match.add(field_id=mf.id)
                fm.lpm.value, fm.lpm.prefix_len = canon(v[0]), v[1]
    a = sw.ids.find("actions", action)
    te.action.action.action_id = a.preamble.id
    by_name = dict(zip((p for p, _ in pt.actions[action].params), params))
    for p in a.params:
        te.action.action.params.add(param_id=p.id, value=canon(by_name[p.name]))
    if with_counters and pt.has_direct_counter:
        te.counter_data.packet_count = e.packets
        te.counter_data.byte_count = e.bytes
    return ent


def raw_read(sw, *entities) -> list[bytes]:
    """ReadResponse messages as the server sent them (not parsed)."""
    call = sw.channel.unary_stream(
        "/p4.v1.P4Runtime/Read",
        request_serializer=p4runtime_pb2.ReadRequest.SerializeToString,
        response_deserializer=None,
    )
    req = p4runtime_pb2.ReadRequest(device_id=0)
    for ent in entities:
        getattr(req.entities.add(), entity_field(ent)).CopyFrom(ent)
    return list(call(req))


def serialized(entities) -> bytes:
    return p4runtime_pb2.ReadResponse(entities=entities).SerializeToString()


def test_read_bytes_equal_protobuf_serialization(ready):
    sw, ids = ready, ready.ids
    pl = sw.pipeline
    hot0, hot3 = pl.tables[HOT0], pl.tables[hot_keys_table(3)]
    for job, key, off in ((0, 0, 0), (0xFFFF, 2**64 - 1, 2**32 - 1), (1, 200, 300)):
        hot0.insert((job, key), set_slot_action(0), (off,))
    hot3.insert((9, 1 << 40), set_slot_action(3), (127,))
    hot0.set_direct_counter((1, 200), 2**63 - 1, 129)
    hot3.set_direct_counter((9, 1 << 40), 5, 0)
    lpm = pl.tables[f"{P}ipv4_lpm"]
    lpm.insert(((0x0A000100, 24),), f"{P}ipv4_forward", (0x020000000002, 511))
    lpm.insert(((0xFFFFFFFF, 32),), f"{P}send_to_cpu", ())
    lpm.insert(((0, 0),), f"{P}drop", ())  # a /0 entry: its match field is omitted
    pl.tables[f"{P}jobs"].insert((258,), f"{P}set_job", (3, 0, 1 << 20))
    pl.tables[f"{P}drop_sim"].set_default(f"{P}set_drop_rate", (65536,))
    names = [t.preamble.name for t in ids.info.tables]
    for with_counters in (False, True):
        req = p4runtime_pb2.TableEntry()
        if with_counters:
            req.counter_data.SetInParent()
        want = [
            ref_table_entity(sw, n, e, with_counters) for n in names for e in pl.tables[n].entries()
        ]
        assert b"".join(raw_read(sw, req)) == serialized(want)
    defaults = [ref_table_entity(sw, n, None, False, default=True) for n in names]
    got = raw_read(sw, p4runtime_pb2.TableEntry(is_default_action=True))
    assert b"".join(got) == serialized(defaults)
    one = hot_entry(ids, 0xFFFF, 2**64 - 1, None)
    assert raw_read(sw, one) == [serialized([ref_table_entity(sw, HOT0, hot0.entries()[1], 0)])]
    # direct counters of every table that has one
    want = []
    for n in names:
        for e in pl.tables[n].entries() if pl.tables[n].has_direct_counter else ():
            ent = p4runtime_pb2.Entity()
            dce = ent.direct_counter_entry
            dce.table_entry.CopyFrom(ref_table_entity(sw, n, e, False).table_entry)
            dce.table_entry.ClearField("action")
            dce.data.packet_count, dce.data.byte_count = e.packets, e.bytes
            want.append(ent)
    assert b"".join(raw_read(sw, p4runtime_pb2.DirectCounterEntry())) == serialized(want)
    # counters and registers, with values of every size
    stats = pl.counters[f"{P}stats"]
    stats.write(0, 1, 2**63 - 1)  # CounterData's fields are int64
    stats.write(31, 300, 0)
    want = []
    for i in range(stats.size):
        ent = p4runtime_pb2.Entity()
        ent.counter_entry.counter_id = ids.counter(f"{P}stats")
        ent.counter_entry.index.index = i
        ent.counter_entry.data.packet_count, ent.counter_entry.data.byte_count = stats.read(i)
        want.append(ent)
    request = p4runtime_pb2.CounterEntry(counter_id=ids.counter(f"{P}stats"))
    assert b"".join(raw_read(sw, request)) == serialized(want)
    for reg, index, value in ((f"{P}agg_value", 7, -5), (f"{P}agg_key", 0, 2**64 - 1),
                              (f"{P}cache_iter", 16383, 0)):  # fmt: skip
        pl.registers[reg].write(index, value % (1 << pl.registers[reg].bitwidth))
        req = p4runtime_pb2.RegisterEntry(register_id=ids.register(reg))
        req.index.index = index
        ent = p4runtime_pb2.Entity()
        ent.register_entry.CopyFrom(req)
        ent.register_entry.data.bitstring = canon(pl.registers[reg].read(index))
        assert raw_read(sw, req) == [serialized([ent])]
    stats.write(1, 2**63, 0)  # the state holds 64 bits, P4Runtime's int64 does not
    with pytest.raises(grpc.RpcError) as e:
        raw_read(sw, p4runtime_pb2.CounterEntry())
    assert e.value.code() == grpc.StatusCode.OUT_OF_RANGE


def test_chunks_bound_count_and_bytes():
    from p4rt.wire import chunks

    items = [bytes([i]) * (1 + i % 7) for i in range(50)]
    out = list(chunks(iter(items), max_count=4, max_bytes=12))
    assert b"".join(out) == b"".join(items)
    assert all(len(m) <= 12 for m in out) and len(out) >= 50 // 4
    assert list(chunks(iter([b"x" * 30]), max_bytes=12)) == [b"x" * 30]  # one big entity
    assert list(chunks(iter([]))) == [b""]  # an empty read still answers once


def write_requests(ids: Ids) -> list[bytes]:
    """WriteRequests of many shapes, as bytes, including odd but valid encodings."""
    WR = p4runtime_pb2.WriteRequest
    out = []

    def req(updates, **kw) -> WR:
        r = WR(**kw)
        for kind, entity in updates:
            getattr(r.updates.add(type=kind).entity, entity_field(entity)).CopyFrom(entity)
        return r

    ternary = hot_entry(ids, 1, 2, 3)
    ternary.match[0].ClearField("exact")
    ternary.match[0].ternary.value, ternary.match[0].ternary.mask = b"\x01", b"\xff"
    empty_action = hot_entry(ids, 1, 2, None)
    empty_action.action.SetInParent()
    member = hot_entry(ids, 1, 2, None)
    member.action.action_profile_member_id = 4
    default = p4runtime_pb2.TableEntry(table_id=ids.table(f"{P}drop_sim"), is_default_action=True)
    counted = hot_entry(ids, 1, 5, 6)
    counted.counter_data.packet_count, counted.counter_data.byte_count = 2**63 - 1, 3
    no_kind = hot_entry(ids, 1, 2, 3)
    no_kind.match[1].ClearField("exact")
    ce = p4runtime_pb2.CounterEntry(counter_id=ids.counter(f"{P}stats"))
    ce.index.index = 3
    shapes = [
        [(Update.INSERT, hot_entry(ids, 1, k, k & 0xFFFF)) for k in (0, 1, 2**64 - 1)],
        [(Update.DELETE, hot_entry(ids, 7, 8, None)), (Update.MODIFY, counted)],
        [(Update.INSERT, route_entry(ids, bytes([10, 0, 1, 0]), 24, 2))],
        [(Update.MODIFY, default), (Update.INSERT, ternary), (Update.INSERT, no_kind)],
        [(Update.INSERT, empty_action), (Update.INSERT, member), (Update.MODIFY, ce)],
        [
            (Update.UNSPECIFIED, hot_entry(ids, 1, 2, 3)),
            (Update.INSERT, p4runtime_pb2.TableEntry()),
        ],
        [(Update.INSERT, hot_entry(ids, 1, 2, 3, priority=5, metadata=b"m"))],
    ]
    for updates in shapes:
        r = req(updates)
        r.election_id.high, r.election_id.low = 1, 2**64 - 1
        out.append(r.SerializeToString())
    out.append(req(shapes[0], role="r\u00e9le", atomicity=WR.ROLLBACK_ON_ERROR).SerializeToString())
    out.append(req([]).SerializeToString())
    out.append(b"")
    # protobuf merges concatenated messages: the last scalar wins, repeated fields add up
    out.append(out[0] + req([], device_id=3).SerializeToString() + out[2])
    out.append(out[1] + b"\x0a\x01\xff")  # device_id with the wrong wire type: unknown field
    out.append(out[2] + b"\x32\x02\xc3\x28")  # a role that is not UTF-8
    return out


def agrees_with_protobuf(cases: list[bytes], originals: int, parse, reference, seed: int) -> int:
    """Check a hand-written parser against protobuf on `cases` and on 3000 corrupted copies
    of the first `originals` (truncated, flipped, spliced bytes): whatever it parses, it
    reads as `reference` reads protobuf's message (None: protobuf rejects it, or it is not
    the parser's shape); it may hand anything to protobuf (Fallback). Returns how many it
    parsed itself."""
    import random

    from p4rt.proto import Fallback

    cases = list(cases)
    rng = random.Random(seed)
    for _ in range(3000):
        data = bytearray(rng.choice(cases[:originals]))
        if not data:
            continue
        i = rng.randrange(len(data))
        op = rng.randrange(3)
        if op == 0:
            data[i] = rng.randrange(256)
        elif op == 1:
            del data[i:]
        else:
            data[i:i] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4)))
        cases.append(bytes(data))
    fast = 0
    for data in cases:
        try:
            want = reference(data)
        except Exception:
            want = None
        try:
            got = parse(data)
        except Fallback:
            continue
        assert want is not None, f"protobuf reads {data.hex()} otherwise, the parser took it"
        assert got == want, data.hex()
        fast += 1
    return fast


def test_write_parser_reads_what_protobuf_reads(p4info):
    from p4rt.wire import parse_write_request, write_in

    ids = Ids(p4info)

    def reference(data: bytes):
        return write_in(p4runtime_pb2.WriteRequest.FromString(data))

    fast = agrees_with_protobuf(write_requests(ids), 7, parse_write_request, reference, 5)
    assert fast > 100  # the fast path is the one normally taken
    for data in write_requests(ids)[:3]:
        parse_write_request(data)  # the common shapes never need protobuf


def counter_reads() -> list[bytes]:
    """ReadRequests of counter cells (the fast path's shape) and near misses."""
    out = []
    for cells, extra in (
        ([(0x1234, 5), (0x1234, 0), (7, None)], None),
        ([(0, None)], None),  # every counter
        ([(2**32 - 1, 2**63 - 1)], None),
        ([(3, -1)], None),  # a negative index: protobuf's
        ([(3, 1)], "role"),
        ([(3, 1)], "data"),
        ([(3, 1)], "register"),
        ([], None),
    ):
        req = p4runtime_pb2.ReadRequest(device_id=9)
        for counter_id, index in cells:
            ce = req.entities.add().counter_entry
            ce.counter_id = counter_id
            if index is not None:
                ce.index.index = index
            if extra == "data":
                ce.data.packet_count = 1
        if extra == "role":
            req.role = "sketch"
        if extra == "register":
            req.entities.add().register_entry.register_id = 4
        out.append(req.SerializeToString())
    return out


def test_counter_read_parser_reads_what_protobuf_reads():
    from p4rt.wire import CounterReadIn, parse_counter_read

    def reference(data: bytes) -> CounterReadIn | None:
        req = p4runtime_pb2.ReadRequest.FromString(data)
        if req.role or any(e.WhichOneof("entity") != "counter_entry" for e in req.entities):
            return None
        cells = []
        for e in req.entities:
            ce = e.counter_entry
            if ce.HasField("data"):
                return None
            cells.append((ce.counter_id, ce.index.index if ce.HasField("index") else None))
        return CounterReadIn(req.device_id, cells) if cells else None

    assert agrees_with_protobuf(counter_reads(), 3, parse_counter_read, reference, 7) > 100
    for data in counter_reads()[:3]:
        parse_counter_read(data)  # the common shapes never need protobuf


def test_writes_protobuf_must_parse_get_the_same_answers(ready):
    """Requests the fast parser hands to protobuf are answered as before."""
    sw, ids = ready, ready.ids
    call = sw.channel.unary_unary("/p4.v1.P4Runtime/Write")  # bytes in, bytes out
    with pytest.raises(grpc.RpcError) as e:
        call(b"\x22\x05\x01")  # truncated
    assert e.value.code() == grpc.StatusCode.INTERNAL
    assert e.value.details() == "Exception deserializing request!"
    req = p4runtime_pb2.WriteRequest(device_id=0)
    req.election_id.low = 1
    entry = hot_entry(ids, 1, 2, 3, metadata=b"opaque")  # a field the server ignores
    req.updates.add(type=Update.INSERT).entity.table_entry.CopyFrom(entry)
    bad = req.updates.add(type=Update.INSERT).entity.table_entry
    bad.CopyFrom(hot_entry(ids, 1, 4, 3))
    bad.match[0].ClearField("exact")
    bad.match[0].range.low, bad.match[0].range.high = b"\x00", b"\x01"
    with pytest.raises(grpc.RpcError) as e:
        call(req.SerializeToString() + b"\x08\x00")  # device_id again: the last one counts
    errs = batch_errors(e.value)
    assert [x.canonical_code for x in errs] == [code_pb2.OK, code_pb2.INVALID_ARGUMENT]
    assert "job_id is exact, got range" in errs[1].message
    assert sw.pipeline.tables[HOT0].get((1, 2)).params == (3,)


# --- abuse: roles and election ids, big failing batches, idle streams, bad bytes ---


class Stream:
    """A raw StreamChannel that sends what the test puts in `out` (None ends it)."""

    def __init__(self, stub, timeout: float = 30) -> None:
        self.out: queue.Queue = queue.Queue()
        self.call = stub.StreamChannel(iter(self.out.get, None), timeout=timeout)

    def arbitrate(self, election: tuple[int, int] | None, role: str = "") -> Stream:
        req = p4runtime_pb2.StreamMessageRequest()
        req.arbitration.device_id = 0
        if role:
            req.arbitration.role.name = role
        if election is not None:
            req.arbitration.election_id.high, req.arbitration.election_id.low = election
        self.out.put(req)
        return self

    def first(self) -> p4runtime_pb2.StreamMessageResponse:
        return next(self.call)

    def close(self) -> None:
        self.out.put(None)
        self.call.cancel()


def write_as(sw, updates, role: str = "", election: tuple[int, int] | None = (0, 1)):
    req = p4runtime_pb2.WriteRequest(device_id=0, role=role)
    if election is not None:
        req.election_id.high, req.election_id.low = election
    for kind, entity in updates:
        getattr(req.updates.add(type=kind).entity, entity_field(entity)).CopyFrom(entity)
    return sw.stub.Write(req, timeout=10)


def code_of(call) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as e:
        call()
    return e.value.code()


def test_writes_need_a_known_role_and_its_primary(ready):
    sw, ids = ready, ready.ids
    entry = hot_entry(ids, 1, 2, 3)
    ins = [(Update.INSERT, entry)]
    # the case: unknown role, no election id, while the default role has a primary
    assert code_of(lambda: write_as(sw, ins, role="nosuch", election=None)) == (
        grpc.StatusCode.NOT_FOUND
    )
    assert code_of(lambda: write_as(sw, ins, role="nosuch")) == grpc.StatusCode.NOT_FOUND
    assert code_of(lambda: write_as(sw, ins, election=None)) == grpc.StatusCode.PERMISSION_DENIED
    assert code_of(lambda: write_as(sw, ins, election=(0, 0))) == grpc.StatusCode.PERMISSION_DENIED
    assert code_of(lambda: write_as(sw, ins, election=(1, 1))) == grpc.StatusCode.PERMISSION_DENIED
    req = SetReq(device_id=0, action=SetReq.VERIFY_AND_COMMIT, role="nosuch")
    req.config.p4info.CopyFrom(ids.info)
    assert code_of(lambda: sw.stub.SetForwardingPipelineConfig(req)) == grpc.StatusCode.NOT_FOUND
    assert len(sw.pipeline.tables[HOT0]) == 0
    # a role exists once a stream arbitrates for it; election id 0 is a valid id, unset is not
    s = Stream(sw.stub).arbitrate((0, 0), role="other")
    assert s.first().arbitration.status.code == code_pb2.OK
    write_as(sw, ins, role="other", election=(0, 0))
    assert code_of(lambda: write_as(sw, [(Update.DELETE, entry)], role="other", election=None)) == (
        grpc.StatusCode.PERMISSION_DENIED
    )
    s.close()
    time.sleep(0.3)
    # known role, no stream open: PERMISSION_DENIED (no longer NOT_FOUND, nor accepted)
    assert code_of(
        lambda: write_as(sw, [(Update.DELETE, entry)], role="other", election=(0, 0))
    ) == (grpc.StatusCode.PERMISSION_DENIED)
    write_as(sw, [(Update.DELETE, entry)])  # the default role's primary is unaffected
    assert len(sw.pipeline.tables[HOT0]) == 0


def test_role_names_and_counts_are_bounded(ready):
    sw = ready
    long = Stream(sw.stub).arbitrate((0, 1), role="r" * 300)
    assert code_of(long.first) == grpc.StatusCode.INVALID_ARGUMENT
    streams = [Stream(sw.stub).arbitrate((0, 1), role=f"role{i}") for i in range(16)]
    for st in streams:
        assert st.first().arbitration.status.code == code_pb2.OK
    extra = Stream(sw.stub).arbitrate((0, 1), role="one-too-many")
    assert code_of(extra.first) == grpc.StatusCode.RESOURCE_EXHAUSTED
    for st in streams:
        st.close()


def test_higher_election_id_takes_over(ready, clients):
    sw, ids = ready, ready.ids
    first = sw.client  # 0:1
    clients((0, 9))
    assert arbitration_of(first).status.code == code_pb2.ALREADY_EXISTS
    assert code_of(lambda: write_as(sw, [(Update.INSERT, hot_entry(ids, 1, 2, 3))])) == (
        grpc.StatusCode.PERMISSION_DENIED
    )
    write_as(sw, [(Update.INSERT, hot_entry(ids, 1, 2, 3))], election=(0, 9))
    dup = Stream(sw.stub).arbitrate((0, 9))  # a live controller's id: refused, per spec
    assert code_of(dup.first) == grpc.StatusCode.INVALID_ARGUMENT


def trailer_bytes(err: grpc.RpcError) -> int:
    return sum(len(k) + len(v) for k, v in err.trailing_metadata()) + len(err.details())


def test_big_failing_batch_gives_a_readable_error(ready):
    """600 updates, one failing: the per-update list would exceed the 8 KiB of trailers a
    gRPC client accepts (it answered RESOURCE_EXHAUSTED "received metadata size exceeds
    hard limit"); now a default client gets UNKNOWN with a message naming the failure."""
    sw, ids = ready, ready.ids
    write_as(sw, [(Update.INSERT, hot_entry(ids, 1, 5, 1))])
    updates = [(Update.INSERT, hot_entry(ids, 1, 1000 + k, 1)) for k in range(599)]
    updates.insert(321, (Update.INSERT, hot_entry(ids, 1, 5, 2)))
    with pytest.raises(grpc.RpcError) as e:
        write_as(sw, updates)
    assert e.value.code() == grpc.StatusCode.UNKNOWN
    msg = e.value.details()
    assert msg.startswith("1 of 600 updates failed (1 ALREADY_EXISTS)")
    assert "update 321: ALREADY_EXISTS" in msg and "smaller batches" in msg
    status = status_pb2.Status.FromString(dict(e.value.trailing_metadata())[STATUS_DETAILS_KEY])
    assert status.message == msg and not status.details
    assert trailer_bytes(e.value) < 8000
    assert len(sw.pipeline.tables[HOT0]) == 600  # the other 599 were applied


def test_failing_batch_of_100_keeps_every_code(ready):
    """All 100 updates fail with long messages: the list stays complete (one Error per
    update, in order, as the spec wants), the messages after the first five are dropped."""
    sw, ids = ready, ready.ids
    updates = []
    for k in range(100):
        e = hot_entry(ids, 1, k, 1)
        e.match[0].exact.value = b"\xff" * 40  # does not fit job_id's 16 bits
        updates.append((Update.INSERT, e))
    updates[7] = (Update.DELETE, hot_entry(ids, 1, 77, None))
    with pytest.raises(grpc.RpcError) as e:
        write_as(sw, updates)
    errs = batch_errors(e.value)
    assert len(errs) == 100
    assert errs[7].canonical_code == code_pb2.NOT_FOUND
    assert {x.canonical_code for i, x in enumerate(errs) if i != 7} == {code_pb2.INVALID_ARGUMENT}
    assert all(x.message for x in errs[:5]) and not any(x.message for x in errs[5:])
    assert "after the first 5 failures left out" in e.value.details()
    assert trailer_bytes(e.value) < 8000


def test_huge_value_is_not_echoed(ready):
    sw, ids = ready, ready.ids
    e = hot_entry(ids, 1, 2, 3)
    e.match[1].exact.value = b"\x01" * (1 << 20)  # 1 MB for a 64-bit key
    with pytest.raises(grpc.RpcError) as err:
        write_as(sw, [(Update.INSERT, e)])
    (x,) = batch_errors(err.value)
    assert x.canonical_code == code_pb2.INVALID_ARGUMENT
    assert "(1048576 bytes)" in x.message and len(x.message) < 200
    assert trailer_bytes(err.value) < 2000


def test_read_of_unknown_ids(ready):
    sw = ready
    for ent in (
        p4runtime_pb2.TableEntry(table_id=0x02FFFFFF),
        p4runtime_pb2.CounterEntry(counter_id=0x12FFFFFF),
        p4runtime_pb2.RegisterEntry(register_id=0x0FFFFFFF),
    ):
        assert code_of(lambda ent=ent: read(sw, ent)) == grpc.StatusCode.INVALID_ARGUMENT
    req = p4runtime_pb2.ReadRequest(device_id=0)
    req.entities.add()  # the spec: an empty Entity is INVALID_ARGUMENT
    assert code_of(lambda: list(sw.stub.Read(req))) == grpc.StatusCode.INVALID_ARGUMENT


@pytest.fixture
def idle_sw(clients, p4info):
    """A switch whose streams must arbitrate within 1.5 s, with a primary and a pipeline."""
    s = Switch(arbitration_timeout=1.5)
    clients.sw = s
    s.client = clients((0, 1))
    set_pipeline(s.stub, p4info)
    s.ids = Ids(p4info)
    yield s
    for c in list(clients.live):
        clients.close(c)
    s.channel.close()
    s.server.stop(grace=None)


def test_streams_that_never_arbitrate_cannot_starve_the_server(idle_sw):
    """40 streams that send nothing: 8 wait (then are closed), the rest are refused at
    once; meanwhile Write, Read and GetForwardingPipelineConfig are answered."""
    sw = idle_sw
    idle = [Stream(sw.stub) for _ in range(40)]
    start = time.monotonic()
    write_as(sw, [(Update.INSERT, hot_entry(sw.ids, 1, 2, 3))])
    assert len(read(sw, hot_entry(sw.ids, 1, 2, None))) == 1
    sw.stub.GetForwardingPipelineConfig(GetReq(device_id=0), timeout=5)
    assert time.monotonic() - start < 1.5  # not waiting for the idle streams' timeout
    codes = collections.Counter(s.call.code() for s in idle)
    assert codes == {
        grpc.StatusCode.RESOURCE_EXHAUSTED: 32,
        grpc.StatusCode.FAILED_PRECONDITION: 8,
    }
    timed_out = next(s for s in idle if s.call.code() == grpc.StatusCode.FAILED_PRECONDITION)
    assert "MasterArbitrationUpdate within 1.5 s" in timed_out.call.details()
    for s in idle:
        s.close()
    # once they are gone, a new stream can arbitrate again
    late = Stream(sw.stub).arbitrate((0, 5))
    assert late.first().arbitration.status.code == code_pb2.OK
    late.close()


def test_arbitrated_streams_leave_threads_for_unary_rpcs(idle_sw):
    """Backup streams of two roles up to the cap (24 of 32 threads): the next is refused,
    and unary RPCs are still answered."""
    sw = idle_sw
    held = []
    for i in range(23):  # each arbitrated before the next opens: the cap on streams still
        # waiting for their arbitration (8) would refuse some on a busy machine
        held.append(Stream(sw.stub).arbitrate((0, 100 + i), role=f"r{i % 2}"))
        held[-1].first()
    extra = Stream(sw.stub).arbitrate((0, 999), role="r0")
    assert code_of(extra.first) == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "too many open streams" in extra.call.details()
    write_as(sw, [(Update.INSERT, hot_entry(sw.ids, 1, 2, 3))])
    sw.stub.GetForwardingPipelineConfig(GetReq(device_id=0), timeout=5)
    for st in held:
        st.close()


@pytest.mark.parametrize(
    "method",
    ["Write", "SetForwardingPipelineConfig", "GetForwardingPipelineConfig", "Capabilities"],
)
def test_undecodable_request_logs_one_line(sw, caplog, method):
    with caplog.at_level(logging.INFO):
        call = sw.channel.unary_unary(f"/p4.v1.P4Runtime/{method}")
        with pytest.raises(grpc.RpcError) as e:
            call(b"\x22\x05\x01", timeout=5)
        assert e.value.code() == grpc.StatusCode.INTERNAL
        assert e.value.details() == "Exception deserializing request!"
    records = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(records) == 1 and records[0].exc_info is None
    assert "undecodable" in records[0].getMessage()


def test_undecodable_read_and_stream_log_one_line(sw, caplog):
    with caplog.at_level(logging.INFO):
        with pytest.raises(grpc.RpcError) as e:
            list(sw.channel.unary_stream("/p4.v1.P4Runtime/Read")(b"\x22\x05\x01", timeout=5))
        assert e.value.code() == grpc.StatusCode.INTERNAL
        stream = sw.channel.stream_stream("/p4.v1.P4Runtime/StreamChannel")
        with pytest.raises(grpc.RpcError) as e:
            list(stream(iter([b"\x22\x05\x01"]), timeout=5))
        assert e.value.code() == grpc.StatusCode.INTERNAL
    records = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(records) == 2 and all(r.exc_info is None for r in records)
