"""Behaviour of the embedded pipeline (docs/design.md section 2), packet in, bytes out.

Host i sits on port i with IP 10.0.0.i; h3 is the PS. Job 1 (index 0) owns slots 0..63 with
hot keys 100..107 at offsets 0..7; job 2 (index 1) owns slots 64..127 with the same keys.
The `p` fixture turns tenancy off (both admission tables default to admit), so that the
tests of the other steps may send any frame from any port; the tenancy tests at the end use
the default-deny pipeline as a switch starts.
"""

from __future__ import annotations

import random
import time

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import ARP, Ether
from scapy.utils import checksum

from contract.constants import (
    CPU_PORT,
    FLAG_FROM_SWITCH,
    FLAG_INVALIDATE,
    FLAG_RETRANSMIT,
    HOTAGG_PORT,
    INT32_MAX,
    INT32_MIN,
    MAX_ENTRIES,
    MAX_WORKERS,
    NUM_SLOTS,
    Op,
    Stat,
)
from contract.frames import SWITCH_MAC, hotagg_frame
from contract.layers import Entry, Hotagg
from contract.names import hot_keys_table, set_slot_action
from softswitch.pipeline import Pipeline

P = "HotaggIngress."
HOT = list(range(100, 108))
PS = 3


def mac(i: int) -> int:
    return 0x020000000000 + i


def frame(
    op: int = Op.PUSH,
    entries: list[tuple[int, int]] | tuple = (),
    *,
    src: int = 1,
    dst: int = PS,
    worker_id: int | None = None,
    job_id: int = 1,
    seq: int = 1,
    iteration: int = 1,
    **fields: int,
) -> bytes:
    """A hotagg frame from host `src` (worker `src` unless given) to `dst`, job 1, seq 1 and
    iteration 1 unless given, with a real UDP checksum (outputs must set theirs to 0)."""
    return hotagg_frame(
        src,
        dst,
        op,
        entries,
        worker_id=src if worker_id is None else worker_id,
        job_id=job_id,
        seq=seq,
        iteration=iteration,
        udp_checksum=True,
        **fields,
    )


def agg(data: bytes) -> Hotagg:
    return Hotagg(data[42:])


def entries(data: bytes) -> list[tuple[int, int]]:
    return [(e.key, e.value) for e in agg(data).entries]


def stats(p: Pipeline) -> dict[str, int]:
    return {Stat(i).name: n for i, n in enumerate(p.stats_packets) if n}


@pytest.fixture
def p() -> Pipeline:
    p = Pipeline(seed=7)
    t = p.tables
    for i in range(1, 5):
        t[P + "ipv4_lpm"].insert(((0x0A000000 + i, 32),), P + "ipv4_forward", (mac(i), i))
    t[P + "jobs"].insert((1,), P + "set_job", (0, 0, 64))
    t[P + "jobs"].insert((2,), P + "set_job", (1, 64, 64))
    for job in (1, 2):
        set_hot(p, job, {k: k - 100 for k in HOT})
    for table in ("worker_admission", "ps_admission"):
        t[P + table].set_default(P + "admit", ())
    return p


def set_hot(p: Pipeline, job: int, offsets: dict[int, int]) -> None:
    """What the controller does: each hot key into every lookup instance."""
    for i in range(MAX_ENTRIES):
        t = p.tables[hot_keys_table(i)]
        for k, off in offsets.items():
            if (job, k) in {e.match for e in t.entries()}:
                t.modify((job, k), set_slot_action(i), (off,))
            else:
                t.insert((job, k), set_slot_action(i), (off,))


def only(out, port):
    assert len(out) == 1 and out[0][0] == port, out
    return out[0][1]


def agg_at(p, it, slot):
    a = (it & 1) * NUM_SLOTS + slot
    return p.agg_iter[a], p.agg_key[a], p.agg_value[a]


def assert_hop(data: bytes, dst: int) -> None:
    """Routed by ipv4_forward to host `dst`, IPv4 checksum valid."""
    pkt = Ether(data)
    assert pkt.dst == f"02:00:00:00:00:{dst:02x}" and pkt.src == SWITCH_MAC
    assert pkt[IP].ttl == 63 and pkt[IP].len == len(data) - 14
    assert checksum(data[14:34]) == 0


# --- forwarding ---


def test_plain_udp_is_routed_with_mac_ttl_and_checksum(p):
    raw = bytes(Ether(dst=SWITCH_MAC) / IP(dst="10.0.0.2", ttl=9, chksum=0x1234) / UDP() / b"x")
    data = only(p.process(1, raw), 2)
    pkt = Ether(data)
    assert (pkt.dst, pkt.src, pkt[IP].ttl) == ("02:00:00:00:00:02", SWITCH_MAC, 8)
    assert checksum(data[14:34]) == 0  # recomputed although it came in wrong
    assert data[34:] == raw[34:] and stats(p) == {}


def test_longest_prefix_wins_and_misses_count_only_hotagg(p):
    p.tables[P + "ipv4_lpm"].insert(((0x0A000000, 8),), P + "ipv4_forward", (mac(9), 9))
    assert p.process(1, frame(op=Op.DONE, dst=3))[0][0] == 3
    assert p.process(1, frame(op=Op.DONE, dst=77))[0][0] == 9
    assert p.process(1, bytes(Ether() / IP(dst="11.0.0.1") / UDP(dport=53))) == []
    assert "NO_ROUTE" not in stats(p)
    assert (
        p.process(1, frame(op=Op.DONE, dst=3).replace(bytes([10, 0, 0, 3]), bytes([11, 0, 0, 3])))
        == []
    )
    reply = frame(Op.PUSH_ACK, src=PS, dst=1, sport=HOTAGG_PORT, dport=40001)
    assert p.process(PS, reply.replace(bytes([10, 0, 0, 1]), bytes([11, 0, 0, 1]))) == []
    assert stats(p) == {"PASS": 3, "NO_ROUTE": 2}


def test_send_to_cpu_and_drop_port(p):
    lpm = p.tables[P + "ipv4_lpm"]
    lpm.set_default(P + "send_to_cpu", ())
    raw = bytes(Ether() / IP(dst="8.8.8.8") / UDP())
    port, data = p.process(2, raw)[0]
    assert port == CPU_PORT and data[:2] == bytes([0x01, 0x00]) and data[2:] == raw  # port 2
    lpm.modify(((0x0A000002, 32),), P + "ipv4_forward", (mac(2), 511))
    assert p.process(1, frame(dst=2, op=Op.DONE)) == []


def test_route_changes_apply_to_the_next_packet(p):
    """Routing decisions are cached per destination; every ipv4_lpm change empties the cache."""
    lpm = p.tables[P + "ipv4_lpm"]
    raw = bytes(Ether(dst=SWITCH_MAC) / IP(dst="10.0.0.2") / UDP() / b"x")
    push = frame(entries=[(999, 1)], dst=2)  # cold: forwarded to h2
    assert only(p.process(1, raw), 2)[:6] == mac(2).to_bytes(6, "big")
    lpm.modify(((0x0A000002, 32),), P + "ipv4_forward", (mac(9), 4))
    assert only(p.process(1, raw), 4)[:6] == mac(9).to_bytes(6, "big")
    lpm.modify(((0x0A000002, 32),), P + "send_to_cpu", ())
    assert only(p.process(1, raw), CPU_PORT)[2:] == raw
    lpm.modify(((0x0A000002, 32),), P + "drop", ())
    assert p.process(1, raw) == [] and p.process(1, push) == []
    assert stats(p)["NO_ROUTE"] == 1
    lpm.delete(((0x0A000002, 32),))
    lpm.insert(((0x0A000000, 24),), P + "ipv4_forward", (mac(5), 3))
    assert only(p.process(1, raw), 3)[:6] == mac(5).to_bytes(6, "big")
    lpm.clear()
    assert p.process(1, raw) == []
    lpm.set_default(P + "ipv4_forward", (mac(6), 1))
    assert only(p.process(1, raw), 1)[:6] == mac(6).to_bytes(6, "big")
    p.reset()
    assert p.process(1, raw) == []


def test_push_outputs_follow_route_changes(p):
    """Acks and cold forwards reuse the output head of an earlier push with the same head up
    to the UDP checksum (forwarding.head_template) only while ipv4_lpm is unchanged."""
    lpm = p.tables[P + "ipv4_lpm"]

    hot = [frame(entries=[(100, 1)], seq=s) for s in (1, 2, 3, 4)]
    cold = [frame(entries=[(999, 1)], seq=s, worker_id=9) for s in (1, 2, 3, 4)]
    # the same heads but for the UDP checksum, which the outputs set to 0
    assert hot[0][:40] == hot[1][:40] and hot[0][40:42] != hot[1][40:42]
    assert cold[0][:40] == cold[1][:40]
    ack, fwd = only(p.process(1, hot[0]), 1), only(p.process(1, cold[0]), PS)
    assert only(p.process(1, hot[1]), 1)[:42] == ack[:42]
    assert only(p.process(1, cold[1]), PS)[:42] == fwd[:42]
    for ip_id in (1, 0xBEEF, 0xFFFF):  # another IPv4 id than 0: kept, the checksum fits it
        for raw, port in ((hot[1], 1), (cold[1], PS)):
            data = only(p.process(1, raw[:18] + ip_id.to_bytes(2, "big") + raw[20:]), port)
            assert data[18:20] == ip_id.to_bytes(2, "big") and checksum(data[14:34]) == 0
    lpm.modify(((0x0A000001, 32),), P + "ipv4_forward", (mac(7), 4))
    lpm.modify(((0x0A000003, 32),), P + "ipv4_forward", (mac(8), 2))
    assert only(p.process(1, hot[2]), 4)[:6] == mac(7).to_bytes(6, "big")
    assert only(p.process(1, cold[2]), 2)[:6] == mac(8).to_bytes(6, "big")
    lpm.modify(((0x0A000001, 32),), P + "send_to_cpu", ())
    lpm.modify(((0x0A000003, 32),), P + "drop", ())
    assert only(p.process(1, hot[3]), CPU_PORT)[:2] == bytes([0x00, 0x80])  # from port 1
    assert p.process(1, cold[3]) == [] and stats(p)["NO_ROUTE"] == 1
    assert stats(p)["PUSH_SWITCH_ACK"] == 7 and stats(p)["COLD_FORWARDED"] == 7  # 3 resent


def test_mixed_push_outputs_follow_route_changes(p):
    lpm = p.tables[P + "ipv4_lpm"]
    mixed = [frame(entries=[(100, 1), (999, 2)], seq=s, worker_id=5) for s in (1, 2, 3)]
    first = only(p.process(1, mixed[0]), PS)
    assert entries(first) == [(999, 2)] and agg(first).mask == 0b01
    assert only(p.process(1, mixed[1]), PS) == first[:50] + mixed[1][50:54] + first[54:]
    lpm.modify(((0x0A000003, 32),), P + "ipv4_forward", (mac(8), 2))
    data = only(p.process(1, mixed[2]), 2)
    assert data[:6] == mac(8).to_bytes(6, "big") and checksum(data[14:34]) == 0
    assert Ether(data)[IP].len == 20 + 8 + 20 + 12 and entries(data) == [(999, 2)]


def test_non_ipv4_and_ip_options(p):
    assert p.process(1, bytes(Ether() / ARP())) == []
    assert p.process(1, b"\x00" * 12 + b"\x86\xdd" + b"\x00" * 60) == []
    opt = bytes(
        Ether()
        / IP(dst="10.0.0.3", options=b"\x01\x01\x01\x00")
        / UDP(dport=HOTAGG_PORT)
        / Hotagg(op=Op.PUSH, job_id=1, seq=1, entries=[Entry(key=100, value=1)])
    )
    data = only(p.process(1, opt), 3)
    assert data[34:] == opt[34:] and stats(p) == {}  # IHL 6: plain routing, no hotagg
    assert p.process(1, opt[:30]) == []  # truncated IPv4 header: not IPv4


def test_packet_out_and_packet_in_headers(p):
    raw = frame(op=Op.PUSH, entries=[(100, 1)])
    assert p.process(CPU_PORT, bytes([0x02, 0x00]) + raw) == [(4, raw)]  # egress 4, untouched
    assert p.process(CPU_PORT, bytes([0x7F, 0x80]) + raw) == [(CPU_PORT, b"\x7f\x80" + raw)]
    assert p.process(CPU_PORT, b"\x01") == [] and p.process(CPU_PORT, b"") == []
    assert p.process(CPU_PORT, b"\x00\x80" + b"junk") == [(1, b"junk")]
    assert stats(p) == {} and p.agg_value[0] == 0


# --- PUSH ---


def test_hot_push_is_aggregated_and_acked_by_switch(p):
    for w in (1, 2, 4):
        raw = frame(entries=[(k, w * (k - 99)) for k in HOT], src=w, seq=1, flags=0, mask=0x5A)
        data = only(p.process(w, raw), w)
        a = agg(data)
        assert (a.op, a.flags, a.count, a.mask, a.entries) == (
            Op.PUSH_ACK,
            FLAG_FROM_SWITCH,
            0,
            0xFF,
            [],
        )
        assert (a.job_id, a.worker_id, a.seq, a.iteration) == (1, w, 1, 1)
        pkt = Ether(data)
        assert (pkt[IP].src, pkt[IP].dst) == ("10.0.0.3", f"10.0.0.{w}")
        assert (pkt[UDP].sport, pkt[UDP].dport, pkt[UDP].len, pkt[UDP].chksum) == (
            HOTAGG_PORT,
            40000 + w,
            28,
            0,
        )
        assert_hop(data, w)
        assert len(data) == 62
    assert [agg_at(p, 1, s) for s in range(8)] == [(1, 100 + s, 7 * (s + 1)) for s in range(8)]
    assert stats(p) == {"PUSH": 3, "HOT_APPLIED": 24, "PUSH_SWITCH_ACK": 3}
    assert p.counters[P + "stats"].read(Stat.HOT_APPLIED) == (24, 24 * len(raw))
    e = p.tables[hot_keys_table(5)].get((1, 105))
    assert (e.packets, e.bytes) == (3, 3 * len(raw))
    assert p.tables[hot_keys_table(5)].get((1, 104)).packets == 0


def test_cold_entries_go_to_ps_in_order(p):
    raw = frame(entries=[(100, 1), (5, 2), (102, 3), (6, 4), (7, 5)], src=2, worker_id=9)
    data = only(p.process(2, raw), PS)
    a = agg(data)
    assert (a.op, a.flags, a.count, a.mask) == (Op.PUSH, 0, 3, 0b00101)
    assert entries(data) == [(5, 2), (6, 4), (7, 5)]
    pkt = Ether(data)
    assert (pkt[IP].src, pkt[IP].dst, pkt[UDP].dport) == ("10.0.0.2", "10.0.0.3", HOTAGG_PORT)
    assert pkt[UDP].len == 28 + 36 and pkt[UDP].chksum == 0 and len(data) == len(raw) - 24
    assert_hop(data, PS)
    assert stats(p) == {"PUSH": 1, "HOT_APPLIED": 2, "COLD_FORWARDED": 3}
    assert p.dedup_seq[(9 << 6) | 1] == 1 and p.dedup_mask[(9 << 6) | 1] == 0b101
    all_cold = only(p.process(2, frame(entries=[(1, 1)], seq=2, mask=0x80)), PS)
    assert agg(all_cold).mask == 0 and entries(all_cold) == [(1, 1)]


def test_empty_push_is_acked_by_switch(p):
    a = agg(only(p.process(1, frame(entries=[])), 1))
    assert (a.op, a.count, a.mask) == (Op.PUSH_ACK, 0, 0)
    assert stats(p) == {"PUSH": 1, "PUSH_SWITCH_ACK": 1}


def test_lazy_reset_uses_the_parity_copies(p):
    push = lambda it, v, seq: p.process(1, frame(entries=[(100, v)], seq=seq, iteration=it))  # noqa: E731
    push(1, 10, 1)
    push(2, 20, 2)
    assert agg_at(p, 1, 0) == (1, 100, 10) and agg_at(p, 2, 0) == (2, 100, 20)
    push(3, 1, 3)  # iteration 1 is not read yet: its copy is busy, the entry goes to the PS
    assert agg_at(p, 1, 0) == (1, 100, 10) and stats(p)["SLOT_BUSY"] == 1
    collect(p, [], 2)  # a COLLECT of 2: every copy of 1 was read (docs/design.md section 8)
    push(3, 30, 4)  # claims the iteration-1 copy, iteration 2 stays readable
    push(3, 5, 5)
    assert agg_at(p, 3, 0) == (3, 100, 35) and agg_at(p, 2, 0) == (2, 100, 20)


def test_duplicate_push_is_never_added_twice(p):
    hot = frame(entries=[(100, 5), (101, 6)], seq=3)
    first = only(p.process(1, hot), 1)
    again = hot[:44] + bytes([hot[44] | FLAG_RETRANSMIT]) + hot[45:]
    assert agg(only(p.process(1, again), 1)).mask == 0b11
    assert agg_at(p, 1, 0)[2] == 5 and agg_at(p, 1, 1)[2] == 6
    mixed = frame(entries=[(1, 1), (100, 5), (2, 2)], seq=4)
    cold1 = only(p.process(1, mixed), PS)
    assert only(p.process(1, mixed), PS) == cold1  # byte for byte the same cold part
    assert agg_at(p, 1, 0)[2] == 10 and entries(cold1) == [(1, 1), (2, 2)]
    assert first == only(p.process(1, hot), 1)
    assert stats(p) == {
        "PUSH": 5,
        "PUSH_DUP": 3,
        "HOT_APPLIED": 3,
        "COLD_FORWARDED": 4,
        "PUSH_SWITCH_ACK": 3,
    }


def test_push_older_than_the_window_is_dropped(p):
    p.process(1, frame(entries=[(100, 1)], seq=5))
    p.process(1, frame(entries=[(100, 1)], seq=69))  # same window position, newer
    assert p.process(1, frame(entries=[(100, 1)], seq=5)) == []
    assert stats(p)["PUSH_STALE"] == 1 and agg_at(p, 1, 0)[2] == 2


@pytest.mark.parametrize("start,add", [(INT32_MAX, 1), (INT32_MIN, -1), (INT32_MIN + 3, -4)])
def test_overflow_goes_to_the_ps(p, start, add):
    p.process(1, frame(entries=[(100, start)], src=1))
    data = only(p.process(2, frame(entries=[(100, add)], src=2)), PS)
    assert entries(data) == [(100, add)] and agg(data).mask == 0
    assert agg_at(p, 1, 0)[2] == start and stats(p)["OVERFLOW"] == 1
    p.process(2, frame(entries=[(100, -add)], src=2, seq=2))
    assert agg_at(p, 1, 0)[2] == start - add  # the slot still takes sums that fit


@pytest.mark.parametrize("start,add", [(INT32_MAX - 3, 3), (INT32_MIN + 3, -3)])
def test_sums_up_to_the_int32_limits_are_applied(p, start, add):
    p.process(1, frame(entries=[(100, start)], src=1))
    assert agg(only(p.process(2, frame(entries=[(100, add)], src=2)), 2)).mask == 1
    assert agg_at(p, 1, 0)[2] == start + add and "OVERFLOW" not in stats(p)


def test_reassigned_slot_refuses_another_key_in_the_same_iteration(p):
    p.process(1, frame(entries=[(100, 1)]))
    for i in range(MAX_ENTRIES):
        p.tables[hot_keys_table(i)].delete((1, 100))
    set_hot(p, 1, {200: 0})
    data = only(p.process(1, frame(entries=[(200, 9)], seq=2)), PS)
    assert entries(data) == [(200, 9)] and stats(p)["SLOT_CONFLICT"] == 1
    assert agg_at(p, 1, 0) == (1, 100, 1)
    only(p.process(1, frame(entries=[(200, 9)], seq=3, iteration=2)), 1)
    assert agg_at(p, 2, 0) == (2, 200, 9)


def test_bad_slot_is_treated_as_cold(p):
    p.tables[P + "jobs"].insert((3,), P + "set_job", (2, NUM_SLOTS - 4, 64))
    set_hot(p, 3, {100: 2, 101: 4})  # slot NUM_SLOTS + 0 is past the registers
    set_hot(p, 1, {300: 64})  # past job 1's slot_count
    data = only(p.process(1, frame(entries=[(100, 1), (101, 2)], job_id=3)), PS)
    assert agg(data).mask == 0b01 and entries(data) == [(101, 2)]
    data = only(p.process(1, frame(entries=[(300, 1)], seq=2)), PS)
    assert entries(data) == [(300, 1)]
    assert stats(p)["BAD_SLOT"] == 2 and agg_at(p, 1, NUM_SLOTS - 2) == (1, 100, 1)
    ack = agg(only(p.process(PS, frame(Op.WRITEBACK, [(300, 1), (100, 5)], src=PS)), PS))
    assert ack.mask == 0b10 and stats(p)["BAD_SLOT"] == 3
    pulled = only(p.process(1, frame(Op.PULL, [(300, 0)], seq=3)), PS)
    assert agg(pulled).mask == 0 and stats(p)["BAD_SLOT"] == 4


def test_jobs_never_touch_each_others_slots(p):
    only(p.process(4, frame(entries=[(k, 1) for k in HOT], src=4, job_id=2)), 4)
    assert [agg_at(p, 1, s) for s in range(64)] == [(0, 0, 0)] * 64
    assert [agg_at(p, 1, 64 + s) for s in range(8)] == [(1, k, 1) for k in HOT]
    # same worker id and seq in job 1: another dedup cell, so it is applied, not a duplicate
    only(p.process(1, frame(entries=[(100, 3)], src=1, worker_id=4)), 1)
    assert agg_at(p, 1, 0) == (1, 100, 3) and "PUSH_DUP" not in stats(p)
    set_hot(p, 2, {500: 1})
    data = only(p.process(1, frame(entries=[(500, 1)], seq=2)), PS)  # job 2's key, job 1
    assert entries(data) == [(500, 1)]
    assert p.tables[hot_keys_table(0)].get((2, 500)).packets == 0


# --- PULL, WRITEBACK, COLLECT ---


def writeback(p, pairs, it):
    return only(p.process(PS, frame(Op.WRITEBACK, pairs, src=PS, dst=1, iteration=it)), PS)


def test_writeback_then_pull_hit(p):
    data = writeback(p, [(100, 11), (7, 1), (103, -13)], it=2)
    a = agg(data)
    assert (a.op, a.flags, a.mask, a.count) == (Op.WRITEBACK_ACK, FLAG_FROM_SWITCH, 0b101, 3)
    assert Ether(data)[IP].dst == "10.0.0.3" and checksum(data[14:34]) == 0
    assert (p.cache_key[3], p.cache_value[3], p.cache_iter[3]) == (103, -13, 2)
    reply = only(p.process(2, frame(Op.PULL, [(103, 0), (100, 0)], src=2, iteration=2)), 2)
    a = agg(reply)
    assert (a.op, a.flags, a.mask) == (Op.PULL_REPLY, FLAG_FROM_SWITCH, 0b11)
    assert entries(reply) == [(103, -13), (100, 11)]
    assert Ether(reply)[UDP].chksum == 0 and Ether(reply)[IP].src == "10.0.0.3"
    assert_hop(reply, 2)
    assert stats(p) == {"WRITEBACK": 1, "CACHE_WRITE": 2, "PULL": 1, "PULL_HIT": 1}


def test_pull_miss_and_partial_go_to_ps(p):
    writeback(p, [(100, 11), (101, 12)], it=2)
    partial = only(p.process(1, frame(Op.PULL, [(100, 0), (9, 0), (101, 0)], iteration=2)), PS)
    a = agg(partial)
    assert (a.op, a.flags, a.mask) == (Op.PULL, 0, 0b101)
    assert entries(partial) == [(100, 11), (9, 0), (101, 12)]
    wrong_it = only(p.process(1, frame(Op.PULL, [(100, 0)], iteration=3)), PS)
    assert agg(wrong_it).mask == 0 and entries(wrong_it) == [(100, 0)]
    empty = only(p.process(1, frame(Op.PULL, [], iteration=2)), PS)
    assert agg(empty).op == Op.PULL
    for i in range(MAX_ENTRIES):  # the slot now belongs to key 200, but still caches key 100
        p.tables[hot_keys_table(i)].delete((1, 100))
    set_hot(p, 1, {200: 0})
    assert agg(only(p.process(1, frame(Op.PULL, [(200, 0)], iteration=2)), PS)).mask == 0
    assert stats(p)["PULL_MISS"] == 4 and "PULL_HIT" not in stats(p)


def s32(u: int) -> int:
    """A u32 offset as the signed value field carries it."""
    return u - (1 << 32) if u >= 1 << 31 else u


def collect(p, offsets, it, job_id=1, dst=PS, keys=None, **fields):
    """COLLECT of entries (expected key, offset); `keys` defaults to 0 for every offset."""
    keys = [0] * len(offsets) if keys is None else keys
    pairs = [(k, s32(o)) for k, o in zip(keys, offsets)]
    raw = frame(Op.COLLECT, pairs, src=PS, dst=dst, iteration=it, job_id=job_id, **fields)
    return only(p.process(PS, raw), PS)


def refresh(p, pairs, it, ask=None, **fields):
    """COLLECT of (expected key, offset) pairs with refresh bits (default: every entry)."""
    mask = (1 << len(pairs)) - 1 if ask is None else ask
    keys, offsets = [k for k, _ in pairs], [o for _, o in pairs]
    return agg(collect(p, offsets, it, keys=keys, mask=mask, **fields))


def cache_at(p, slot):
    return p.cache_key[slot], p.cache_value[slot], p.cache_iter[slot]


def pull(p, keys, it, src=1):
    """(op, entries) of what a PULL turns into: a switch PULL_REPLY or a PULL to the PS."""
    out = p.process(src, frame(Op.PULL, [(k, 0) for k in keys], src=src, iteration=it))
    assert len(out) == 1 and out[0][0] in (src, PS), out
    return agg(out[0][1]).op, entries(out[0][1])


def test_collect_reads_one_iteration_and_can_repeat(p):
    p.process(1, frame(entries=[(100, 4), (102, 6)], iteration=1))
    p.process(2, frame(entries=[(100, 1)], src=2, iteration=1))
    p.process(1, frame(entries=[(101, 8)], seq=2, iteration=2))
    offsets = [0, 1, 2, 64, 1 << 31]
    data = collect(p, offsets, it=1, dst=99, cached=0xFF)  # answered whatever the address
    a = agg(data)
    assert (a.op, a.flags, a.mask, a.cached) == (Op.COLLECT_REPLY, FLAG_FROM_SWITCH, 0b101, 0)
    assert entries(data) == [(100, 5), (0, 1), (102, 6), (0, 64), (0, INT32_MIN)]
    assert collect(p, offsets, it=1, dst=99, cached=0xFF) == data
    assert entries(collect(p, [0, 1], it=2)) == [(0, 0), (101, 8)]
    assert agg(collect(p, [0, 2], it=3)).mask == 0  # parity copy of iteration 1, not 3
    assert agg(collect(p, [0], it=1, job_id=2)).mask == 0  # job 2's offset 0 is slot 64
    assert stats(p)["COLLECT"] == 5 and "BAD_SLOT" not in stats(p)
    assert "CACHE_WRITE" not in stats(p) and not any(p.cache_iter)


# --- COLLECT refresh and INVALIDATE ---


def test_refresh_moves_the_cache_by_the_slot_sum_and_a_pull_of_the_next_iteration_hits(p):
    writeback(p, [(100, 1000), (101, 7)], it=1)
    p.process(1, frame(entries=[(100, 4)], iteration=1))
    p.process(2, frame(entries=[(100, 1)], src=2, iteration=1))
    assert pull(p, [100], it=2) == (Op.PULL, [(100, 0)])  # not cached for 2 yet
    a = refresh(p, [(100, 0), (101, 1)], it=1)
    assert (a.op, a.flags, a.mask, a.cached) == (Op.COLLECT_REPLY, FLAG_FROM_SWITCH, 0b01, 0b11)
    assert [(e.key, e.value) for e in a.entries] == [(100, 5), (101, 1)]  # collected as before
    assert cache_at(p, 0) == (100, 995, 2)
    assert cache_at(p, 1) == (101, 7, 2)  # untouched slot: refreshed with sum 0
    assert pull(p, [101, 100], it=2) == (Op.PULL_REPLY, [(101, 7), (100, 995)])
    assert pull(p, [100], it=1)[0] == Op.PULL  # the tag moved on, iteration 1 misses now
    assert stats(p)["CACHE_WRITE"] == 4  # two writebacks, two refreshes


def test_repeated_refresh_reports_the_same_and_subtracts_once(p):
    writeback(p, [(100, 50)], it=1)
    p.process(1, frame(entries=[(100, 8)], iteration=1))
    first = collect(p, [0], it=1, keys=[100], mask=1)
    writes = stats(p)["CACHE_WRITE"]
    assert collect(p, [0], it=1, keys=[100], mask=1) == first
    assert agg(first).cached == 1 and cache_at(p, 0) == (100, 42, 2)
    assert stats(p)["CACHE_WRITE"] == writes and stats(p)["COLLECT"] == 2


def test_refresh_of_an_old_copy_subtracts_nothing(p):
    p.process(1, frame(entries=[(100, 9)], iteration=1))  # same parity copy as iteration 3
    writeback(p, [(100, 30)], it=3)
    assert refresh(p, [(100, 0)], it=3).mask == 0
    assert cache_at(p, 0) == (100, 30, 4) and agg_at(p, 3, 0) == (1, 100, 9)


def test_refresh_with_a_copy_of_another_key_subtracts_nothing(p):
    p.process(1, frame(entries=[(100, 9)], iteration=1))
    for i in range(MAX_ENTRIES):
        p.tables[hot_keys_table(i)].delete((1, 100))
    set_hot(p, 1, {200: 0})
    writeback(p, [(200, 50)], it=1)  # slot 0 caches 200, its copy of 1 holds 100's sum
    a = refresh(p, [(200, 0)], it=1)
    assert (a.mask, a.cached) == (1, 1) and [(e.key, e.value) for e in a.entries] == [(100, 9)]
    assert cache_at(p, 0) == (200, 50, 2)
    assert pull(p, [200], it=2) == (Op.PULL_REPLY, [(200, 50)])


@pytest.mark.parametrize(
    "tag,key,ask,cached",
    [
        pytest.param(2, 101, 1, 0, id="wrong key"),
        pytest.param(1, 100, 1, 0, id="cache tagged t-1"),
        pytest.param(2, 100, 0, 0, id="no request bit"),
        pytest.param(3, 100, 1, 1, id="already tagged t+1"),
        pytest.param(3, 100, 0, 0, id="already tagged t+1, no request bit"),
        pytest.param(3, 101, 1, 0, id="already tagged t+1, wrong key"),
    ],
)
def test_refresh_is_refused_unless_key_and_tag_match_and_it_is_asked(p, tag, key, ask, cached):
    writeback(p, [(100, 20)], it=tag)
    p.process(1, frame(entries=[(100, 5)], iteration=2))
    writes = stats(p)["CACHE_WRITE"]
    a = refresh(p, [(key, 0)], it=2, ask=ask)
    assert a.mask == 1 and [(e.key, e.value) for e in a.entries] == [(100, 5)]
    assert cache_at(p, 0) == (100, 20, tag) and stats(p)["CACHE_WRITE"] == writes
    # Tagged t+1 for the expected key is reported when asked, though nothing was written.
    assert a.cached == cached


@pytest.mark.parametrize(
    "start,add,ok",
    [
        (INT32_MIN + 4, 5, False),
        (INT32_MAX - 4, -5, False),
        (INT32_MIN + 5, 5, True),
        (INT32_MAX - 5, -5, True),
    ],
)
def test_refresh_that_would_overflow_int32_is_not_done(p, start, add, ok):
    writeback(p, [(100, start)], it=1)
    p.process(1, frame(entries=[(100, add)], iteration=1))
    a = refresh(p, [(100, 0)], it=1)
    assert a.mask == 1 and a.cached == ok
    assert cache_at(p, 0) == ((100, start - add, 2) if ok else (100, start, 1))
    assert pull(p, [100], it=1 + ok) == (Op.PULL_REPLY, [(100, start - add if ok else start)])


def test_cached_bits_follow_entry_positions_and_writes_are_counted(p):
    writeback(p, [(100, 10), (101, 11), (102, 12), (103, 13)], it=1)
    p.process(1, frame(entries=[(100, 1), (102, 2), (103, 3)], iteration=1))
    before = p.counters[P + "stats"].read(Stat.CACHE_WRITE)
    pairs = [(103, 3), (999, 1), (100, 0), (102, 2), (101, 1)]  # 999: wrong key for slot 1
    data = collect(p, [o for _, o in pairs], it=1, keys=[k for k, _ in pairs], mask=0b00111)
    a = agg(data)
    assert (a.mask, a.cached) == (0b01101, 0b00101)
    assert [cache_at(p, s)[1:] for s in range(4)] == [(9, 2), (11, 1), (12, 1), (10, 2)]
    packets, nbytes = p.counters[P + "stats"].read(Stat.CACHE_WRITE)
    assert (packets - before[0], nbytes - before[1]) == (2, 2 * len(data))


def test_invalidate_untags_only_the_expected_key(p):
    writeback(p, [(100, 40), (101, 41)], it=1)
    p.process(1, frame(entries=[(100, 4)], iteration=1))
    refresh(p, [(100, 0), (101, 1)], it=1)
    assert pull(p, [100, 101], it=2)[0] == Op.PULL_REPLY
    writes = stats(p)["CACHE_WRITE"]
    a = refresh(p, [(101, 0), (100, 1)], it=1, flags=FLAG_INVALIDATE)  # keys swapped: wrong
    assert a.cached == 0 and pull(p, [100, 101], it=2)[0] == Op.PULL_REPLY
    a = refresh(p, [(100, 0), (101, 1)], it=1, ask=0b01, flags=FLAG_INVALIDATE)
    assert (a.op, a.flags) == (Op.COLLECT_REPLY, FLAG_INVALIDATE | FLAG_FROM_SWITCH)
    assert (a.mask, a.cached) == (0b01, 0)
    assert [(e.key, e.value) for e in a.entries] == [(100, 4), (101, 1)]  # still collected
    assert cache_at(p, 0) == (100, 36, 0) and cache_at(p, 1) == (101, 41, 2)
    assert pull(p, [100], it=2) == (Op.PULL, [(100, 0)])
    assert pull(p, [101], it=2) == (Op.PULL_REPLY, [(101, 41)])
    assert stats(p)["CACHE_WRITE"] == writes  # untagging writes no value
    assert refresh(p, [(100, 0)], it=1).cached == 0  # no tag t any more: no second refresh
    assert cache_at(p, 0) == (100, 36, 0)


def test_refresh_ignores_offsets_outside_the_job(p):
    p.tables[P + "jobs"].insert((3,), P + "set_job", (2, NUM_SLOTS - 4, 64))
    writeback(p, [(100, 10)], it=1)  # job 1, slot 0
    p.process(1, frame(entries=[(100, 1)], iteration=1))
    bad = [64, 1 << 31, (1 << 32) - 1, 1 << 30]
    a = refresh(p, [(100, o) for o in bad], it=1)
    assert (a.mask, a.cached) == (0, 0)
    assert [(e.key, e.value) for e in a.entries] == [(100, s32(o)) for o in bad]
    # Job 2 starts at slot 64: offset -64 must not wrap round onto job 1's slot 0.
    a = refresh(p, [(100, (1 << 32) - 64)], it=1, job_id=2)
    assert (a.mask, a.cached) == (0, 0)
    for it in (1, 2):  # job 3's offset 4 is slot NUM_SLOTS, past the registers
        a = refresh(p, [(0, 4)], it=it, job_id=3)
        assert (a.mask, a.cached) == (0, 0) and [(e.key, e.value) for e in a.entries] == [(0, 4)]
    assert cache_at(p, 0) == (100, 10, 1) and stats(p)["CACHE_WRITE"] == 1
    assert "BAD_SLOT" not in stats(p)


# --- drop simulator ---


@pytest.mark.parametrize("rate,low,high", [(0, 0, 0), (65536, 2000, 2000), (32768, 900, 1100)])
def test_drop_simulator(p, rate, low, high):
    p.tables[P + "drop_sim"].set_default(P + "set_drop_rate", (rate,))
    done = frame(op=Op.DONE)
    lost = sum(not p.process(1, done) for _ in range(2000))
    assert low <= lost <= high and stats(p).get("SIM_DROP", 0) == lost
    plain = bytes(Ether() / IP(dst="10.0.0.2") / UDP())
    assert all(p.process(1, plain) for _ in range(50))  # only hotagg packets are dropped


def test_drop_simulator_is_seeded_and_sees_replies_and_malformed():
    pattern = []
    for _ in range(2):
        q = Pipeline(seed=3)
        q.tables[P + "drop_sim"].set_default(P + "set_drop_rate", (65536 // 2,))
        q.tables[P + "ipv4_lpm"].insert(((0, 0),), P + "ipv4_forward", (1, 1))
        reply = frame(Op.COLLECT_REPLY, src=PS, dst=1, sport=HOTAGG_PORT, dport=5000)
        pattern.append([bool(q.process(2, reply)) for _ in range(200)])
        bad = bytes(Ether() / IP() / UDP(dport=HOTAGG_PORT) / b"short")
        assert not any(q.process(2, bad) for _ in range(200))
        assert q.stats_packets[Stat.SIM_DROP] + q.stats_packets[Stat.MALFORMED] == 200 + 200 - sum(
            pattern[-1]
        )
    assert pattern[0] == pattern[1] and 50 < sum(pattern[0]) < 150


# --- malformed input ---


def _cut(raw: bytes, n: int) -> bytes:
    return raw[:n]


def _poke(raw: bytes, offset: int, value: int) -> bytes:
    return raw[:offset] + bytes([value]) + raw[offset + 1 :]


E3 = [(100, 1), (101, 2), (102, 3)]
MALFORMED_CASES = {
    "truncated header": (_cut(frame(), 55), "MALFORMED"),
    "truncated entries": (_cut(frame(entries=E3), 62 + 30), "MALFORMED"),
    "count 9": (frame(entries=[(100 + i, 1) for i in range(9)]), "MALFORMED"),
    "count 9 claimed": (_poke(frame(entries=E3), 45, 9), "MALFORMED"),
    "udp length": (
        bytes(
            Ether()
            / IP(dst="10.0.0.3")
            / UDP(dport=HOTAGG_PORT, len=52)
            / Hotagg(job_id=1, seq=1, entries=[Entry(key=1)])
        ),
        "MALFORMED",
    ),
    "count 2 of 3": (_poke(frame(entries=E3), 45, 2), "MALFORMED"),
    "version 2": (frame(entries=E3, version=2, job_id=9), "MALFORMED"),
    "op 0": (frame(op=0, job_id=9), "UNKNOWN_OP"),
    "op 12": (frame(op=12, job_id=9), "UNKNOWN_OP"),
    "op 255": (frame(op=255), "UNKNOWN_OP"),
    "unknown job": (frame(job_id=9, seq=0), "UNKNOWN_JOB"),
    "unknown job pass": (frame(op=Op.DONE, job_id=9), "UNKNOWN_JOB"),
    "worker MAX_WORKERS": (frame(worker_id=MAX_WORKERS), "BAD_WORKER"),
    "seq 0": (frame(seq=0, worker_id=MAX_WORKERS), "MALFORMED"),
    "empty frame": (b"", None),
    "garbage": (bytes(random.Random(1).randrange(256) for _ in range(97)), None),
    "non-IPv4": (bytes(Ether(type=0x86DD)) + frame()[14:], None),
}


@pytest.mark.parametrize("name", sorted(MALFORMED_CASES))
def test_malformed_input_is_dropped_and_counted(p, name):
    raw, stat = MALFORMED_CASES[name]
    assert p.process(1, raw) == []
    assert stats(p) == ({stat: 1} if stat else {})
    if stat:
        assert p.counters[P + "stats"].read(Stat[stat]) == (1, len(raw))
    assert not any(p.dedup_seq) and not any(p.agg_iter)


def test_trailing_padding_survives_removal(p):
    raw = frame(entries=[(100, 1), (1, 2)]) + b"\x00" * 6  # bytes past ipv4.totalLen
    data = only(p.process(1, raw), PS)
    assert data[-18:] == raw[-18:] and len(data) == len(raw) - 12
    assert Ether(data)[IP].len == 20 + 8 + 20 + 12


def test_trailing_padding_survives_an_ack(p):
    raw = frame(entries=[(100, 1), (101, 2)]) + b"\x07" * 6  # bytes past ipv4.totalLen
    data = only(p.process(1, raw), 1)
    assert agg(data).op == Op.PUSH_ACK and agg(data).count == 0
    assert data[-6:] == b"\x07" * 6 and len(data) == len(raw) - 24
    pkt = Ether(data)
    assert pkt[IP].len == 20 + 8 + 20 and pkt[UDP].len == 8 + 20 and pkt[IP].ttl == 63
    assert pkt.dst == "02:00:00:00:00:01" and checksum(data[14:34]) == 0


def test_passthrough_ops_are_unchanged(p):
    for op in (
        Op.PUSH_ACK,
        Op.PULL_REPLY,
        Op.DONE,
        Op.DONE_ACK,
        Op.COLLECT_REPLY,
        Op.WRITEBACK_ACK,
    ):
        raw = frame(op=op, entries=[(100, 1)], worker_id=99, seq=0)
        data = only(p.process(1, raw), PS)
        assert data[34:] == raw[34:]  # UDP checksum and hotagg bytes kept
        assert_hop(data, PS)
    assert stats(p) == {"PASS": 6} and not any(p.agg_iter)


def test_random_mutations_never_raise(p):
    rng = random.Random(5)
    seeds = [frame(entries=E3), frame(Op.PULL, E3), frame(Op.COLLECT, E3), frame(Op.WRITEBACK)]
    for _ in range(3000):
        raw = bytearray(rng.choice(seeds))
        for _ in range(rng.randrange(1, 4)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        raw = bytes(raw[: rng.randrange(len(raw) + 1)] if rng.random() < 0.3 else raw)
        for port, out in p.process(rng.choice([1, 2, CPU_PORT]), raw):
            assert isinstance(out, bytes) and 0 <= port < 512


def test_reset_forgets_everything(p):
    p.process(1, frame(entries=[(100, 1)]))
    writeback(p, [(100, 1)], it=1)
    p.reset()
    assert not any(p.agg_value) and not any(p.cache_iter) and not any(p.dedup_seq)
    assert not any(p.stats_packets) and all(len(t) == 0 for t in p.tables.values())
    assert p.process(1, frame(entries=[(100, 1)], seq=2)) == []  # no job, no route
    assert stats(p) == {"UNKNOWN_JOB": 1}
    for table in ("worker_admission", "ps_admission"):  # tenancy back on
        assert p.tables[P + table].default() == (P + "refuse", ())


# --- tenancy (step 5b) ---


def ip(i: int) -> int:
    return 0x0A000000 + i


@pytest.fixture
def closed(p: Pipeline) -> Pipeline:
    """`p` with tenancy on, as a switch starts (default refuse): job 1's worker 1 is h1 on
    port 1, its PS h3 on port 3; job 2 has no admissions."""
    for table in ("worker_admission", "ps_admission"):
        p.tables[P + table].reset_default()
    p.tables[P + "worker_admission"].insert((1, 1, 1, ip(1)), P + "admit", ())
    p.tables[P + "ps_admission"].insert((1, PS, ip(PS)), P + "admit", ())
    return p


def test_tenancy_admits_only_the_installed_job_worker_port_and_address(closed):
    p = closed
    assert agg(only(p.process(1, frame(entries=[(100, 1)])), 1)).op == Op.PUSH_ACK
    dedup = list(p.dedup_seq)
    forged = [  # each differs from the admission in one part
        (2, frame(entries=[(100, 50)], seq=2)),  # port
        (1, frame(entries=[(100, 50)], seq=2, src=2, worker_id=1)),  # address
        (1, frame(entries=[(100, 50)], seq=2, worker_id=2)),  # worker id
        (1, frame(entries=[(100, 50)], seq=2, job_id=2)),  # job (known, nobody admitted)
        (2, frame(Op.PULL, [(100, 0)], src=2, worker_id=1)),  # every worker op, not just PUSH
        (4, frame(Op.DONE, [], src=4, worker_id=1)),
        (PS, frame(Op.PULL, [(100, 0)], src=PS, worker_id=1)),  # the PS is no worker
    ]
    for port, data in forged:
        assert p.process(port, data) == []
    assert stats(p) == {"PUSH": 1, "HOT_APPLIED": 1, "PUSH_SWITCH_ACK": 1, "FOREIGN_WORKER": 7}
    assert p.dedup_seq == dedup and agg_at(p, 1, 0) == (1, 100, 1)


def test_tenancy_takes_collect_and_writeback_only_from_the_jobs_ps(closed):
    p = closed
    wb = frame(Op.WRITEBACK, [(100, 7)], src=PS, dst=1, iteration=1)
    co = frame(Op.COLLECT, [(100, 0)], src=PS, dst=1, iteration=1, mask=1, flags=FLAG_INVALIDATE)
    for port, data in (
        (1, wb), (1, co),  # the PS's address from a worker's port
        (1, frame(Op.WRITEBACK, [(100, 7)], iteration=1)),  # a worker, as itself
        (PS, frame(Op.COLLECT, [(100, 0)], src=PS, job_id=2)),  # the PS of job 1 for job 2
    ):  # fmt: skip
        assert p.process(port, data) == []
    assert stats(p) == {"FOREIGN_PS": 4} and cache_at(p, 0) == (0, 0, 0)
    assert agg(only(p.process(PS, wb), PS)).mask == 1 and cache_at(p, 0) == (100, 7, 1)
    assert agg(only(p.process(PS, co), PS)).op == Op.COLLECT_REPLY and p.cache_iter[0] == 0


def test_tenancy_comes_after_the_checks_of_form_and_job(closed):
    p = closed
    bad_version = bytearray(frame(entries=[(100, 1)], src=4, worker_id=9))
    bad_version[42] = 2
    assert p.process(4, bytes(bad_version)) == []
    assert p.process(4, frame(entries=[(100, 1)], src=4, job_id=9)) == []
    assert stats(p) == {"MALFORMED": 1, "UNKNOWN_JOB": 1}
    # A reply from the job's PS (source port 18497) passes ps_admission (tests/test_replies.py).
    reply = frame(Op.PUSH_ACK, [], src=PS, dst=2, sport=HOTAGG_PORT, dport=40002, worker_id=5)
    assert only(p.process(PS, reply), 2)[14:] != b""
    # A default action of admit turns tenancy off, for every job and op.
    p.tables[P + "worker_admission"].set_default(P + "admit", ())
    assert agg(only(p.process(4, frame(entries=[(100, 1)], src=4, job_id=2)), 4)).mask == 1
    assert p.process(1, frame(Op.COLLECT, [(0, 0)], src=1, dst=PS)) == []
    assert stats(p)["FOREIGN_PS"] == 1


def test_hot_push_rate_floor(p):
    """A loose floor (measured ~170k/s on the dev box) that only catches a pathological slowdown."""
    base = bytearray(frame(entries=[(k, 1) for k in HOT]))
    frames = [bytes(base[:50]) + s.to_bytes(4, "big") + bytes(base[54:]) for s in range(1, 5001)]
    start = time.perf_counter()
    for f in frames:
        p.process(1, f)
    assert time.perf_counter() - start < 0.5  # 10k packets/s
    assert stats(p)["PUSH_SWITCH_ACK"] == 5000 and agg_at(p, 1, 7) == (1, 107, 5000)
