"""Controller sessions over real gRPC against a real switch process, on both targets: a
client whose switch restarts reconnects and re-arbitrates by itself (controller/client.py),
and a second controller with a higher election id takes over, after which the first one's
writes are refused with PERMISSION_DENIED."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import grpc
import pytest
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from contract.p4files import P4INFO_PATH
from controller.client import SwitchClient
from controller.errors import NoPipeline, NotPrimary
from controller.jobs import Jobs
from controller.p4info import P4Info
from tests.conftest import bmv2_config, running_switch
from topologies.switches import SwitchProcess

pytestmark = pytest.mark.root


@pytest.fixture(params=["embedded", "bmv2"])
def switch(request) -> Iterator[SwitchProcess]:
    with running_switch(request.param, tag="rc") as (proc, _ports):
        yield proc


def until(condition: Callable[[], bool], seconds: float = 15.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def push(client: SwitchClient, proc: SwitchProcess, p4info: P4Info) -> None:
    client.set_pipeline(p4info.message, bmv2_config() if proc.target == "bmv2" else b"")


def test_client_reconnects_and_re_arbitrates_after_the_switch_restarts(
    switch: SwitchProcess,
) -> None:
    p4info = P4Info.from_file(P4INFO_PATH)
    client = SwitchClient(switch.grpc_addr, switch.device_id, (0, 7), wait=10.0).connect()
    try:
        push(client, switch, p4info)
        Jobs(client, p4info).add(1, 8)
        assert client.is_primary and client.reconnects == 0
        switch.stop()  # the process ends: the stream breaks
        assert until(lambda: not client.is_primary, 5)
        switch.start()  # a fresh switch on the same port, without a pipeline
        assert until(lambda: client.reconnects == 1 and client.is_primary), (
            f"no re-arbitration: reconnects={client.reconnects} primary={client.is_primary}"
        )
        with pytest.raises(NoPipeline):
            client.get_pipeline()  # the restart lost it; the caller re-installs
        push(client, switch, p4info)  # a write: the switch took our election id as primary
        assert Jobs(client, p4info).add(1, 8).slot_count == 8
    finally:
        client.close()


def test_an_rpc_during_the_restart_waits_for_the_new_session(switch: SwitchProcess) -> None:
    p4info = P4Info.from_file(P4INFO_PATH)
    client = SwitchClient(switch.grpc_addr, switch.device_id, (0, 1), timeout=20.0).connect()
    try:
        switch.stop()
        assert until(lambda: not client.is_primary, 5)
        switch.launch()  # not waited for: the RPC below waits for the session instead
        push(client, switch, p4info)
        assert client.is_primary and client.reconnects == 1
    finally:
        client.close()


def test_a_higher_election_id_takes_over_and_the_first_is_denied(switch: SwitchProcess) -> None:
    p4info = P4Info.from_file(P4INFO_PATH)
    first = SwitchClient(switch.grpc_addr, switch.device_id, (0, 1), wait=10.0).connect()
    second = None
    try:
        push(first, switch, p4info)
        Jobs(first, p4info).add(1, 8)
        second = SwitchClient(switch.grpc_addr, switch.device_id, (0, 2)).connect()
        assert second.is_primary
        assert until(lambda: not first.is_primary, 5)  # told by an arbitration update
        with pytest.raises(NotPrimary):  # the client's name for PERMISSION_DENIED
            Jobs(first, p4info).add(2, 8)
        # the same write on the wire, to see the status code itself
        req = p4runtime_pb2.WriteRequest(device_id=switch.device_id)
        req.election_id.low = 1
        with grpc.insecure_channel(switch.grpc_addr) as channel:
            stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
            with pytest.raises(grpc.RpcError) as e:
                stub.Write(req, timeout=10)
            assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert Jobs(second, p4info).add(2, 8).slot_count == 8  # the new primary writes
        assert first.reconnects == 0  # a demotion is not a lost connection
    finally:
        first.close()
        if second is not None:
            second.close()
