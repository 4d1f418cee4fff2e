"""The controller library against the embedded switch's real P4Runtime server (in process,
127.0.0.1 port 0). Assertions read the server's pipeline state directly where they can."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from google.rpc import status_pb2
from p4.v1 import p4runtime_pb2

from contract.constants import CPU_PORT, HOT_KEYS_SIZE, MAX_JOBS, MAX_WORKERS
from contract.constants import MAX_ENTRIES as INSTANCES
from contract.frames import push_frame
from contract.names import hot_keys_table as table
from contract.names import set_slot_action as set_slot
from contract.p4files import P4INFO_PATH as COMMITTED_P4INFO
from controller.client import SwitchClient
from controller.drop_sim import DropSim, rate_of
from controller.errors import (
    AlreadyExists,
    BadInput,
    BudgetExceeded,
    ControllerError,
    EntryExists,
    NoPipeline,
    NotFound,
    NotPrimary,
    PipelineMismatch,
    RpcFailed,
    SwitchUnreachable,
    TableFull,
    UnknownJob,
    translate_rpc_error,
)
from controller.forwarding import Forwarding, Route, compute_routes, load_routes_topology
from controller.hot_keys import HotKeys
from controller.jobs import Jobs
from controller.leaves import ChainNext, ServiceAddress, address_of
from controller.p4info import P4Info
from controller.stats import Stats
from controller.tenancy import Admission, Tenancy, admission, admissions_from_topology
from p4rt import wire
from softswitch.p4rt import P4RuntimeServer
from softswitch.pipeline import Pipeline
from softswitch.state import Table
from topologies.topology import parse_topology

REPO = Path(__file__).resolve().parent.parent
# HOTAGG_P4INFO lets the same tests run with another P4Info (e.g. p4c's output in build/).
P4INFO_PATH = Path(os.environ.get("HOTAGG_P4INFO", COMMITTED_P4INFO))


@dataclass
class Switch:
    addr: str
    pipeline: Pipeline
    server: P4RuntimeServer
    p4info: P4Info

    def client(self, election_id: tuple[int, int] = (0, 1)) -> SwitchClient:
        return SwitchClient(self.addr, 0, election_id, timeout=5).connect()

    def hot(self, i: int) -> Table:
        return self.pipeline.tables[table(i)]


@pytest.fixture(name="bare_switch")
def bare_switch_fixture() -> Iterator[Switch]:
    """A fresh embedded switch serving P4Runtime, without a pipeline config."""
    if not P4INFO_PATH.exists():
        pytest.skip(f"{P4INFO_PATH} is missing")
    pipeline = Pipeline(seed=1)
    server = P4RuntimeServer(pipeline, address="127.0.0.1:0")
    port = server.start()
    yield Switch(f"127.0.0.1:{port}", pipeline, server, P4Info.from_file(P4INFO_PATH))
    server.stop(0)


@pytest.fixture(name="switch")
def switch_fixture(bare_switch: Switch) -> Switch:
    with bare_switch.client() as c:
        c.set_pipeline(bare_switch.p4info.message)
    return bare_switch


@pytest.fixture
def client(switch: Switch) -> Iterator[SwitchClient]:
    c = switch.client()
    yield c
    c.close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket is closed


# --- encoding ---


def test_entry_encoder_bytes_equal_protobuf_serialization(switch: Switch) -> None:
    p4 = switch.p4info
    cases = [
        (table(3), set_slot(3), {"job_id": 0, "key": 0}, {"offset": 0}),
        (table(0), set_slot(0), {"job_id": 0xFFFF, "key": 2**64 - 1}, {"offset": 2**32 - 1}),
        ("HotaggIngress.jobs", "HotaggIngress.set_job", {"job_id": 258},
         {"job_index": 3, "slot_base": 300, "slot_count": 1 << 20}),
        ("HotaggIngress.ipv4_lpm", "HotaggIngress.ipv4_forward", {"dst_addr": (0x0A000100, 24)},
         {"dst_mac": 0x080000000111, "port": 511}),
        ("HotaggIngress.ipv4_lpm", "HotaggIngress.drop", {"dst_addr": (0, 0)}, {}),
    ]  # fmt: skip
    for tbl, action, match, params in cases:
        msg = p4.table_entry(tbl, match, action, params)
        fast = p4.encoder(tbl, action)(tuple(match.values()), tuple(params.values()))
        assert fast == msg.SerializeToString(), tbl
        assert (
            p4.encoder(tbl)(tuple(match.values())) == p4.table_entry(tbl, match).SerializeToString()
        )
        upd = p4runtime_pb2.Update(type=p4runtime_pb2.Update.DELETE)
        upd.entity.table_entry.CopyFrom(msg)
        assert wire.update(upd.type, fast) == upd.SerializeToString()
    req = p4runtime_pb2.WriteRequest(device_id=7, updates=[upd])
    req.election_id.high, req.election_id.low = 1, 2**64 - 1
    assert wire.write_request(7, (1, 2**64 - 1), [upd.SerializeToString()], 0) == (
        req.SerializeToString()
    )


def test_read_reply_decoders_agree_with_protobuf() -> None:
    # p4rt.wire reads counter entries and hot-key table entries out of serialized
    # ReadResponses (the bulk reads of the online loop); protobuf's own parse is the truth,
    # over zero values (omitted on the wire), 64-bit counts and fields the decoders skip.
    reply = p4runtime_pb2.ReadResponse()
    cells = [(0x1234, 0, 0, 0), (0x1234, 4095, 2**63 - 1, 7), (0x0300_0001, 300, 5, 2**40)]
    for counter_id, index, nbytes, packets in cells:
        ce = reply.entities.add().counter_entry
        ce.counter_id, ce.index.index = counter_id, index
        ce.data.byte_count, ce.data.packet_count = nbytes, packets
    reply.entities.add().register_entry.register_id = 9  # another kind: skipped
    assert list(wire.counter_entries(reply.SerializeToString())) == cells
    tables = p4runtime_pb2.ReadResponse()
    rows = [(0x0200_0001, {1: b"\x01", 2: b"\xff" * 8}, 3), (0x0200_0002, {1: b"", 2: b"\x05"}, 0)]
    for table_id, match, packets in rows:
        te = tables.entities.add().table_entry
        te.table_id, te.priority, te.is_default_action = table_id, 3, False
        for field_id, value in match.items():
            m = te.match.add(field_id=field_id)
            m.exact.value = value
        te.action.action.action_id = 77  # skipped
        te.action.action.params.add(param_id=1, value=b"\x09")
        te.counter_data.packet_count, te.counter_data.byte_count = packets, 1000
    # the empty exact value is absent on the wire, so it reads as b"" as protobuf says
    assert list(wire.table_entry_counters(tables.SerializeToString())) == rows
    parsed = p4runtime_pb2.ReadResponse.FromString(tables.SerializeToString())
    assert [e.table_entry.counter_data.packet_count for e in parsed.entities] == [3, 0]
    # ... and the request side: cells to read, index 0 included
    req = p4runtime_pb2.ReadRequest(device_id=5)
    for counter_id, index in ((0x1234, 0), (0x0300_0001, 4095), (1, 2**63 - 1)):
        ce = req.entities.add().counter_entry
        ce.counter_id, ce.index.index = counter_id, index
    fast = [wire.counter_entity(e.counter_entry.counter_id, e.counter_entry.index.index)
            for e in req.entities]  # fmt: skip
    assert wire.read_request(5, fast) == req.SerializeToString()


@pytest.mark.parametrize(
    ("match", "needle"),
    [
        ({"job_id": 1 << 16, "key": 1}, "does not fit in 16 bits"),
        ({"job_id": 1, "key": -1}, "does not fit"),
        ({"job_id": 1}, "missing"),
        ({"job_id": 1, "key": 1, "x": 2}, "no match field"),
    ],
)
def test_bad_matches_are_refused_before_sending(switch: Switch, match: dict, needle: str) -> None:
    with pytest.raises(BadInput, match=needle):
        switch.p4info.table_entry(table(0), match, set_slot(0), {"offset": 1})


def test_lpm_with_bits_past_the_prefix_is_refused(switch: Switch) -> None:
    with pytest.raises(BadInput, match="beyond the prefix"):
        switch.p4info.table_entry("HotaggIngress.ipv4_lpm", {"dst_addr": (0x0A000001, 24)})


# --- session, arbitration, pipeline ---


def test_unreachable_switch_fails_fast() -> None:
    start = time.monotonic()
    with pytest.raises(SwitchUnreachable, match="unreachable"):
        SwitchClient(f"127.0.0.1:{closed_port()}", timeout=5).connect()
    assert time.monotonic() - start < 3


def test_no_pipeline_then_push_and_get(bare_switch: Switch) -> None:
    with bare_switch.client() as c:
        assert c.is_primary and c.api_version()
        with pytest.raises(NoPipeline):
            c.get_pipeline()
        c.set_pipeline(bare_switch.p4info.message)
        assert P4Info(c.get_pipeline()).mismatches(bare_switch.p4info) == []


def test_pipeline_that_does_not_fit_is_refused(bare_switch: Switch) -> None:
    bad = P4Info(bare_switch.p4info.message).message.__deepcopy__()
    bad.tables[0].preamble.name = "HotaggIngress.no_such_table"
    with bare_switch.client() as c, pytest.raises(PipelineMismatch, match="refused"):
        c.set_pipeline(bad)


def test_backup_controller_cannot_write_until_primary_leaves(switch: Switch) -> None:
    primary = switch.client((0, 10))
    backup = switch.client((0, 5))
    try:
        assert primary.is_primary and not backup.is_primary
        with pytest.raises(NotPrimary, match="not the primary"):
            Jobs(backup, switch.p4info).add(1, 8)
        assert len(switch.pipeline.tables["HotaggIngress.jobs"]) == 0
        Jobs(primary, switch.p4info).add(1, 8)
        with pytest.raises(ControllerError, match="already used"):
            switch.client((0, 10))  # a second controller with the primary's id
        primary.close()
        deadline = time.monotonic() + 5
        while not backup.is_primary and time.monotonic() < deadline:
            time.sleep(0.01)
        assert backup.is_primary
        Jobs(backup, switch.p4info).add(2, 8)
        assert len(switch.pipeline.tables["HotaggIngress.jobs"]) == 2
    finally:
        primary.close()
        backup.close()


def test_write_errors_carry_per_update_indices(client: SwitchClient, switch: Switch) -> None:
    enc = switch.p4info.encoder(table(0), set_slot(0))
    client.write_entries("insert", [enc((1, 10), (0,))])
    batch = [enc((1, k), (k,)) for k in (11, 10, 12, 10)]
    with pytest.raises(EntryExists) as exc:
        client.write_entries("insert", batch)
    assert [e.index for e in exc.value.errors] == [1, 3]
    assert {e.code for e in exc.value.errors} == {"ALREADY_EXISTS"}
    assert {e.match[1] for e in switch.hot(0).entries()} == {10, 11, 12}  # rest applied


def test_higher_election_id_takes_over(switch: Switch) -> None:
    first = switch.client((0, 5))
    second = None
    try:
        Jobs(first, switch.p4info).add(1, 8)
        second = switch.client((0, 6))
        with pytest.raises(NotPrimary):
            Jobs(first, switch.p4info).add(2, 8)
        Jobs(second, switch.p4info).add(2, 8)
        assert len(switch.pipeline.tables["HotaggIngress.jobs"]) == 2
    finally:
        first.close()
        if second is not None:
            second.close()


class FakeRpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str, trailers: tuple = ()) -> None:
        self._code, self._details, self._trailers = code, details, trailers

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple:
        return self._trailers


def test_oversized_error_is_not_reported_as_a_full_table() -> None:
    err = FakeRpcError(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "Stream removed (received metadata size exceeds hard limit (value length 21115 vs. 16384))",
    )
    out = translate_rpc_error(err, "sw", "Write", 0, 600)
    assert type(out) is RpcFailed and "too large to receive" in str(out)


def test_error_list_of_another_length_is_not_indexed() -> None:
    """A server that lists failed updates only: its positions are not update indices."""
    status = status_pb2.Status(code=2, message="1 of 3 updates failed")
    status.details.add().Pack(p4runtime_pb2.Error(canonical_code=6, message="exists"))
    trailers = (("grpc-status-details-bin", status.SerializeToString()),)
    err = FakeRpcError(grpc.StatusCode.UNKNOWN, status.message, trailers)
    assert type(translate_rpc_error(err, "sw", "Write", 0, 3)) is RpcFailed
    assert translate_rpc_error(err, "sw", "Write", 0, 1).errors[0].code == "ALREADY_EXISTS"


# --- jobs ---


def test_jobs_get_disjoint_slot_ranges_and_indices(client: SwitchClient, switch: Switch) -> None:
    jobs = Jobs(client, switch.p4info)
    a, b = jobs.add(1, 100), jobs.add(2, 50)
    assert (a.slot_base, a.slot_end, b.slot_base) == (0, 100, 100)
    assert a.job_index != b.job_index
    entry = switch.pipeline.tables["HotaggIngress.jobs"].get((2,))
    assert entry.params == (b.job_index, 100, 50)
    jobs.remove(1)
    c = jobs.add(3, 60)  # first fit: the hole job 1 left
    assert (c.slot_base, c.job_index) == (0, a.job_index)
    assert [j.job_id for j in jobs.list()] == [2, 3]
    with pytest.raises(AlreadyExists):
        jobs.add(2, 1)
    with pytest.raises(UnknownJob):
        jobs.get(99)
    with pytest.raises(BudgetExceeded, match="consecutive"):
        jobs.add(4, 16384)


def test_job_indices_run_out_at_max_jobs(client: SwitchClient, switch: Switch) -> None:
    jobs = Jobs(client, switch.p4info)
    for j in range(MAX_JOBS):
        jobs.add(j, 1)
    with pytest.raises(BudgetExceeded, match="job indices"):
        jobs.add(MAX_JOBS, 1)


# --- hot keys ---


def test_install_writes_every_instance_with_one_offset(
    client: SwitchClient, switch: Switch
) -> None:
    job = Jobs(client, switch.p4info).add(1, 16)
    hot = HotKeys(client, switch.p4info)
    report = hot.install(job, [5, 2**64 - 1, 7, 5])
    assert report.added == [(5, 0), (2**64 - 1, 1), (7, 2)]
    assert report.entries_written == 3 * INSTANCES
    for i in range(INSTANCES):
        assert {e.match: e.params for e in switch.hot(i).entries()} == {
            (1, 5): (0,),
            (1, 2**64 - 1): (1,),
            (1, 7): (2,),
        }
    assert hot.evict(1, [2**64 - 1]) == 1
    assert all(len(switch.hot(i)) == 2 for i in range(INSTANCES))
    again = hot.install(job, [7, 9])  # 9 takes the freed offset 1
    assert again.added == [(9, 1)] and again.kept == 1
    with pytest.raises(NotFound, match="not hot"):
        hot.evict(1, [12345])
    assert [hk.key for hk in hot.list(1)] == [5, 7, 9]
    assert hot.clear(1) == 3
    assert all(len(switch.hot(i)) == 0 for i in range(INSTANCES))


def test_replace_evicts_the_rest(client: SwitchClient, switch: Switch) -> None:
    job = Jobs(client, switch.p4info).add(1, 3)
    hot = HotKeys(client, switch.p4info)
    hot.install(job, [1, 2, 3])
    report = hot.install(job, [3, 4, 5], replace=True)
    assert report.evicted == 2 and report.kept == 1
    assert sorted((hk.key, hk.offset) for hk in hot.list(1)) == [(3, 2), (4, 0), (5, 1)]


def test_job_slot_budget_is_checked_before_writing(client: SwitchClient, switch: Switch) -> None:
    job = Jobs(client, switch.p4info).add(1, 4)
    hot = HotKeys(client, switch.p4info)
    hot.install(job, [1, 2])
    with pytest.raises(BudgetExceeded, match="4 slots, 2 in use"):
        hot.install(job, [3, 4, 5])
    assert len(switch.hot(0)) == 2 and len(switch.hot(7)) == 2


def test_interrupted_writes_are_repaired(client: SwitchClient, switch: Switch) -> None:
    job = Jobs(client, switch.p4info).add(1, 8)
    hot = HotKeys(client, switch.p4info)
    hot.install(job, [40])
    # An install of 41 that stopped after instances 7..3 (inserts go 7..0).
    for i in range(3, INSTANCES):
        switch.hot(i).insert((1, 41), set_slot(i), (6,))
    assert [hk.key for hk in hot.list(1)] == [40]
    orphan = hot.list(1, all_instances=True)[1]
    assert not orphan.complete and orphan.offsets == [None] * 3 + [6] * 5
    report = hot.install(job, [41])
    assert report.added == [(41, 1)] and report.repaired == 5
    assert all(switch.hot(i).get((1, 41)).params == (1,) for i in range(INSTANCES))
    assert all(hk.complete for hk in hot.list(1, all_instances=True))
    # An evict that stopped after instances 0..4 (deletes go 0..7): evict again is fine.
    for i in range(5):
        switch.hot(i).delete((1, 40))
    hot.install(job, [40])
    switch.hot(6).delete((1, 40))
    assert hot.evict(1, [40]) == 1
    assert all(len(switch.hot(i)) == 1 for i in range(INSTANCES))
    switch.hot(2).insert((1, 77), set_slot(2), (3,))  # an orphan that clear must remove
    assert hot.clear(1) == 1
    assert all(len(switch.hot(i)) == 0 for i in range(INSTANCES))


def test_full_table_raises_table_full(client: SwitchClient, switch: Switch) -> None:
    enc = switch.p4info.encoder(table(0), set_slot(0))
    client.write_entries("insert", [enc((9, k), (0,)) for k in range(HOT_KEYS_SIZE)])
    with pytest.raises(TableFull) as exc:
        client.write_entries("insert", [enc((9, -1 % 2**64), (0,)), enc((9, 0), (0,))])
    assert exc.value.errors[0].code == "RESOURCE_EXHAUSTED" and exc.value.errors[0].index == 0


def test_hit_counters_sum_over_instances(client: SwitchClient, switch: Switch) -> None:
    job = Jobs(client, switch.p4info).add(1, 8)
    hot = HotKeys(client, switch.p4info)
    hot.install(job, [5, 6])
    Tenancy(client, switch.p4info).admit([admission(1, 0, 1, "10.0.0.1")])  # push_frame's
    frame = push_frame(1, [5, 6, 5, 77])  # 77 is cold
    switch.pipeline.process(1, frame)
    by_key = {hk.key: hk for hk in hot.list(1, counters=True)}
    assert by_key[5].packets == 2 and by_key[5].instance_packets[:3] == [1, 0, 1]
    assert by_key[6].packets == 1 and by_key[6].bytes == len(frame)
    cells = {c.name: c.packets for c in Stats(client, switch.p4info).read()}
    assert cells["PUSH"] == 1 and cells["HOT_APPLIED"] == 3 and cells["COLD_FORWARDED"] == 1
    per_table = [c.packets for c in Stats(client, switch.p4info).hot_key_hits()]
    assert per_table == [1, 1, 1, 0, 0, 0, 0, 0]
    Stats(client, switch.p4info).clear()
    assert all(c.packets == 0 for c in Stats(client, switch.p4info).read())


# --- drop simulator, forwarding, packets ---


def test_drop_rate_reaches_the_data_plane(client: SwitchClient, switch: Switch) -> None:
    sim = DropSim(client, switch.p4info)
    assert sim.get() == 0
    assert sim.set(0.05) == round(0.05 * 65536) == sim.get()
    assert switch.pipeline.tables["HotaggIngress.drop_sim"].default()[1] == (3277,)
    sim.set(1.0)
    Jobs(client, switch.p4info).add(1, 8)
    assert switch.pipeline.process(1, push_frame(1, [1])) == []
    assert {c.name: c.packets for c in Stats(client, switch.p4info).read()}["SIM_DROP"] == 1
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(BadInput):
            rate_of(bad)


def test_service_address_and_chain_next_reach_the_data_plane(
    client: SwitchClient, switch: Switch
) -> None:
    tables = switch.pipeline.tables
    for cls, name, action in (
        (ServiceAddress, "service_address", "set_service_address"),
        (ChainNext, "chain_next", "set_chain_next"),
    ):
        setting = cls(client, switch.p4info)
        assert setting.get() == 0
        assert setting.set("10.0.2.254") == 0x0A0002FE == setting.get()
        assert tables["HotaggIngress." + name].default() == (
            "HotaggIngress." + action,
            (0x0A0002FE,),
        )
        setting.clear()
        assert setting.get() == 0 and tables["HotaggIngress." + name].default()[1] == (0,)
    assert address_of(0x0A000001) == address_of("10.0.0.1")
    for bad in ("10.0.0.256", "h1", "", -1, 1 << 32):
        with pytest.raises(BadInput):
            address_of(bad)


TUTORIAL_TOPO = {
    "hosts": {
        "h1": {"ip": "10.0.1.1/24", "mac": "08:00:00:00:01:11"},
        "h2": {"ip": "10.0.2.2/24", "mac": "08:00:00:00:02:22"},
        "h3": {"ip": "10.0.3.3/24", "mac": "08:00:00:00:03:33"},
    },
    "switches": {"s1": {}, "s2": {}, "s3": {"mac": "02:00:00:00:00:03"}},
    "links": [["h1", "s1-p1"], ["h2", "s2-p1"], ["h3", "s3-p1"],
              ["s1-p2", "s2-p2", "0.1ms"], ["s2-p3", "s3-p2"]],
}  # fmt: skip


def test_routes_follow_shortest_paths() -> None:
    s1 = {str(r) for r in compute_routes(parse_topology(TUTORIAL_TOPO), "s1")}
    assert s1 == {
        "10.0.1.1/32 -> port 1 mac 08:00:00:00:01:11",
        "10.0.2.2/32 -> port 2 mac 08:00:00:00:02:00",
        "10.0.3.3/32 -> port 2 mac 08:00:00:00:02:00",
    }
    s2 = {str(r) for r in compute_routes(parse_topology(TUTORIAL_TOPO), "s2")}
    assert "10.0.3.3/32 -> port 3 mac 02:00:00:00:00:03" in s2
    assert "10.0.1.1/32 -> port 2 mac 08:00:00:00:01:00" in s2


def test_forwarding_install_is_idempotent(client: SwitchClient, switch: Switch) -> None:
    routes = compute_routes(load_routes_topology(REPO / "topologies" / "star.json"), "s1")
    fwd = Forwarding(client, switch.p4info)
    assert fwd.install(routes)["inserted"] == len(routes)
    assert fwd.install(routes) == {"inserted": 0, "modified": 0, "deleted": 0}
    moved = [Route(routes[0].prefix, 32, routes[0].dst_mac, 9), *routes[1:]]
    assert fwd.install(moved)["modified"] == 1
    assert fwd.install(moved[1:], replace=True)["deleted"] == 1
    assert fwd.routes() == moved[1:]
    assert len(switch.pipeline.tables["HotaggIngress.ipv4_lpm"]) == len(routes) - 1


def test_packet_out_and_packet_in(client: SwitchClient, switch: Switch) -> None:
    emitted: list[tuple[int, bytes]] = []

    class Dataplane:
        def inject(self, port: int, frame: bytes) -> None:
            emitted.extend(switch.pipeline.process(port, frame))

    switch.server.attach_dataplane(Dataplane())
    client.packet_out(b"\xaa" * 60, {1: (3).to_bytes(2, "big")})
    deadline = time.monotonic() + 5
    while not emitted and time.monotonic() < deadline:
        time.sleep(0.01)
    assert emitted == [(3, b"\xaa" * 60)]
    switch.server.packet_in((7 << 7).to_bytes(2, "big") + b"\xbb" * 60)
    pin = client.packet_in(timeout=5)
    assert pin is not None and pin.payload == b"\xbb" * 60
    assert {m.metadata_id: int.from_bytes(m.value, "big") for m in pin.metadata}[1] == 7
    assert CPU_PORT == 255


def test_install_2000_hot_keys_rate(client: SwitchClient, switch: Switch) -> None:
    job = Jobs(client, switch.p4info).add(1, 2000)
    start = time.perf_counter()
    report = HotKeys(client, switch.p4info).install(job, range(10_000, 12_000))
    elapsed = time.perf_counter() - start
    assert report.entries_written == 2000 * INSTANCES
    assert all(len(switch.hot(i)) == 2000 for i in range(INSTANCES))
    print(f"\ninstalled 2000 hot keys x {INSTANCES} tables: {16000 / elapsed:.0f} entries/s")


# --- tenancy ---


def test_tenancy_from_the_leaf_spine_admits_each_host_where_it_arrives() -> None:
    topo = load_routes_topology(REPO / "topologies" / "leafspine.json")
    workers, ps = [h.name for h in topo.workers], [h.name for h in topo.parameter_servers]
    got = {s: [str(a) for a in admissions_from_topology(topo, s, 7, workers, ps)]
           for s in topo.switches}  # fmt: skip
    # h3, h4 (workers 2, 3) hang off s2 and reach s1 through the spine s3 (s1 port 4); the
    # PS h5's replies to them come into s3 from s1 (port 1) and into s2 from s3 (port 3).
    assert got == {
        "s1": ["job 7 ps: port 3, 10.0.1.5", "job 7 worker 0: port 1, 10.0.1.1",
               "job 7 worker 1: port 2, 10.0.1.2", "job 7 worker 2: port 4, 10.0.2.3",
               "job 7 worker 3: port 4, 10.0.2.4"],
        "s2": ["job 7 ps: port 3, 10.0.1.5", "job 7 worker 2: port 1, 10.0.2.3",
               "job 7 worker 3: port 2, 10.0.2.4"],
        "s3": ["job 7 ps: port 1, 10.0.1.5", "job 7 worker 2: port 2, 10.0.2.3",
               "job 7 worker 3: port 2, 10.0.2.4"],
    }  # fmt: skip
    with pytest.raises(BadInput, match="no switch 's9'"):
        admissions_from_topology(topo, "s9", 7, workers, ps)
    with pytest.raises(BadInput, match="no host 'h9'"):
        admissions_from_topology(topo, "s1", 7, ["h9"], ps)


@pytest.mark.parametrize(
    "args,message",
    [
        ((1, MAX_WORKERS, 1, "10.0.0.1"), f"worker id {MAX_WORKERS}"),
        ((1, 0, 512, "10.0.0.1"), "port 512"),
        ((1 << 16, 0, 1, "10.0.0.1"), "job id"),
        ((1, None, 1, "10.0.0.300"), "not an IPv4 address"),
    ],
)
def test_admission_refuses_what_the_switch_could_not_use(args, message) -> None:
    with pytest.raises(BadInput, match=message):
        admission(*args)


def test_tenancy_install_list_revoke_and_clear(client: SwitchClient, switch: Switch) -> None:
    ten = Tenancy(client, switch.p4info)
    job1 = [admission(1, 0, 1, "10.0.0.1"), admission(1, 1, 2, "10.0.0.2"),
            admission(1, None, 3, "10.0.0.3")]  # fmt: skip
    other = admission(2, 0, 1, "10.0.0.1")
    assert ten.install(1, job1) == {"inserted": 3, "kept": 0, "deleted": 0}
    assert ten.install(1, job1) == {"inserted": 0, "kept": 3, "deleted": 0}  # idempotent
    assert ten.admit([other, job1[0]]) == 1
    assert ten.list(1) == sorted(job1, key=lambda a: (a.worker_id is not None, a.worker_id or 0))
    assert ten.list() == [*ten.list(1), other]
    # What the data plane holds, through the P4Runtime server.
    t = switch.pipeline.tables
    assert {e.match for e in t["HotaggIngress.ps_admission"].entries()} == {(1, 3, 0x0A000003)}
    assert len(t["HotaggIngress.worker_admission"]) == 3
    # replace: the job's other admissions go, another job's stay.
    moved = [admission(1, 0, 4, "10.0.0.1"), job1[2]]
    assert ten.install(1, moved, replace=True) == {"inserted": 1, "kept": 1, "deleted": 2}
    assert set(ten.list()) == {*moved, other}
    assert ten.revoke([moved[0], job1[1]]) == 1
    assert ten.clear(1) == 1 and ten.list() == [other]
    with pytest.raises(BadInput, match="another job"):
        ten.install(1, [other])
    assert Admission(2, 0, 1, 0x0A000001) == other and other.as_dict()["addr"] == "10.0.0.1"
