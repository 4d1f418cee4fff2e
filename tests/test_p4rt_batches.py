"""Big Write batches against both targets (real switch processes, gRPC on loopback).

A failing batch's error lists one p4.v1.Error per update in gRPC trailers, which clients
refuse beyond 8-16 KiB. BMv2 (PI) sends the whole list whatever its size; the embedded
switch shortens it (softswitch/p4rt/errors.py). The controller therefore writes in batches
of controller.client.WRITE_BATCH and accepts large trailers, so orphan repair sees every
update's code on both targets.
"""

from __future__ import annotations

import grpc
import pytest
from p4.v1 import p4runtime_pb2

from contract.constants import MAX_ENTRIES
from contract.names import hot_keys_table, set_slot_action
from controller import cli
from controller.errors import EntryExists
from controller.hot_keys import HotKeys
from controller.jobs import Jobs
from p4rt import wire

JOB = 3  # conftest's jobs are 1 and 2


def orphan(sut, instance: int, key: int, offset: int) -> bytes:
    """A hot-key entry in one instance only, as an interrupted install leaves it."""
    return sut.p4info.table_entry(
        hot_keys_table(instance), {"job_id": JOB, "key": key}, set_slot_action(instance),
        {"offset": offset},
    )  # fmt: skip


def test_install_600_keys_repairs_one_orphan(sut):
    job = Jobs(sut.client, sut.p4info).add(JOB, 700)
    sut.client.write_entries("insert", [orphan(sut, 7, 321, 650)])
    report = HotKeys(sut.client, sut.p4info).install(job, range(600))
    assert report.repaired == 1 and len(report.added) == 600
    hot = HotKeys(sut.client, sut.p4info).list(JOB, all_instances=True)
    assert len(hot) == 600 and all(hk.complete for hk in hot)
    assert next(hk for hk in hot if hk.key == 321).offsets == [321] * MAX_ENTRIES


def test_install_repairs_600_orphans(sut):
    """An install interrupted after instance 7: every entry of every batch there fails."""
    job = Jobs(sut.client, sut.p4info).add(JOB, 700)
    sut.client.write_entries("insert", [orphan(sut, 7, k, 699 - k) for k in range(600)])
    report = HotKeys(sut.client, sut.p4info).install(job, range(600))
    assert report.repaired == 600
    hot = HotKeys(sut.client, sut.p4info).list(JOB, all_instances=True)
    assert len(hot) == 600 and all(hk.complete for hk in hot)


def test_cli_install_of_600_keys_with_an_orphan(sut, capsys):
    """The issue's case: `hotagg-ctl hotkeys install` exited 4, "table full"."""
    Jobs(sut.client, sut.p4info).add(JOB, 700)
    sut.client.write_entries("insert", [orphan(sut, 5, 17, 650)])
    keys = ",".join(map(str, range(600)))
    args = ["--grpc-addr", sut.proc.grpc_addr, "--election-id", "0,2"]
    assert cli.main([*args, "hotkeys", "install", "--job-id", str(JOB), "--keys", keys]) == 0
    assert "600 keys added, 0 kept, 1 repaired" in capsys.readouterr().out


def test_big_failing_batch_reaches_a_default_client(sut):
    """600 inserts of which 100 exist, with gRPC's default limits (what p4runtime-shell and
    most clients use): the embedded switch answers UNKNOWN with a readable message; BMv2
    sends its full list, which the client refuses. The controller (bigger limit, batches of
    100) gets every update's code from both."""
    enc = sut.p4info.encoder(hot_keys_table(0), set_slot_action(0))
    sut.client.write_entries("insert", [enc((1, k), (k % 64,)) for k in range(0, 600, 6)])
    updates = [wire.update(1, enc((1, k), (k % 64,))) for k in range(600)]
    request = wire.write_request(0, (0, 1), updates, 0)
    channel = grpc.insecure_channel(sut.proc.grpc_addr)
    try:
        call = channel.unary_unary(
            "/p4.v1.P4Runtime/Write",
            request_serializer=None,
            response_deserializer=p4runtime_pb2.WriteResponse.FromString,
        )
        try:
            call(request, timeout=30)
            raise AssertionError("the batch did not fail")
        except grpc.RpcError as e:
            code, details = e.code(), e.details()
    finally:
        channel.close()
    if sut.proc.target == "embedded":
        assert code == grpc.StatusCode.UNKNOWN
        assert details.startswith("100 of 600 updates failed (100 ALREADY_EXISTS)")
    else:  # PI: one Error per update, ~35 bytes each even when OK -> over 16 KiB
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "metadata size exceeds" in details
    # the batch's other 500 went in: the same batch again fails for every update
    with pytest.raises(EntryExists) as e:
        sut.client.write(updates, stop_on_error=False)
    assert [x.index for x in e.value.errors] == list(range(600))
    assert len(HotKeys(sut.client, sut.p4info).list(1)) == 600
