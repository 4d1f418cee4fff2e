"""Packet tests: frames into a running switch on veth pairs, assertions on what comes out.

The same test bodies run against every target (the `sut` fixture in conftest.py): the
embedded target always, BMv2 where simple_switch_grpc and p4c-bm2-ss are on PATH. Entries
are installed through the controller over P4Runtime. Expected outputs are built with the
Scapy layers from docs/design.md's rules, independently of either switch implementation.
"""

from __future__ import annotations

import contextlib

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from contract.codec import encode_frame
from contract.constants import (
    CPU_PORT,
    FLAG_FROM_SWITCH,
    FLAG_INVALIDATE,
    HOTAGG_PORT,
    INT32_MAX,
    INT32_MIN,
    MAX_ENTRIES,
    MAX_WORKERS,
    Op,
    Stat,
)
from contract.frames import CLIENT_SPORT, SWITCH_MAC, udp_frame
from contract.layers import Hotagg
from controller.p4info import encode as encode_value
from tests.packet_harness import frame, host_ip, host_mac, plain_udp

pytestmark = [pytest.mark.root]

JOB = 1
OTHER_JOB = 2
W1, W2, PS, W4 = 1, 2, 3, 4  # host numbers = switch ports


def push(
    src: int,
    seq: int,
    entries,
    iteration: int = 1,
    job: int = JOB,
    worker: int | None = None,
    ttl: int = 64,
):
    worker = src - 1 if worker is None else worker
    return frame(
        src,
        PS,
        Op.PUSH,
        entries,
        seq=seq,
        iteration=iteration,
        job_id=job,
        worker_id=worker,
        ttl=ttl,
    )


def collect_reply(
    sut, iteration: int, entries, job: int = JOB, mask: int = 0, flags: int = 0
) -> Hotagg:
    """COLLECT of (expected key, slot offset) entries from the PS; returns the reply header."""
    data = frame(
        PS, W1, Op.COLLECT, entries, seq=1, iteration=iteration, job_id=job, mask=mask, flags=flags
    )
    out = sut.ports.exchange(PS, data)
    assert len(out) == 1 and out[0].port == PS, [o.pkt.summary() for o in out]
    agg = out[0].agg
    assert agg.op == Op.COLLECT_REPLY and agg.flags & FLAG_FROM_SWITCH
    return agg


def collect(sut, iteration: int, offsets=range(MAX_ENTRIES), job: int = JOB):
    """COLLECT from the PS, no refresh; returns {key: value} of the valid entries."""
    agg = collect_reply(sut, iteration, [(0, o) for o in offsets], job)
    assert agg.cached == 0  # nothing asked, nothing reported
    return {e.key: e.value for i, e in enumerate(agg.entries) if agg.mask >> i & 1}


def only(out, port: int):
    assert [o.port for o in out] == [port], [(o.port, o.pkt.summary()) for o in out]
    return out[0]


def test_forwarding_rewrites_macs_ttl_and_checksum(sut):
    out = sut.ports.exchange(W1, plain_udp(W1, PS, b"hello"))
    got = only(out, PS).pkt
    assert got.dst == host_mac(PS)
    assert got[IP].ttl == 63 and got[IP].dst == host_ip(PS)
    recomputed = IP(bytes(got[IP]))
    del recomputed.chksum
    assert IP(bytes(recomputed)).chksum == got[IP].chksum
    assert bytes(got[UDP].payload) == b"hello"


def test_no_route_is_dropped(sut):
    data = bytearray(plain_udp(W1, PS))
    data[30:34] = bytes([10, 9, 9, 9])  # destination 10.9.9.9: no entry
    assert sut.ports.exchange(W1, bytes(data)) == []


def test_all_hot_push_is_acked_by_switch(sut):
    sut.hot(JOB, {10: 0, 11: 1})
    before = sut.stats()
    out = sut.ports.exchange(W1, push(W1, 1, [(10, 5), (11, -7)]))
    ack = only(out, W1)
    agg = ack.agg
    assert agg.op == Op.PUSH_ACK and agg.flags & FLAG_FROM_SWITCH
    assert agg.count == 0 and agg.mask == 0b11 and agg.seq == 1
    assert ack.pkt[IP].src == host_ip(PS) and ack.pkt[IP].dst == host_ip(W1)
    assert ack.pkt[UDP].sport == HOTAGG_PORT and ack.pkt[UDP].len == 8 + 20
    after = sut.stats()
    assert after[Stat.HOT_APPLIED] - before[Stat.HOT_APPLIED] == 2
    assert after[Stat.PUSH_SWITCH_ACK] - before[Stat.PUSH_SWITCH_ACK] == 1
    assert collect(sut, 1) == {10: 5, 11: -7}


def test_mixed_push_forwards_only_cold_entries(sut):
    sut.hot(JOB, {10: 0, 11: 1})
    out = sut.ports.exchange(W1, push(W1, 1, [(10, 1), (500, 2), (11, 3), (501, 4)]))
    got = only(out, PS)
    agg = got.agg
    assert agg.op == Op.PUSH and agg.count == 2 and agg.mask == 0b0101
    assert [(e.key, e.value) for e in agg.entries] == [(500, 2), (501, 4)]
    assert got.pkt[UDP].len == 8 + 20 + 2 * 12 and got.pkt[IP].len == 20 + 8 + 20 + 24
    assert got.pkt[UDP].chksum == 0
    assert collect(sut, 1) == {10: 1, 11: 3}


def test_empty_push_is_acked_by_switch(sut):
    agg = only(sut.ports.exchange(W1, push(W1, 1, [])), W1).agg
    assert agg.op == Op.PUSH_ACK and agg.count == 0


def test_contributions_of_workers_are_summed(sut):
    sut.hot(JOB, {10: 3})
    only(sut.ports.exchange(W1, push(W1, 1, [(10, 5)])), W1)
    only(sut.ports.exchange(W2, push(W2, 1, [(10, 7)])), W2)
    assert collect(sut, 1) == {10: 12}
    assert collect(sut, 1) == {10: 12}  # a collect only reads: asking again is safe


def test_duplicate_push_is_never_added_twice(sut):
    sut.hot(JOB, {10: 0})
    hot_only = push(W1, 1, [(10, 5)])
    mixed = push(W1, 2, [(10, 1), (600, 9)])
    first = [sut.ports.exchange(W1, p) for p in (hot_only, mixed)]
    before = sut.stats()
    again = [sut.ports.exchange(W1, p) for p in (hot_only, mixed)]
    assert only(again[0], W1).agg.op == Op.PUSH_ACK
    # The PS sees exactly the bytes it saw the first time, and deduplicates by seq.
    assert only(again[1], PS).data == only(first[1], PS).data
    assert sut.stats()[Stat.PUSH_DUP] - before[Stat.PUSH_DUP] == 2
    assert collect(sut, 1) == {10: 6}


# Worker ids past 63, up to the last one: ids that agree in their low 6 bits (0, 64, 128)
# and job 2's worker 0 (job index 1, the next job's block of cells) keep dedup cells apart.
HIGH_WORKERS = (64, 128, MAX_WORKERS - 1)


def test_workers_past_63_are_admitted_and_deduplicated_in_cells_of_their_own(sut):
    sut.hot(JOB, {10: 0})
    sut.hot(OTHER_JOB, {10: 0})
    # Not admitted yet: the admission table, not the id's range, stops the last id.
    dropped_as(sut, W1, push(W1, 1, [(10, 1000)], worker=MAX_WORKERS - 1), Stat.FOREIGN_WORKER)
    for worker in HIGH_WORKERS:
        sut.admit(JOB, worker, W1)
    before = sut.stats()
    only(sut.ports.exchange(W1, push(W1, 1, [(10, 1)])), W1)  # worker 0, seq 1
    firsts = {}
    for i, worker in enumerate(HIGH_WORKERS):  # seq 1 too: each is fresh, none a duplicate
        data = push(W1, 1, [(10, 10 ** (i + 1)), (600 + i, 1)], worker=worker)
        firsts[worker] = only(sut.ports.exchange(W1, data), PS).data  # the cold entry goes on
    ack = only(sut.ports.exchange(W4, push(W4, 1, [(10, 7)], job=OTHER_JOB, worker=0)), W4).agg
    assert ack.op == Op.PUSH_ACK and ack.mask == 1
    after = sut.stats()
    assert after[Stat.PUSH] - before[Stat.PUSH] == 2 + len(HIGH_WORKERS)
    assert after[Stat.PUSH_DUP] == before[Stat.PUSH_DUP]
    assert after[Stat.HOT_APPLIED] - before[Stat.HOT_APPLIED] == 2 + len(HIGH_WORKERS)
    # Retransmissions of each high worker's seq 1: duplicates, re-sent as the first time.
    for i, worker in enumerate(HIGH_WORKERS):
        data = push(W1, 1, [(10, 10 ** (i + 1)), (600 + i, 1)], worker=worker)
        assert only(sut.ports.exchange(W1, data), PS).data == firsts[worker]
    assert sut.stats()[Stat.PUSH_DUP] - after[Stat.PUSH_DUP] == len(HIGH_WORKERS)
    assert collect(sut, 1) == {10: 1 + 10 + 100 + 1000}
    assert collect(sut, 1, job=OTHER_JOB) == {10: 7}


def test_push_older_than_window_is_dropped(sut):
    sut.hot(JOB, {10: 0})
    only(sut.ports.exchange(W1, push(W1, 70, [(10, 1)])), W1)
    before = sut.stats()
    assert sut.ports.exchange(W1, push(W1, 6, [(10, 1)])) == []  # 6 and 70 share a window cell
    assert sut.stats()[Stat.PUSH_STALE] - before[Stat.PUSH_STALE] == 1
    assert collect(sut, 1) == {10: 1}


def test_iterations_alternate_copies_and_reset_lazily(sut):
    sut.hot(JOB, {10: 0})
    sut.ports.exchange(W1, push(W1, 1, [(10, 5)], iteration=1))
    sut.ports.exchange(W1, push(W1, 2, [(10, 3)], iteration=2))
    assert collect(sut, 1) == {10: 5}  # still readable while iteration 2 accumulates
    assert collect(sut, 2) == {10: 3}
    sut.ports.exchange(W1, push(W1, 3, [(10, 4)], iteration=3))
    assert collect(sut, 3) == {10: 4}  # first contribution of 3 overwrote 1's copy
    assert collect(sut, 1) == {}


def test_a_push_never_overwrites_an_older_iteration_the_ps_has_not_read(sut):
    """SSP/async (docs/design.md section 8): a push of t whose copy holds another iteration
    while t - 2 is not read is refused (SLOT_BUSY) and goes to the PS; once a COLLECT of
    t - 1 (here an empty one, as the PS sends after applying t - 2) says so, it claims it."""
    sut.hot(JOB, {10: 0})
    only(sut.ports.exchange(W1, push(W1, 1, [(10, 5)], iteration=1)), W1)
    before = sut.stats()
    got = only(sut.ports.exchange(W2, push(W2, 1, [(10, 4), (11, 1)], iteration=3)), PS)
    assert [(e.key, e.value) for e in got.agg.entries] == [(10, 4), (11, 1)]
    assert got.agg.mask == 0
    assert sut.stats()[Stat.SLOT_BUSY] - before[Stat.SLOT_BUSY] == 1
    assert collect(sut, 1) == {10: 5}  # iteration 1 is intact, and reading it releases 0 only
    only(sut.ports.exchange(W2, push(W2, 2, [(10, 4)], iteration=3)), PS)
    assert collect_reply(sut, 2, []).count == 0  # an empty COLLECT of 2: iteration 1 is read
    assert only(sut.ports.exchange(W2, push(W2, 3, [(10, 4)], iteration=3)), W2).agg.mask == 1
    assert collect(sut, 3) == {10: 4}
    assert sut.stats()[Stat.SLOT_BUSY] - before[Stat.SLOT_BUSY] == 2


def test_a_push_far_ahead_never_claims_even_an_untouched_copy(sut):
    """An untouched copy (tag 0) is not claimed by a push more than 2 iterations past what the
    PS read: a slower worker's older iteration of that parity would claim it back and
    overwrite the sum. A push of its own iteration still adds, and a COLLECT of iteration 0
    records nothing."""
    sut.hot(JOB, {10: 0})
    only(sut.ports.exchange(W1, push(W1, 1, [(10, 7)], iteration=2)), W1)
    assert collect_reply(sut, 0, []).count == 0
    before = sut.stats()
    only(sut.ports.exchange(W1, push(W1, 2, [(10, 2)], iteration=5)), PS)  # copy 1 untouched
    only(sut.ports.exchange(W1, push(W1, 3, [(10, 1)], iteration=4)), PS)  # copy 0 holds 2
    assert sut.stats()[Stat.SLOT_BUSY] - before[Stat.SLOT_BUSY] == 2
    only(sut.ports.exchange(W2, push(W2, 1, [(10, 3)], iteration=2)), W2)  # its own: adds
    assert collect(sut, 2) == {10: 10} and collect(sut, 5) == {} and collect(sut, 4) == {}


@pytest.mark.parametrize("start,add", [(INT32_MAX - 1, 2), (INT32_MIN + 1, -2)])
def test_overflow_goes_to_the_ps_instead_of_wrapping(sut, start, add):
    sut.hot(JOB, {10: 0})
    only(sut.ports.exchange(W1, push(W1, 1, [(10, start)])), W1)
    before = sut.stats()
    got = only(sut.ports.exchange(W2, push(W2, 1, [(10, add), (11, 1)])), PS)
    assert [(e.key, e.value) for e in got.agg.entries] == [(10, add), (11, 1)]
    assert sut.stats()[Stat.OVERFLOW] - before[Stat.OVERFLOW] == 1
    assert collect(sut, 1) == {10: start}


def test_reassigned_slot_refuses_another_key_in_the_same_iteration(sut):
    sut.hot(JOB, {10: 0})
    sut.ports.exchange(W1, push(W1, 1, [(10, 5)]))
    sut.evict(JOB, [10])
    sut.hot(JOB, {20: 0})
    before = sut.stats()
    got = only(sut.ports.exchange(W2, push(W2, 1, [(20, 8), (10, 2)])), PS)
    assert [(e.key, e.value) for e in got.agg.entries] == [(20, 8), (10, 2)]
    assert sut.stats()[Stat.SLOT_CONFLICT] - before[Stat.SLOT_CONFLICT] == 1
    assert collect(sut, 1) == {10: 5}  # the old key's sum is still delivered
    only(sut.ports.exchange(W2, push(W2, 2, [(20, 8)], iteration=2)), W2)
    assert collect(sut, 2) == {20: 8}


def test_jobs_never_touch_each_others_slots(sut):
    sut.hot(JOB, {10: 0})
    sut.hot(OTHER_JOB, {10: 0})
    sut.ports.exchange(W1, push(W1, 1, [(10, 5)]))
    sut.ports.exchange(W4, push(W4, 1, [(10, 100)], job=OTHER_JOB, worker=0))
    assert collect(sut, 1) == {10: 5}
    assert collect(sut, 1, job=OTHER_JOB) == {10: 100}
    # Offsets past the job's slot_count read nothing, not the neighbour's slots.
    assert collect(sut, 1, offsets=[sut.slot_count(OTHER_JOB)], job=OTHER_JOB) == {}


def test_pull_is_answered_from_cache_only_for_the_cached_iteration(sut):
    sut.hot(JOB, {10: 0, 11: 1})
    wb = only(
        sut.ports.exchange(
            PS, frame(PS, W1, Op.WRITEBACK, [(10, 99), (11, -1), (12, 5)], iteration=2, job_id=JOB)
        ),
        PS,
    ).agg
    assert wb.op == Op.WRITEBACK_ACK and wb.mask == 0b011
    hit = only(
        sut.ports.exchange(W1, frame(W1, PS, Op.PULL, [(11, 0), (10, 0)], iteration=2, job_id=JOB)),
        W1,
    )
    assert hit.agg.op == Op.PULL_REPLY and hit.agg.flags & FLAG_FROM_SWITCH
    assert [(e.key, e.value) for e in hit.agg.entries] == [(11, -1), (10, 99)]
    assert hit.pkt[IP].src == host_ip(PS)
    stale = only(
        sut.ports.exchange(W1, frame(W1, PS, Op.PULL, [(10, 0)], iteration=3, job_id=JOB)), PS
    )
    assert stale.agg.op == Op.PULL and stale.agg.mask == 0
    partial = only(
        sut.ports.exchange(W1, frame(W1, PS, Op.PULL, [(10, 0), (12, 0)], iteration=2, job_id=JOB)),
        PS,
    )
    assert partial.agg.op == Op.PULL and partial.agg.mask == 0b01


def pull(sut, keys, iteration: int):
    """A PULL from W1: the switch's reply (port W1) or the PULL it forwards to the PS."""
    data = frame(W1, PS, Op.PULL, [(k, 0) for k in keys], iteration=iteration, job_id=JOB)
    out = sut.ports.exchange(W1, data)
    assert len(out) == 1 and out[0].port in (W1, PS), [(o.port, o.pkt.summary()) for o in out]
    return out[0]


def test_collect_refresh_moves_the_cache_to_the_next_iteration(sut):
    sut.hot(JOB, {10: 0, 11: 1, 12: 2})
    wb = only(
        sut.ports.exchange(
            PS,
            frame(PS, W1, Op.WRITEBACK, [(10, 1000), (11, 500), (12, 70)], iteration=1, job_id=JOB),
        ),
        PS,
    ).agg
    assert wb.op == Op.WRITEBACK_ACK and wb.mask == 0b111
    only(sut.ports.exchange(W1, push(W1, 1, [(10, 5), (11, -7)])), W1)
    only(sut.ports.exchange(W2, push(W2, 1, [(10, 3)])), W2)
    before = sut.stats()
    ask = [(10, 0), (11, 1), (12, 2)]  # refresh 10 and 11; 12 (untouched) is only read
    reply = collect_reply(sut, 1, ask, mask=0b011)
    assert reply.mask == 0b011 and reply.cached == 0b011
    assert [(e.key, e.value) for e in reply.entries] == [(10, 8), (11, -7), (12, 2)]
    assert sut.stats()[Stat.CACHE_WRITE] - before[Stat.CACHE_WRITE] == 2
    # A lost reply is asked again: same answer, nothing subtracted twice.
    assert bytes(collect_reply(sut, 1, ask, mask=0b011)) == bytes(reply)
    assert sut.stats()[Stat.CACHE_WRITE] - before[Stat.CACHE_WRITE] == 2
    hit = pull(sut, [11, 10], iteration=2)
    assert hit.port == W1 and hit.agg.op == Op.PULL_REPLY and hit.agg.flags & FLAG_FROM_SWITCH
    assert [(e.key, e.value) for e in hit.agg.entries] == [(11, 507), (10, 992)]
    assert pull(sut, [10], iteration=1).port == PS  # the tag moved on to 2
    assert pull(sut, [12], iteration=2).port == PS  # not asked: still tagged 1
    assert pull(sut, [12], iteration=1).agg.op == Op.PULL_REPLY


def test_collect_invalidate_untags_the_cache(sut):
    sut.hot(JOB, {10: 0})
    sut.ports.exchange(PS, frame(PS, W1, Op.WRITEBACK, [(10, 100)], iteration=1, job_id=JOB))
    only(sut.ports.exchange(W1, push(W1, 1, [(10, 4)])), W1)
    assert collect_reply(sut, 1, [(10, 0)], mask=1).cached == 1
    assert [(e.key, e.value) for e in pull(sut, [10], iteration=2).agg.entries] == [(10, 96)]
    wrong = collect_reply(sut, 1, [(11, 0)], mask=1, flags=FLAG_INVALIDATE)
    assert wrong.cached == 0 and pull(sut, [10], iteration=2).port == W1  # other key: kept
    before = sut.stats()
    reply = collect_reply(sut, 1, [(10, 0)], mask=1, flags=FLAG_INVALIDATE)
    assert reply.cached == 0 and reply.mask == 1 and reply.flags & FLAG_INVALIDATE
    assert [(e.key, e.value) for e in reply.entries] == [(10, 4)]  # still collected
    assert sut.stats()[Stat.CACHE_WRITE] == before[Stat.CACHE_WRITE]
    miss = pull(sut, [10], iteration=2)
    assert miss.port == PS and miss.agg.op == Op.PULL and miss.agg.mask == 0
    # Untagged, it is no longer tagged 1 either: a refresh is refused.
    assert collect_reply(sut, 1, [(10, 0)], mask=1).cached == 0
    assert pull(sut, [10], iteration=2).port == PS


def test_pull_after_eviction_goes_to_ps(sut):
    sut.hot(JOB, {10: 0})
    sut.ports.exchange(PS, frame(PS, W1, Op.WRITEBACK, [(10, 99)], iteration=2, job_id=JOB))
    sut.evict(JOB, [10])
    sut.hot(JOB, {20: 0})  # slot 0 now belongs to key 20, whose cache is not written
    for key in (10, 20):
        out = sut.ports.exchange(W1, frame(W1, PS, Op.PULL, [(key, 0)], iteration=2, job_id=JOB))
        assert only(out, PS).agg.op == Op.PULL


def test_replies_and_done_pass_through(sut):
    before = sut.stats()
    for op in (
        Op.PUSH_ACK,
        Op.PULL_REPLY,
        Op.DONE,
        Op.DONE_ACK,
        Op.COLLECT_REPLY,
        Op.WRITEBACK_ACK,
    ):
        data = frame(W1, PS, op, [(1, 2)], seq=3, iteration=1, job_id=JOB)
        got = only(sut.ports.exchange(W1, data), PS)
        assert bytes(got.pkt[Hotagg]) == bytes(Hotagg(data[42:]))
    assert sut.stats()[Stat.PASS] - before[Stat.PASS] == 6


def test_drop_simulator(sut):
    sut.drop_rate(1.0)
    before = sut.stats()
    assert sut.ports.exchange(W1, push(W1, 1, [(10, 1)])) == []
    assert sut.stats()[Stat.SIM_DROP] - before[Stat.SIM_DROP] == 1
    sut.drop_rate(0.5)
    for seq in range(1, 201):
        sut.ports.send(W1, frame(W1, PS, Op.DONE, [], seq=seq, iteration=1, job_id=JOB))
    # All 200 through the switch (the markers are not hotagg, so never dropped) before the
    # rate changes back: a switch still working through them would pass the rest.
    passed = [r for r in sut.ports.settle(W1) if r.port == PS]
    sut.drop_rate(0.0)
    assert 60 <= len(passed) <= 140, len(passed)
    assert len(sut.ports.exchange(W1, push(W1, 1, []))) == 1


def _malformed_cases():
    good = push(W1, 1, [(10, 1), (11, 2)])
    cases = {
        "truncated header": (good[: 42 + 10], Stat.MALFORMED),
        "truncated entries": (good[:-5], Stat.MALFORMED),
        "count 9": (good[: 42 + 3] + b"\x09" + good[42 + 4 :], Stat.MALFORMED),
        "count says 3, carries 2": (good[: 42 + 3] + b"\x03" + good[42 + 4 :], Stat.MALFORMED),
        "count says 1, carries 2": (good[: 42 + 3] + b"\x01" + good[42 + 4 :], Stat.MALFORMED),
        "version 2": (good[:42] + b"\x02" + good[43:], Stat.MALFORMED),
        "seq 0": (push(W1, 0, [(10, 1)]), Stat.MALFORMED),
        "op 0": (good[:43] + b"\x00" + good[44:], Stat.UNKNOWN_OP),
        "op 12": (good[:43] + b"\x0c" + good[44:], Stat.UNKNOWN_OP),
        "unknown job": (push(W1, 1, [(10, 1)], job=999), Stat.UNKNOWN_JOB),
        "worker MAX_WORKERS": (push(W1, 1, [(10, 1)], worker=MAX_WORKERS), Stat.BAD_WORKER),
        "worker MAX_WORKERS, not admitted": (
            push(W1, 1, [(10, 1)], worker=MAX_WORKERS),
            Stat.FOREIGN_WORKER,
        ),
    }
    return cases


@pytest.mark.parametrize("case", list(_malformed_cases()))
def test_malformed_input_is_dropped_and_counted(sut, case):
    sut.hot(JOB, {10: 0})
    if case == "worker MAX_WORKERS":
        # Admitted by a raw entry (the controller refuses worker ids >= MAX_WORKERS):
        # BAD_WORKER is what stops it then.
        entry = sut.p4info.table_entry(
            "HotaggIngress.worker_admission",
            {"job_id": JOB, "worker_id": MAX_WORKERS, "ingress_port": W1, "src_addr": 0x0A000001},
            "HotaggIngress.admit",
            {},
        )
        sut.client.write_entries("insert", [entry])
    data, reason = _malformed_cases()[case]
    before = sut.stats()
    assert sut.ports.exchange(W1, data) == []
    after = sut.stats()
    assert after[reason] - before[reason] == 1
    assert after[Stat.HOT_APPLIED] == before[Stat.HOT_APPLIED]
    # The switch is still alive and nothing was added.
    assert only(sut.ports.exchange(W1, push(W1, 5, [(10, 2)])), W1).agg.op == Op.PUSH_ACK
    assert collect(sut, 1) == {10: 2}


def test_garbage_frames_do_not_hurt(sut):
    for data in (b"", b"\x00" * 14, b"\xff" * 60, plain_udp(W1, PS)[:20]):
        with contextlib.suppress(OSError):  # the kernel refuses some of these; that is fine
            sut.ports.send(W1, data)
    assert len(sut.ports.exchange(W1, plain_udp(W1, PS))) == 1


def test_sums_stay_exact_under_duplicates_hot_set_changes_and_overflow(sut):
    """A small PS in the test: cold parts deduplicated by (worker, seq) plus the collected
    hot sums must equal the true sums, however the hot set moves within an iteration."""
    import random

    rng = random.Random(7)
    keys = list(range(100, 124))
    truth: dict[tuple[int, int], int] = {}
    ps: dict[tuple[int, int], int] = {}
    seen: set[tuple[int, int]] = set()
    seqs = {W1: 0, W2: 0}
    hot = dict(zip(keys[:6], range(6)))
    sut.hot(JOB, hot)
    for it in (1, 2, 3):
        for step in range(12):
            if step == 6:  # move the hot set mid-iteration: evict some, reuse their slots
                gone = rng.sample(sorted(hot), 3)
                fresh = rng.sample([k for k in keys if k not in hot], 3)
                sut.evict(JOB, gone)
                moved = {k: hot.pop(g) for k, g in zip(fresh, gone)}
                sut.hot(JOB, moved)
                hot.update(moved)
            w = rng.choice((W1, W2))
            seqs[w] += 1
            entries = [(k, rng.choice((1, -3, 2**30, -(2**30)))) for k in rng.sample(keys, 8)]
            for k, v in entries:
                truth[(it, k)] = truth.get((it, k), 0) + v
            data = push(w, seqs[w], entries, iteration=it)
            for _ in range(rng.choice((1, 1, 2, 3))):  # duplicates and retransmissions
                for r in sut.ports.exchange(w, data):
                    if r.port == PS and r.agg.op == Op.PUSH and (w, seqs[w]) not in seen:
                        seen.add((w, seqs[w]))
                        for e in r.agg.entries:
                            ps[(it, e.key)] = ps.get((it, e.key), 0) + e.value
        for first in range(0, sut.slot_count(JOB), MAX_ENTRIES):
            chunk = range(first, first + MAX_ENTRIES)
            for key, value in collect(sut, it, offsets=chunk).items():
                ps[(it, key)] = ps.get((it, key), 0) + value
    assert {k: v for k, v in ps.items() if v} == {k: v for k, v in truth.items() if v}
    stats = sut.stats()  # the run went through every path it is meant to test
    assert stats[Stat.PUSH_DUP] and stats[Stat.OVERFLOW] and stats[Stat.SLOT_CONFLICT]


def dropped_as(sut, port: int, data: bytes, reason: Stat) -> None:
    """`data` sent on `port` is dropped, counted once under `reason` and nothing else but
    the drop simulator's draw (rate 0: none) changes a stat."""
    before = sut.stats()
    assert sut.ports.exchange(port, data) == []
    after = sut.stats()
    assert {s: after[s] - before[s] for s in Stat if after[s] != before[s]} == {reason: 1}


# --- TTL (docs/design.md §2, steps 5c and 7) ---

CPU_NET = (10 << 24 | 1 << 8, 24)  # 10.0.1.0/24


def udp_with_ttl(src: int, dst: int, ttl: int, sport: int = 5000, dport: int = 9) -> bytes:
    return udp_frame(src, dst, b"ttl test", sport=sport, dport=dport, ttl=ttl)


def ttl_cases(ttl: int) -> dict[str, tuple[int, bytes]]:
    """(ingress port, frame) of each kind of IPv4 packet the switch routes, with `ttl`."""
    return {
        "plain UDP": (W1, udp_with_ttl(W1, PS, ttl)),
        "hotagg reply": (
            PS,
            frame(
                PS,
                W1,
                Op.PUSH_ACK,
                [],
                sport=HOTAGG_PORT,
                dport=CLIENT_SPORT + W1,
                ttl=ttl,
                seq=1,
                iteration=1,
                job_id=JOB,
            ),
        ),
        "cold PUSH": (W1, push(W1, 1, [(500, 1)], ttl=ttl)),
        "all-hot PUSH": (W1, push(W1, 2, [(10, 1)], ttl=ttl)),
        "DONE": (W1, frame(W1, PS, Op.DONE, [], seq=0, iteration=1, job_id=JOB, ttl=ttl)),
    }


@pytest.mark.parametrize("ttl", [0, 1])
@pytest.mark.parametrize("case", list(ttl_cases(0)))
def test_a_frame_that_would_leave_with_ttl_0_is_dropped_and_counted(sut, case, ttl):
    """The decrement is on bit<8>: without the check TTL 0 would leave as 255."""
    sut.hot(JOB, {10: 0})
    port, data = ttl_cases(ttl)[case]
    dropped_as(sut, port, data, Stat.TTL_EXPIRED)


def test_ttl_2_leaves_with_1_and_a_switch_reply_carries_the_requests_ttl_less_one(sut):
    sut.hot(JOB, {10: 0})
    cases = ttl_cases(2)
    for case, to in (("plain UDP", PS), ("hotagg reply", W1), ("cold PUSH", PS), ("DONE", PS)):
        port, data = cases[case]
        got = only(sut.ports.exchange(port, data), to).pkt
        assert got[IP].ttl == 1, case
    ack = only(sut.ports.exchange(W1, cases["all-hot PUSH"][1]), W1)
    assert ack.agg.op == Op.PUSH_ACK and ack.pkt[IP].ttl == 1
    only(writeback(sut, PS, PS, [(10, 7)], iteration=1), PS)
    pulled = frame(W1, PS, Op.PULL, [(10, 0)], iteration=1, job_id=JOB, ttl=2)
    hit = only(sut.ports.exchange(W1, pulled), W1)
    assert hit.agg.op == Op.PULL_REPLY and hit.pkt[IP].ttl == 1


def test_a_request_with_ttl_1_is_dropped_before_it_changes_any_state(sut):
    """Dropped at step 5c, before processing: were it processed and then dropped at step 7,
    its hot entries would be summed (and its seq recorded) while the frame goes nowhere."""
    sut.hot(JOB, {10: 0, 11: 1})
    only(writeback(sut, PS, PS, [(10, 100)], iteration=1), PS)
    dropped_as(sut, W1, push(W1, 1, [(10, 1000), (11, 1000)], ttl=1), Stat.TTL_EXPIRED)
    dropped_as(sut, W1, push(W1, 1, [(10, 1000), (500, 1)], ttl=1), Stat.TTL_EXPIRED)
    wb = frame(PS, W1, Op.WRITEBACK, [(10, 666), (11, 666)], iteration=1, job_id=JOB, ttl=1)
    dropped_as(sut, PS, wb, Stat.TTL_EXPIRED)
    invalidate = frame(
        PS, W1, Op.COLLECT, [(10, 0)], seq=1, iteration=1, job_id=JOB, mask=1,
        flags=FLAG_INVALIDATE, ttl=1,
    )  # fmt: skip
    dropped_as(sut, PS, invalidate, Stat.TTL_EXPIRED)
    # seq 1 is still fresh (no dedup cell written), the slots hold nothing, the cache
    # still holds the PS's value tagged 1 and nothing for key 11.
    before = sut.stats()
    ack = only(sut.ports.exchange(W1, push(W1, 1, [(10, 5)])), W1).agg
    assert ack.op == Op.PUSH_ACK and ack.mask == 1
    after = sut.stats()
    assert (
        after[Stat.PUSH] - before[Stat.PUSH] == 1 and after[Stat.PUSH_DUP] == before[Stat.PUSH_DUP]
    )
    assert collect(sut, 1) == {10: 5}
    assert [(e.key, e.value) for e in pull(sut, [10], iteration=1).agg.entries] == [(10, 100)]
    assert pull(sut, [11], iteration=1).port == PS


def to_address(ttl: int, dst_ip: str, src: int = W1) -> bytes:
    """A UDP frame from host `src` to any address (the harness's hosts are 10.0.0.1-4)."""
    return encode_frame(
        b"ttl test", src_mac=host_mac(src), dst_mac=SWITCH_MAC, src_ip=host_ip(src),
        dst_ip=dst_ip, sport=5000, dport=9, ttl=ttl,
    )  # fmt: skip


def test_ttl_on_the_cpu_paths(sut):
    """send_to_cpu neither checks nor decrements the TTL (the controller takes the packet as
    it came); an ipv4_forward route out of the CPU port is a route like any other, checked
    and decremented; a PacketOut is not routed and leaves as the controller wrote it."""
    entry = sut.p4info.table_entry(
        "HotaggIngress.ipv4_lpm", {"dst_addr": CPU_NET}, "HotaggIngress.send_to_cpu", {}
    )
    sut.client.write_entries("insert", [entry])
    data = to_address(1, "10.0.1.5")
    before = sut.stats()
    assert sut.ports.exchange(W1, data) == []
    packet_in = sut.client.packet_in(timeout=3.0)
    assert packet_in is not None and packet_in.payload == data
    assert sut.stats() == before
    # The same prefix routed by ipv4_forward to the CPU port: TTL 1 dropped, TTL 2 decremented.
    entry = sut.p4info.table_entry(
        "HotaggIngress.ipv4_lpm", {"dst_addr": CPU_NET}, "HotaggIngress.ipv4_forward",
        {"dst_mac": 0x02000000FFFF, "port": CPU_PORT},
    )  # fmt: skip
    sut.client.write_entries("modify", [entry])
    dropped_as(sut, W1, data, Stat.TTL_EXPIRED)
    assert sut.ports.exchange(W1, to_address(2, "10.0.1.5")) == []
    packet_in = sut.client.packet_in(timeout=3.0)
    assert packet_in is not None and Ether(packet_in.payload)[IP].ttl == 1
    # A PacketOut with TTL 0 leaves on the port it names, TTL still 0.
    meta = sut.p4info.packet_metadata("packet_out").metadata
    egress_id = next(m.id for m in meta if m.name == "egress_port")
    before = sut.stats()
    sut.client.packet_out(to_address(0, host_ip(W2)), {egress_id: encode_value(W2, 9)})
    got = sut.ports.collect(lambda r: r.port == W2)
    assert got[-1].pkt[IP].ttl == 0 and bytes(got[-1].pkt[UDP].payload) == b"ttl test"
    assert sut.stats() == before


def test_an_unrouted_frame_with_ttl_1_counts_no_route(sut):
    """The route's action decides: `drop` counts NO_ROUTE (hotagg only), not TTL_EXPIRED."""
    unrouted = 9  # 10.0.0.9: no route
    data = frame(PS, unrouted, Op.PUSH_ACK, [], sport=HOTAGG_PORT, dport=CLIENT_SPORT + W1,
                 ttl=1, seq=1, iteration=1, job_id=JOB)  # fmt: skip
    dropped_as(sut, PS, data, Stat.NO_ROUTE)


# --- tenancy: forged traffic from hosts of another job (docs/design.md §2, "Tenancy") ---


def test_push_with_an_unused_worker_id_from_another_port_is_dropped(sut):
    sut.hot(JOB, {10: 0})
    # h4 (job 2's worker) pushes into job 1 as worker 5, which no host is admitted for.
    dropped_as(sut, W4, push(W4, 1, [(10, 1000)], worker=5), Stat.FOREIGN_WORKER)
    # ... as job 1's worker 0, with its own address, then with h1's (the port gives it away).
    dropped_as(sut, W4, push(W4, 1, [(10, 1000)], worker=0), Stat.FOREIGN_WORKER)
    dropped_as(sut, W4, push(W1, 1, [(10, 1000)], worker=0), Stat.FOREIGN_WORKER)
    # h1 as job 1's worker 1 (h2's id) from its own port: admitted for 0, not for 1.
    dropped_as(sut, W1, push(W1, 1, [(10, 1000)], worker=1), Stat.FOREIGN_WORKER)
    only(sut.ports.exchange(W1, push(W1, 1, [(10, 5)])), W1)
    only(sut.ports.exchange(W2, push(W2, 1, [(10, 7)])), W2)
    assert collect(sut, 1) == {10: 12}


def test_forged_next_seq_from_another_port_leaves_the_real_push_counted_once(sut):
    sut.hot(JOB, {10: 0})
    # The forger sends worker 0's next seq first, from h4's port with h1's address: without
    # tenancy the switch would take its value and ack the real push as a duplicate.
    dropped_as(sut, W4, push(W1, 1, [(10, 1000)]), Stat.FOREIGN_WORKER)
    dropped_as(sut, W4, push(W1, 1, [(10, 1000), (500, 1)]), Stat.FOREIGN_WORKER)
    before = sut.stats()
    ack = only(sut.ports.exchange(W1, push(W1, 1, [(10, 5)])), W1).agg
    assert ack.op == Op.PUSH_ACK and ack.mask == 1
    after = sut.stats()
    assert after[Stat.PUSH] - before[Stat.PUSH] == 1
    assert after[Stat.PUSH_DUP] == before[Stat.PUSH_DUP]
    assert after[Stat.HOT_APPLIED] - before[Stat.HOT_APPLIED] == 1
    assert collect(sut, 1) == {10: 5}


def test_seq_far_ahead_from_another_port_does_not_make_real_pushes_stale(sut):
    sut.hot(JOB, {10: 0})
    for seq in (1 + 2**31, 2 + 2**31, 2**32 - 1):
        dropped_as(sut, W4, push(W1, seq, [(10, 1)]), Stat.FOREIGN_WORKER)
    before = sut.stats()
    for seq, value in ((1, 5), (2, 6), (63, 7)):
        only(sut.ports.exchange(W1, push(W1, seq, [(10, value)])), W1)
    after = sut.stats()
    assert after[Stat.PUSH_STALE] == before[Stat.PUSH_STALE]
    assert collect(sut, 1) == {10: 18}


def writeback(sut, port: int, src: int, entries, iteration: int, job: int = JOB):
    return sut.ports.exchange(
        port, frame(src, W1, Op.WRITEBACK, entries, iteration=iteration, job_id=job)
    )


def test_forged_writeback_does_not_poison_the_cache(sut):
    sut.hot(JOB, {10: 0, 11: 1})
    only(writeback(sut, PS, PS, [(10, 100)], iteration=1), PS)
    # A worker of the job, another job's host, and another job's host with the PS's address.
    for port, src in ((W1, W1), (W4, W4), (W4, PS)):
        data = frame(src, W1, Op.WRITEBACK, [(10, 666), (11, 666)], iteration=1, job_id=JOB)
        dropped_as(sut, port, data, Stat.FOREIGN_PS)
    hit = pull(sut, [10], iteration=1)
    assert hit.port == W1 and [(e.key, e.value) for e in hit.agg.entries] == [(10, 100)]
    miss = pull(sut, [11], iteration=1)  # never written by the PS: the PS answers
    assert miss.port == PS and miss.agg.mask == 0


def test_foreign_collect_reveals_and_changes_nothing(sut):
    sut.hot(JOB, {10: 0})
    only(writeback(sut, PS, PS, [(10, 100)], iteration=1), PS)
    only(sut.ports.exchange(W1, push(W1, 1, [(10, 4)])), W1)
    # h4, job 2's worker, asks for job 1's sums, with a refresh, and to untag its cache;
    # then with the PS's address from its own port.
    for port, src, mask, flags in (
        (W4, W4, 0, 0),
        (W4, W4, 1, 0),
        (W4, W4, 1, FLAG_INVALIDATE),
        (W4, PS, 1, FLAG_INVALIDATE),
        (W2, W2, 1, FLAG_INVALIDATE),  # a worker of the job itself
    ):
        data = frame(
            src, W1, Op.COLLECT, [(10, 0)], seq=1, iteration=1, job_id=JOB, mask=mask, flags=flags
        )
        dropped_as(sut, port, data, Stat.FOREIGN_PS)
    # The cache is still tagged 1 (not refreshed, not untagged), and the PS's own COLLECT
    # gets the exact sum and refreshes it.
    assert [(e.key, e.value) for e in pull(sut, [10], iteration=1).agg.entries] == [(10, 100)]
    reply = collect_reply(sut, 1, [(10, 0)], mask=1)
    assert reply.mask == 1 and reply.cached == 1
    assert [(e.key, e.value) for e in reply.entries] == [(10, 4)]
    assert [(e.key, e.value) for e in pull(sut, [10], iteration=2).agg.entries] == [(10, 96)]
    # Job 2's PS (h3) is admitted for job 2 only on port 3: job 2's sums stay its own too.
    dropped_as(sut, W4, frame(W4, W1, Op.COLLECT, [(0, 0)], iteration=1, job_id=OTHER_JOB),
           Stat.FOREIGN_PS)  # fmt: skip


def test_every_worker_op_needs_the_workers_admission_and_changes_apply_at_once(sut):
    sut.hot(JOB, {10: 0})
    for op in (Op.PULL, Op.DONE, Op.PUSH_ACK, Op.COLLECT_REPLY):
        data = frame(W4, PS, op, [(10, 0)], seq=1, iteration=1, job_id=JOB, worker_id=1)
        dropped_as(sut, W4, data, Stat.FOREIGN_WORKER)
    sut.revoke(JOB, 1, W2)
    dropped_as(sut, W2, push(W2, 1, [(10, 7)]), Stat.FOREIGN_WORKER)
    # h2's address admitted on port 4 instead: the same frame passes there (its ack follows
    # the route to h2's address), not on port 2.
    sut.admit(JOB, 1, W4, host=W2)
    assert only(sut.ports.exchange(W4, push(W2, 1, [(10, 7)])), W2).agg.op == Op.PUSH_ACK
    dropped_as(sut, W2, push(W2, 2, [(10, 7)]), Stat.FOREIGN_WORKER)
    # The PS's admission is per job: revoked for job 1, h3 still collects job 2.
    sut.revoke(JOB, None, PS)
    dropped_as(
        sut, PS, frame(PS, W1, Op.COLLECT, [(0, 0)], iteration=1, job_id=JOB), Stat.FOREIGN_PS
    )
    assert collect(sut, 1, job=OTHER_JOB) == {}
    sut.admit(JOB, None, PS)
    assert collect(sut, 1) == {10: 7}


# --- replies: only from where the job's PS is (docs/design.md §2, "Tenancy") ---

WORKER_REPLIES = (Op.PUSH_ACK, Op.PULL_REPLY, Op.DONE_ACK)


def reply(src: int, op: Op, *, to: int = W1, job: int = JOB, entries=((10, 5),)) -> bytes:
    """A reply from host `src`'s address (the PS's port 18497) to worker host `to`."""
    return frame(
        src, to, op, list(entries), sport=HOTAGG_PORT, dport=CLIENT_SPORT + to, seq=1,
        iteration=1, job_id=job, worker_id=to - 1,
    )  # fmt: skip


@pytest.mark.parametrize("op", WORKER_REPLIES)
def test_a_reply_to_a_worker_passes_only_from_the_jobs_ps(sut, op):
    genuine = reply(PS, op)
    before = sut.stats()
    got = only(sut.ports.exchange(PS, genuine), W1)
    assert bytes(got.agg) == genuine[42:] and got.pkt[IP].src == host_ip(PS)
    assert sut.stats() == before  # an admitted reply is routed and counts nothing
    # Another job's host, with the PS's address and with its own; a worker of the same job
    # with the PS's address; the PS's port for a job it is not admitted for.
    for port, data in (
        (W4, genuine),
        (W4, reply(W4, op)),
        (W2, genuine),
        (W2, reply(W2, op, to=W1)),
        (PS, reply(PS, op, job=99)),
    ):
        dropped_as(sut, port, data, Stat.FOREIGN_REPLY)
    # Once the PS's admission is revoked, its own replies are refused too.
    sut.revoke(JOB, None, PS)
    dropped_as(sut, PS, genuine, Stat.FOREIGN_REPLY)


def test_replies_to_the_ps_are_routed_whoever_sends_them(sut):
    """COLLECT_REPLY and WRITEBACK_ACK go to a PS, which takes them only as answers to its
    own requests (docs/trust.md says what is left)."""
    for op in (Op.COLLECT_REPLY, Op.WRITEBACK_ACK):
        data = reply(W4, op, to=PS)
        got = only(sut.ports.exchange(W4, data), PS)
        assert bytes(got.agg) == data[42:]


def test_malformed_replies_are_dropped_and_counted(sut):
    good = reply(PS, Op.PULL_REPLY, entries=[(10, 1), (11, 2)])
    for data, reason in (
        (good[: 42 + 10], Stat.MALFORMED),  # truncated header
        (good[:-5], Stat.MALFORMED),  # truncated entries
        (good[: 42 + 3] + b"\x09" + good[42 + 4 :], Stat.MALFORMED),  # count 9
        (good[: 42 + 3] + b"\x01" + good[42 + 4 :], Stat.MALFORMED),  # count vs UDP length
        (good[:42] + b"\x02" + good[43:], Stat.MALFORMED),  # version 2
        (good[:43] + b"\x00" + good[44:], Stat.UNKNOWN_OP),
        (good[:43] + b"\x0c" + good[44:], Stat.UNKNOWN_OP),  # past OP_MAX
    ):
        dropped_as(sut, PS, data, reason)


def test_the_switchs_own_replies_carry_the_ps_address_and_still_pass(sut):
    """A switch reply leaves by egress without crossing this switch's ingress again; a
    forged copy of it sent back in from a worker's port is refused."""
    sut.hot(JOB, {10: 0})
    ack = only(sut.ports.exchange(W1, push(W1, 1, [(10, 5)])), W1)
    assert ack.agg.op == Op.PUSH_ACK and ack.pkt[IP].src == host_ip(PS)
    dropped_as(sut, W2, ack.data, Stat.FOREIGN_REPLY)
