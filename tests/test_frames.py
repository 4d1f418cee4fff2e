"""contract/frames.py against the Scapy layers (contract/layers.py), byte for byte."""

from __future__ import annotations

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from contract.codec import decode_frame
from contract.constants import HOTAGG_PORT, MAX_ENTRIES, Op
from contract.frames import (
    CLIENT_SPORT,
    PS_HOST,
    SWITCH_MAC,
    host_ip,
    host_mac,
    hotagg_frame,
    push_frame,
    udp_frame,
)
from contract.layers import Entry, Hotagg


def scapy_frame(src: int, dst: int, agg: Hotagg, *, sport: int, dport: int = HOTAGG_PORT,
                ttl: int = 64, ip_id: int = 0, udp_checksum: bool = False) -> bytes:  # fmt: skip
    udp = UDP(sport=sport, dport=dport) if udp_checksum else UDP(sport=sport, dport=dport, chksum=0)
    pkt = (
        Ether(src=host_mac(src), dst=SWITCH_MAC)
        / IP(src=host_ip(src), dst=host_ip(dst), ttl=ttl, id=ip_id)
        / udp
        / agg
    )
    return bytes(pkt)


ENTRIES = [(0, 0), (2**64 - 1, -(2**31)), (7, 2**31 - 1)]


@pytest.mark.parametrize("udp_checksum", [False, True])
@pytest.mark.parametrize(
    "op,entries,fields",
    [
        (Op.PUSH, ENTRIES, {"job_id": 1, "worker_id": 2, "seq": 3, "iteration": 4}),
        (Op.COLLECT, ENTRIES[:1], {"flags": 0x41, "mask": 0xFF, "cached": 5, "aux": 0xBEEF}),
        (Op.PULL_REPLY, [], {"version": 9, "seq": 2**32 - 1}),
        (255, [(k, k) for k in range(MAX_ENTRIES + 1)], {"job_id": 65535}),  # count 9
    ],
)
def test_hotagg_frame_equals_scapy(op, entries, fields, udp_checksum) -> None:
    agg = Hotagg(op=op, entries=[Entry(key=k, value=v) for k, v in entries], **fields)
    for src, dst, ttl, ip_id in ((1, 3, 64, 0), (4, 2, 1, 0xABCD)):
        got = hotagg_frame(
            src, dst, op, entries, ttl=ttl, ip_id=ip_id, udp_checksum=udp_checksum, **fields
        )
        want = scapy_frame(src, dst, agg, sport=CLIENT_SPORT + src, ttl=ttl, ip_id=ip_id,
                           udp_checksum=udp_checksum)  # fmt: skip
        assert got == want, (got.hex(), want.hex())


def test_odd_payload_checksum_and_explicit_ports_equal_scapy() -> None:
    for payload in (b"", b"x", b"hello", bytes(range(255))):
        got = udp_frame(2, 5, payload, sport=9, dport=HOTAGG_PORT, udp_checksum=True)
        pkt = Ether(src=host_mac(2), dst=SWITCH_MAC) / IP(src=host_ip(2), dst=host_ip(5), id=0)
        assert got == bytes(pkt / UDP(sport=9, dport=HOTAGG_PORT) / payload)
        assert UDP(got[34:]).chksum != 0
    reply = hotagg_frame(3, 1, Op.PUSH_ACK, sport=HOTAGG_PORT, dport=40001, seq=5)
    assert decode_frame(reply)[5:7] == (HOTAGG_PORT, 40001)


def test_push_frame_is_a_worker_push_to_the_ps() -> None:
    data = push_frame(2, [5, 6], seq=7, worker_id=3, src=4)
    agg = Ether(data)[Hotagg]
    assert (agg.op, agg.job_id, agg.worker_id, agg.seq, agg.iteration) == (Op.PUSH, 2, 3, 7, 1)
    assert [(e.key, e.value) for e in agg.entries] == [(5, 1), (6, 1)]
    frame = decode_frame(data)
    assert (frame.src_ip, frame.dst_ip, frame.src_mac) == (
        host_ip(4),
        host_ip(PS_HOST),
        host_mac(4),
    )
