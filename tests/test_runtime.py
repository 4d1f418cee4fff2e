"""`python -m softswitch` as a process: raw-socket ports on veth pairs and P4Runtime.

The switch ends of the veth pairs stay in the root namespace; the host ends go into a
namespace of this test's own (names carry the pid), where the test opens its raw sockets.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest
from google.protobuf import text_format
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc
from p4runtime_sh.p4runtime import P4RuntimeClient
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from tests.test_p4runtime_server import Ids, load_p4info, route_entry

REPO = Path(__file__).resolve().parent.parent
PID = os.getpid()
NS = f"rt{PID}"
SW_IF = {1: f"rt{PID}s1", 2: f"rt{PID}s2"}
HOST_IF = {1: f"rt{PID}h1", 2: f"rt{PID}h2"}
HOST_MAC = {1: "02:00:00:00:01:01", 2: "02:00:00:00:01:02"}
SWITCH_MAC = "02:00:00:00:01:fe"
CLONE_NEWNET = 0x40000000
ETH_P_ALL = 3

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (netns, veth, raw sockets)")


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True)


@contextlib.contextmanager
def in_netns(name: str):
    """Run the body with this thread in namespace `name`, then go back."""
    libc = ctypes.CDLL(None, use_errno=True)
    own = os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        assert libc.setns(target, CLONE_NEWNET) == 0, os.strerror(ctypes.get_errno())
        try:
            yield
        finally:
            assert libc.setns(own, CLONE_NEWNET) == 0, os.strerror(ctypes.get_errno())
    finally:
        os.close(own)
        os.close(target)


@pytest.fixture(scope="module")
def veths():
    """Two veth pairs; host ends in namespace NS. Everything is removed afterwards."""
    sh("ip", "netns", "add", NS)
    try:
        sh("ip", "netns", "exec", NS, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
        for p in SW_IF:
            sh("ip", "link", "add", SW_IF[p], "type", "veth", "peer", "name", HOST_IF[p])
            sh("ip", "link", "set", HOST_IF[p], "netns", NS)
            Path(f"/proc/sys/net/ipv6/conf/{SW_IF[p]}/disable_ipv6").write_text("1")
            sh("ip", "link", "set", SW_IF[p], "up")
            sh("ip", "-n", NS, "link", "set", HOST_IF[p], "up")
        yield
    finally:
        for ifname in SW_IF.values():
            subprocess.run(["ip", "link", "del", ifname], capture_output=True)
        subprocess.run(["ip", "netns", "del", NS], capture_output=True)


def host_socket(p: int) -> socket.socket:
    with in_netns(NS):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        s.bind((HOST_IF[p], 0))
    return s


def recv_frame(s: socket.socket, want, timeout: float = 3.0) -> bytes | None:
    """The first received frame for which want(frame) holds (others are skipped)."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        if not select.select([s], [], [], left)[0]:
            break
        data, addr = s.recvfrom(65536)
        if addr[2] != socket.PACKET_OUTGOING and want(data):
            return data
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_switch(*args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.Popen(
        [sys.executable, "-m", "softswitch", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=env,
    )


def wait_ready(proc: subprocess.Popen, addr: str, timeout: float = 20.0) -> None:
    channel = grpc.insecure_channel(addr)
    stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"switch exited: {proc.stderr.read()}"
            try:
                stub.Capabilities(p4runtime_pb2.CapabilitiesRequest(), timeout=0.5)
                return
            except grpc.RpcError:
                time.sleep(0.1)
        raise AssertionError(f"switch did not answer on {addr}")
    finally:
        channel.close()


@pytest.fixture
def switch(veths, tmp_path):
    port = free_port()
    addr = f"127.0.0.1:{port}"
    ifs = [arg for p, name in SW_IF.items() for arg in ("-i", f"{p}@{name}")]
    proc = start_switch("--name", "rt", "--grpc-addr", addr, *ifs, "--log", str(tmp_path / "log"))
    try:
        wait_ready(proc, addr)
        yield proc, addr
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def udp(dst: str, payload: bytes) -> bytes:
    return bytes(
        Ether(src=HOST_MAC[1], dst=SWITCH_MAC)
        / IP(src="10.0.0.1", dst=dst, ttl=64)
        / UDP(sport=1000, dport=2000)
        / payload
    )


@needs_root
def test_route_over_p4runtime_and_packet_io(switch, tmp_path):
    proc, addr = switch
    info = load_p4info()
    ids = Ids(info)
    (tmp_path / "p4info.txtpb").write_text(text_format.MessageToString(info))
    (tmp_path / "dev.json").write_bytes(b"{}")
    client = P4RuntimeClient(0, addr, (0, 1))
    h1, h2 = host_socket(1), host_socket(2)
    try:
        client.set_fwd_pipe_config(str(tmp_path / "p4info.txtpb"), str(tmp_path / "dev.json"))
        mac2 = int(HOST_MAC[2].replace(":", ""), 16)
        req = p4runtime_pb2.WriteRequest()
        for entry in (
            route_entry(ids, bytes([10, 0, 0, 2]), 32, 2, mac=mac2),
            route_entry(ids, bytes([10, 0, 9, 0]), 24, None),
        ):
            req.updates.add(type=p4runtime_pb2.Update.INSERT).entity.table_entry.CopyFrom(entry)
        client.write(req)

        sent = udp("10.0.0.2", b"through the switch")
        h1.send(sent)
        got = recv_frame(h2, lambda f: f.endswith(b"through the switch"))
        assert got is not None, "nothing came out of port 2"
        pkt = Ether(got)
        assert pkt.dst == HOST_MAC[2] and pkt.src == SWITCH_MAC
        assert pkt[IP].ttl == 63
        chk = pkt[IP].chksum
        del pkt[IP].chksum
        assert Ether(bytes(pkt))[IP].chksum == chk  # recomputed by the switch

        out = p4runtime_pb2.StreamMessageRequest()
        out.packet.payload = udp("10.0.0.2", b"packet out")
        out.packet.metadata.add(metadata_id=1, value=b"\x02")
        out.packet.metadata.add(metadata_id=2, value=b"\x00")
        client.stream_out_q.put(out)
        assert recv_frame(h2, lambda f: f == out.packet.payload) is not None

        to_cpu = udp("10.0.9.7", b"to the controller")
        h1.send(to_cpu)
        msg = client.get_stream_packet("packet", timeout=3)
        assert msg is not None, "no PacketIn"
        assert msg.packet.payload == to_cpu
        assert {m.metadata_id: m.value for m in msg.packet.metadata} == {1: b"\x01", 2: b"\x00"}
    finally:
        client.tear_down()
        h1.close()
        h2.close()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0
    assert "ready" in proc.stdout.read()


@needs_root
def test_short_packet_out_is_a_counted_drop(switch, tmp_path):
    """A PacketOut whose frame is shorter than an Ethernet header cannot be sent on a port
    (the packet socket says EINVAL): counted as tx_runt, one frame after it still goes out,
    and the log has no traceback. Undecodable gRPC requests log one line each."""
    proc, addr = switch
    info = load_p4info()
    (tmp_path / "p4info.txtpb").write_text(text_format.MessageToString(info))
    (tmp_path / "dev.json").write_bytes(b"{}")
    client = P4RuntimeClient(0, addr, (0, 1))
    h2 = host_socket(2)
    try:
        client.set_fwd_pipe_config(str(tmp_path / "p4info.txtpb"), str(tmp_path / "dev.json"))
        for payload in (b"\x01\x02\x03", b"", bytes(13), udp("10.0.0.2", b"after the runts")):
            out = p4runtime_pb2.StreamMessageRequest()
            out.packet.payload = payload
            out.packet.metadata.add(metadata_id=1, value=b"\x02")
            out.packet.metadata.add(metadata_id=2, value=b"\x00")
            client.stream_out_q.put(out)
        assert recv_frame(h2, lambda f: f.endswith(b"after the runts")) is not None
        channel = grpc.insecure_channel(addr)
        for _ in range(2):
            with pytest.raises(grpc.RpcError) as e:
                channel.unary_unary("/p4.v1.P4Runtime/GetForwardingPipelineConfig")(b"\x0a")
            assert e.value.code() == grpc.StatusCode.INTERNAL
        channel.close()
    finally:
        client.tear_down()
        h2.close()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0
    log = (tmp_path / "log").read_text()
    assert "Traceback" not in log
    assert "'tx_runt': 3" in log
    assert log.count("undecodable GetForwardingPipelineConfigRequest") == 2


def test_missing_interface_is_a_clear_error():
    proc = start_switch("--grpc-addr", f"127.0.0.1:{free_port()}", "-i", f"1@nosuch{PID}")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 3
    lines = err.strip().splitlines()
    assert len(lines) == 1 and f"nosuch{PID}" in lines[0] and "does not exist" in lines[0]


def test_grpc_port_in_use_is_a_clear_error():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        addr = f"127.0.0.1:{busy.getsockname()[1]}"
        proc = start_switch("--grpc-addr", addr)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 4
    lines = err.strip().splitlines()
    assert len(lines) == 1 and addr in lines[0] and "in use" in lines[0]


def test_sigterm_stops_a_switch_without_ports():
    addr = f"127.0.0.1:{free_port()}"
    proc = start_switch("--grpc-addr", addr)
    try:
        wait_ready(proc, addr)
        assert "ready" in proc.stdout.readline()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        proc.stdout.close()
        proc.stderr.close()


def _aux(status: int, tci: int, tpid: int) -> list:
    from softswitch.runtime import AUXDATA, PACKET_AUXDATA, SOL_PACKET

    return [(SOL_PACKET, PACKET_AUXDATA, AUXDATA.pack(status, 60, 60, 0, 14, tci, tpid))]


def test_insert_vlan_tag_as_libpcap_does():
    from softswitch.runtime import (
        TP_STATUS_VLAN_TPID_VALID,
        TP_STATUS_VLAN_VALID,
        insert_vlan_tag,
    )

    frame = bytes(range(12)) + b"\x08\x00" + b"payload"
    tag = bytes(range(12)) + b"%s" + b"\x08\x00payload"
    assert insert_vlan_tag(memoryview(frame), []) == frame
    assert insert_vlan_tag(frame, _aux(0, 0, 0)) == frame  # no tag
    # VLAN 0 (priority tag) counts when the kernel says the tag is valid; TPID 0x8100 then
    assert insert_vlan_tag(frame, _aux(TP_STATUS_VLAN_VALID, 0, 0)) == tag % b"\x81\x00\x00\x00"
    got = insert_vlan_tag(frame, _aux(TP_STATUS_VLAN_VALID | TP_STATUS_VLAN_TPID_VALID, 5, 0x88A8))
    assert got == tag % b"\x88\xa8\x00\x05"
    assert insert_vlan_tag(frame, _aux(0, 0x2007, 0)) == tag % b"\x81\x00\x20\x07"
    assert insert_vlan_tag(frame, [(0, 0, b"")]) == frame  # other cmsgs are ignored
