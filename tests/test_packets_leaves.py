"""Packet tests of aggregation at every leaf (docs/design.md section 7) on both targets:
FLUSH, partial PUSHes, the service address, chained WRITEBACKs.

The harness's switch stands in for each role in turn: a remote leaf (it turns a FLUSH into a
partial PUSH to the PS), the root (it absorbs partial PUSHes that h4, standing in for a
remote leaf, sends as its pseudo-worker), a spine (no service address: partial PUSHes pass)
and a link of the WRITEBACK chain (h1's address standing in for the next leaf). Expected
outputs are built from the design's rules with the Scapy layers, as in test_packets.py.
"""

from __future__ import annotations

import pytest
from scapy.layers.inet import IP, UDP

from contract.constants import (
    FLAG_CHAIN,
    FLAG_FROM_SWITCH,
    FLAG_RETRANSMIT,
    HOTAGG_PORT,
    MAX_ENTRIES,
    MAX_WORKERS,
    Op,
    Stat,
)
from contract.layers import Hotagg
from controller.leaves import ChainNext, ServiceAddress
from tests.packet_harness import frame, host_ip
from tests.test_packets import JOB, PS, W1, W2, W4, collect, dropped_as, only, pull, push

pytestmark = [pytest.mark.root]

SERVICE = 254  # the switch's service address is 10.0.0.254 (host_ip(SERVICE)); no route to it
PSEUDO = 40  # the pseudo-worker id of the remote leaf (h4 stands in for it)


def serve_at(sut, host: int | None) -> None:
    """The switch's service address: host_ip(host), or none (0)."""
    ServiceAddress(sut.client, sut.p4info).set(host_ip(host) if host else 0)


def flush(batch: int, iteration: int = 1, seq: int = 7, *, src: int = PS, dst: int = SERVICE,
          **fields: int) -> bytes:  # fmt: skip
    """A FLUSH of `batch` from the PS's socket (port 18497) to `dst`."""
    return frame(src, dst, Op.FLUSH, [], sport=HOTAGG_PORT, seq=seq, iteration=iteration,
                 job_id=JOB, worker_id=PSEUDO, aux=batch, **fields)  # fmt: skip


def partial(seq: int, entries, iteration: int = 1, worker: int = PSEUDO, **fields: int) -> bytes:
    """A partial PUSH as a remote leaf (h4) sends it to the PS."""
    return frame(W4, PS, Op.PUSH, entries, sport=HOTAGG_PORT, seq=seq, iteration=iteration,
                 job_id=JOB, worker_id=worker, flags=FLAG_FROM_SWITCH, aux=3, **fields)  # fmt: skip


def collect_at(sut, iteration: int, offsets=range(MAX_ENTRIES), job: int = JOB) -> Hotagg:
    """COLLECT_REPLY to a COLLECT the PS addresses to the service address."""
    data = frame(PS, SERVICE, Op.COLLECT, [(0, o) for o in offsets], seq=1,
                 iteration=iteration, job_id=job)  # fmt: skip
    agg = only(sut.ports.exchange(PS, data), PS).agg
    assert agg.op == Op.COLLECT_REPLY
    return agg


def sums(agg: Hotagg) -> dict[int, int]:
    return {e.key: e.value for i, e in enumerate(agg.entries) if agg.mask >> i & 1}


def udp_checksum(data: bytes) -> int:
    return UDP(data[34:]).chksum


def delta(sut, before: dict) -> dict:
    after = sut.stats()
    return {s: after[s] - before[s] for s in Stat if after[s] != before[s]}


def test_flush_turns_the_touched_slots_of_its_batch_into_a_partial_push(sut):
    sut.hot(JOB, {10: 0, 11: 2, 12: 9, 13: 1})
    only(sut.ports.exchange(W1, push(W1, 1, [(10, 5), (11, -7)])), W1)
    only(sut.ports.exchange(W2, push(W2, 1, [(12, 4), (10, 1)])), W2)
    only(sut.ports.exchange(W2, push(W2, 2, [(13, 8)], iteration=2)), W2)  # other parity
    serve_at(sut, SERVICE)
    before = sut.stats()
    request = flush(0, ttl=9)
    got = only(sut.ports.exchange(PS, request), PS)
    assert delta(sut, before) == {Stat.FLUSH: 1}
    ip, udp, agg = got.pkt[IP], got.pkt[UDP], got.agg
    assert (ip.src, ip.dst, ip.ttl) == (host_ip(SERVICE), host_ip(PS), 8)
    assert (udp.sport, udp.dport, udp.chksum) == (HOTAGG_PORT, HOTAGG_PORT, 0)
    assert (agg.op, agg.flags, agg.count) == (Op.PUSH, FLAG_FROM_SWITCH, 2)
    assert (agg.job_id, agg.worker_id, agg.seq, agg.iteration) == (JOB, PSEUDO, 7, 1)
    assert (agg.mask, agg.cached, agg.aux) == (0, 0, 0)
    # offsets 0 and 2 were touched in iteration 1 (1 only in 2, 3..7 never), in offset order
    assert [(e.key, e.value) for e in agg.entries] == [(10, 6), (11, -7)]
    assert udp.len == 8 + 20 + 2 * 12 and ip.len == 20 + 8 + 20 + 2 * 12
    recomputed = IP(bytes(ip))
    del recomputed.chksum
    assert IP(bytes(recomputed)).chksum == ip.chksum
    # The slots are only read: asking again gives the same bytes, and the sums stay.
    assert only(sut.ports.exchange(PS, request), PS).data == got.data
    assert sums(collect_at(sut, 1, offsets=[0, 2, 9])) == {10: 6, 11: -7, 12: 4}
    second = only(sut.ports.exchange(PS, flush(1, flags=FLAG_RETRANSMIT)), PS).agg
    assert [(e.key, e.value) for e in second.entries] == [(12, 4)]  # offset 9
    assert second.aux == 1 and second.flags == FLAG_RETRANSMIT | FLAG_FROM_SWITCH
    other = only(sut.ports.exchange(PS, flush(0, iteration=2)), PS).agg
    assert [(e.key, e.value) for e in other.entries] == [(13, 8)]
    assert only(sut.ports.exchange(PS, flush(0, iteration=3)), PS).agg.count == 0


def test_a_fresh_push_of_a_flushed_iteration_adds_nothing_and_goes_on_to_the_ps(sut):
    """The PS may flush a leaf before its rack's last push of t is in (a worker's cold push
    can hold a key the leaf has a slot for). Such a push must not add to a sum that has left
    in a partial PUSH: the leaf remembers the iteration it was flushed for and sends every
    entry of a fresh push of it on toward the PS (design.md section 7)."""
    sut.hot(JOB, {10: 0, 11: 1})
    only(sut.ports.exchange(W1, push(W1, 1, [(10, 5)])), W1)  # summed here, acked
    serve_at(sut, SERVICE)
    first = only(sut.ports.exchange(PS, flush(0)), PS)
    assert [(e.key, e.value) for e in first.agg.entries] == [(10, 5)]
    before = sut.stats()
    late = push(W2, 1, [(10, 3), (11, 2)])
    got = only(sut.ports.exchange(W2, late), PS)
    assert delta(sut, before) == {Stat.PUSH: 1, Stat.SLOT_FLUSHED: 1, Stat.COLD_FORWARDED: 2}
    assert (got.agg.op, got.agg.mask, got.agg.count) == (Op.PUSH, 0, 2)
    assert [(e.key, e.value) for e in got.agg.entries] == [(10, 3), (11, 2)]
    # Its duplicate goes on the same way; a repeated FLUSH reads the same sums.
    before = sut.stats()
    assert only(sut.ports.exchange(W2, late), PS).data == got.data
    assert delta(sut, before) == {Stat.PUSH: 1, Stat.PUSH_DUP: 1, Stat.COLD_FORWARDED: 2}
    assert only(sut.ports.exchange(PS, flush(0, seq=8)), PS).agg.entries == first.agg.entries
    # Another iteration is summed here as before.
    ack = only(sut.ports.exchange(W1, push(W1, 2, [(10, 4)], iteration=2)), W1).agg
    assert (ack.op, ack.mask) == (Op.PUSH_ACK, 1)


def test_flush_past_the_jobs_slots_yields_an_empty_partial_push(sut):
    sut.hot(JOB, {10: 0})
    only(sut.ports.exchange(W1, push(W1, 1, [(10, 5)])), W1)
    serve_at(sut, SERVICE)
    slots = sut.slot_count(JOB)
    assert slots % MAX_ENTRIES == 0
    for batch in (slots // MAX_ENTRIES, 0xFFFF):
        got = only(sut.ports.exchange(PS, flush(batch)), PS)
        assert (got.agg.op, got.agg.count, got.agg.aux) == (Op.PUSH, 0, batch)
        assert got.pkt[UDP].len == 8 + 20 and got.pkt[IP].dst == host_ip(PS)
    # without a service address the first switch answers it too, whatever its address
    serve_at(sut, None)
    got = only(sut.ports.exchange(PS, flush(0, dst=W1)), PS)
    assert got.pkt[IP].src == host_ip(W1) and [e.key for e in got.agg.entries] == [10]


def test_flush_is_checked_as_a_ps_op_and_as_a_push(sut):
    sut.hot(JOB, {10: 0})
    only(sut.ports.exchange(W1, push(W1, 1, [(10, 5)])), W1)
    serve_at(sut, SERVICE)
    # another job's host, the same with the PS's address, a worker of the job
    dropped_as(sut, W4, flush(0, src=W4), Stat.FOREIGN_PS)
    dropped_as(sut, W4, flush(0), Stat.FOREIGN_PS)
    dropped_as(sut, W1, flush(0, src=W1), Stat.FOREIGN_PS)
    dropped_as(sut, PS, frame(PS, SERVICE, Op.FLUSH, [(10, 1)], seq=1, iteration=1, job_id=JOB),
           Stat.MALFORMED)  # fmt: skip
    dropped_as(sut, PS, flush(0, seq=0), Stat.MALFORMED)
    dropped_as(sut, PS, frame(PS, SERVICE, Op.FLUSH, seq=1, iteration=1, job_id=JOB,
                              worker_id=MAX_WORKERS), Stat.BAD_WORKER)  # fmt: skip
    assert sums(collect_at(sut, 1)) == {10: 5}


def test_a_service_address_routes_ps_ops_for_others_on_and_answers_its_own(sut):
    sut.hot(JOB, {10: 0})
    only(sut.ports.exchange(W1, push(W1, 1, [(10, 5)])), W1)
    serve_at(sut, SERVICE)
    ops = (
        (PS, frame(PS, W1, Op.COLLECT, [(10, 0)], seq=1, iteration=1, job_id=JOB, mask=1)),
        (PS, frame(PS, W1, Op.WRITEBACK, [(10, 99)], seq=2, iteration=2, job_id=JOB)),
        (PS, frame(PS, W1, Op.WRITEBACK, [(10, 99)], iteration=2, job_id=JOB, flags=FLAG_CHAIN)),
        (PS, flush(0, dst=W1)),
        # a host no switch admits as a PS: a switch that only routes does not check it
        (W4, frame(W4, W1, Op.COLLECT, [(10, 0)], seq=1, iteration=1, job_id=JOB)),
    )
    for ingress, data in ops:
        before = sut.stats()
        got = only(sut.ports.exchange(ingress, data), W1)
        assert delta(sut, before) == {Stat.TRANSIT: 1}
        assert bytes(got.agg) == bytes(Hotagg(data[42:]))  # unchanged, UDP checksum too
        assert got.pkt[UDP].chksum == udp_checksum(data)
        assert got.pkt[IP].src == host_ip(ingress) and got.pkt[IP].ttl == 63
    # nothing was refreshed or cached on the way
    assert pull(sut, [10], iteration=2).port == PS
    # Addressed to the service address: answered, from it.
    data = frame(PS, SERVICE, Op.COLLECT, [(10, 0)], seq=1, iteration=1, job_id=JOB)
    reply = only(sut.ports.exchange(PS, data), PS)
    assert reply.agg.op == Op.COLLECT_REPLY and reply.pkt[IP].src == host_ip(SERVICE)
    assert [(e.key, e.value) for e in reply.agg.entries] == [(10, 5)]
    data = frame(PS, SERVICE, Op.WRITEBACK, [(10, 99)], seq=2, iteration=2, job_id=JOB)
    ack = only(sut.ports.exchange(PS, data), PS).agg
    assert ack.op == Op.WRITEBACK_ACK and ack.mask == 1
    assert pull(sut, [10], iteration=2).agg.op == Op.PULL_REPLY
    # Still checked there: another job's host addressing the service address.
    dropped_as(sut, W4, frame(W4, SERVICE, Op.COLLECT, [(10, 0)], iteration=1, job_id=JOB),
           Stat.FOREIGN_PS)  # fmt: skip


def test_partial_push_is_absorbed_once_and_counted_for_the_ps(sut):
    sut.hot(JOB, {10: 0, 11: 1})
    serve_at(sut, SERVICE)
    sut.admit(JOB, PSEUDO, W4)  # the remote leaf's pseudo-worker, on its uplink
    only(sut.ports.exchange(W1, push(W1, 1, [(10, 5)])), W1)
    assert collect_at(sut, 1, [0]).aux == 0
    before = sut.stats()
    first = partial(1, [(10, 3), (11, 4)])
    assert sut.ports.exchange(W4, first) == []  # absorbed: no ack, nothing for the PS
    assert delta(sut, before) == {Stat.PUSH: 1, Stat.HOT_APPLIED: 2, Stat.FLUSH_ABSORBED: 1}
    reply = collect_at(sut, 1, [0, 1])
    assert reply.aux == 1 and sums(reply) == {10: 8, 11: 4}
    # A duplicate adds nothing and is not counted again.
    before = sut.stats()
    assert sut.ports.exchange(W4, first) == []
    assert delta(sut, before) == {Stat.PUSH: 1, Stat.PUSH_DUP: 1}
    assert collect_at(sut, 1, [0]).aux == 1
    # An empty one is applied whole too.
    assert sut.ports.exchange(W4, partial(2, [])) == []
    assert collect_at(sut, 1, [0]).aux == 2
    # Iterations: 2 has its own cell; 3 shares 1's parity and resets it lazily.
    assert sut.ports.exchange(W4, partial(3, [(10, 1)], iteration=2)) == []
    assert [collect_at(sut, t, [0]).aux for t in (1, 2, 3)] == [2, 1, 0]
    assert sut.ports.exchange(W4, partial(4, [(11, 1)], iteration=3)) == []
    assert [collect_at(sut, t, [0]).aux for t in (1, 2, 3)] == [0, 1, 1]
    # Another job's count is its own.
    assert collect_at(sut, 3, [0], job=2).aux == 0


def test_partial_push_with_a_refused_entry_goes_on_to_the_ps_uncounted(sut):
    sut.hot(JOB, {10: 0})
    serve_at(sut, SERVICE)
    sut.admit(JOB, PSEUDO, W4)
    before = sut.stats()
    data = partial(1, [(500, 9), (10, 3)])
    got = only(sut.ports.exchange(W4, data), PS)
    counted = delta(sut, before)
    assert counted == {Stat.PUSH: 1, Stat.HOT_APPLIED: 1, Stat.COLD_FORWARDED: 1}
    agg = got.agg
    assert (agg.op, agg.flags, agg.mask, agg.worker_id, agg.seq) == (
        Op.PUSH, FLAG_FROM_SWITCH, 0b10, PSEUDO, 1)  # fmt: skip
    assert [(e.key, e.value) for e in agg.entries] == [(500, 9)]
    assert got.pkt[IP].src == host_ip(W4) and got.pkt[UDP].sport == HOTAGG_PORT
    # the duplicate sends the PS the same bytes, and adds nothing here
    assert only(sut.ports.exchange(W4, data), PS).data == got.data
    reply = collect_at(sut, 1, [0])
    assert reply.aux == 0 and sums(reply) == {10: 3}


def test_partial_push_without_a_service_address_is_routed_on_unchanged(sut):
    sut.hot(JOB, {10: 0})
    sut.admit(JOB, PSEUDO, W4)
    for data in (partial(1, [(10, 3)], mask=0x5A), partial(2, [])):
        before = sut.stats()
        got = only(sut.ports.exchange(W4, data), PS)
        assert delta(sut, before) == {Stat.TRANSIT: 1}
        assert bytes(got.agg) == bytes(Hotagg(data[42:]))
        assert got.pkt[UDP].chksum == udp_checksum(data)
    assert collect(sut, 1) == {}
    # Tenancy still applies: a pseudo-worker nobody admitted.
    dropped_as(sut, W4, partial(1, [(10, 3)], worker=PSEUDO + 1), Stat.FOREIGN_WORKER)


def test_chained_writeback_goes_on_to_the_next_leaf_and_the_last_acks_it(sut):
    sut.hot(JOB, {10: 0, 11: 1})
    serve_at(sut, SERVICE)
    ChainNext(sut.client, sut.p4info).set(host_ip(W1))
    entries = [(10, 99), (11, -1), (12, 5)]
    data = frame(PS, SERVICE, Op.WRITEBACK, entries, seq=4, iteration=2, job_id=JOB,
                 flags=FLAG_CHAIN)  # fmt: skip
    before = sut.stats()
    got = only(sut.ports.exchange(PS, data), W1)
    assert delta(sut, before) == {Stat.WRITEBACK: 1, Stat.CACHE_WRITE: 2, Stat.CHAIN_FORWARD: 1}
    agg = got.agg
    assert (got.pkt[IP].src, got.pkt[IP].dst) == (host_ip(PS), host_ip(W1))
    assert (agg.op, agg.flags, agg.mask, agg.seq) == (Op.WRITEBACK, FLAG_CHAIN, 0b011, 4)
    assert [(e.key, e.value) for e in agg.entries] == entries
    assert got.pkt[UDP].chksum == 0 and got.pkt[UDP].dport == HOTAGG_PORT
    assert [(e.key, e.value) for e in pull(sut, [11, 10], iteration=2).agg.entries] == [
        (11, -1), (10, 99)]  # fmt: skip
    # The last leaf: an ack without the entries, to the PS.
    ChainNext(sut.client, sut.p4info).clear()
    ack = only(sut.ports.exchange(PS, data), PS)
    assert (ack.agg.op, ack.agg.count, ack.agg.mask) == (Op.WRITEBACK_ACK, 0, 0b011)
    assert ack.agg.flags == FLAG_CHAIN | FLAG_FROM_SWITCH
    assert ack.pkt[IP].src == host_ip(SERVICE) and ack.pkt[UDP].len == 8 + 20
    # Without CHAIN a WRITEBACK is acked with its entries, chain_next set or not.
    ChainNext(sut.client, sut.p4info).set(host_ip(W1))
    plain = frame(PS, SERVICE, Op.WRITEBACK, entries, seq=5, iteration=2, job_id=JOB)
    ack = only(sut.ports.exchange(PS, plain), PS).agg
    assert (ack.op, ack.count, ack.mask) == (Op.WRITEBACK_ACK, 3, 0b011)


def test_a_switchs_answer_to_the_ps_between_two_ports_18497_passes_as_a_reply(sut):
    """The PS sends from port 18497, so a switch's answer to it (a remote leaf's
    WRITEBACK_ACK at the end of the chain, a COLLECT_REPLY) goes from port 18497 to port
    18497. A switch it crosses takes it as a reply by its op: routed, not checked as a
    worker op (which would drop it as FOREIGN_WORKER)."""
    sut.hot(JOB, {10: 0})
    for op in (Op.WRITEBACK_ACK, Op.COLLECT_REPLY):
        data = frame(W4, PS, op, [], sport=HOTAGG_PORT, seq=3, iteration=1, job_id=JOB,
                     flags=FLAG_FROM_SWITCH)  # fmt: skip
        before = sut.stats()
        got = only(sut.ports.exchange(W4, data), PS)
        assert delta(sut, before) == {}
        assert bytes(got.agg) == bytes(Hotagg(data[42:]))
    # A reply a worker takes is still checked as one: from h4's port, not the PS's.
    data = frame(W4, W1, Op.PUSH_ACK, [], sport=HOTAGG_PORT, seq=1, iteration=1, job_id=JOB)
    dropped_as(sut, W4, data, Stat.FOREIGN_REPLY)
    # A request op between two ports 18497 is a request (a partial PUSH is one).
    data = frame(W4, PS, Op.PUSH, [(10, 1)], sport=HOTAGG_PORT, seq=1, iteration=1, job_id=JOB)
    dropped_as(sut, W4, data, Stat.FOREIGN_WORKER)


def test_a_switch_that_only_routes_passes_ps_ops_and_partial_pushes_alike(sut):
    """A spine (SERVICE_TRANSIT): a FLUSH for a leaf behind it and a COLLECT for the root
    pass without a check, as do partial PUSHes, empty ones too, which it must not count as
    absorbed (the root would then never count them)."""
    sut.hot(JOB, {10: 0})
    ServiceAddress(sut.client, sut.p4info).set_transit()
    sut.admit(JOB, PSEUDO, W4)
    for ingress, data, out in (
        (PS, flush(0, dst=W1), W1),
        (PS, frame(PS, W1, Op.COLLECT, [(10, 0)], seq=1, iteration=1, job_id=JOB), W1),
        (W4, partial(1, [(10, 3)]), PS),
        (W4, partial(2, []), PS),
    ):
        before = sut.stats()
        got = only(sut.ports.exchange(ingress, data), out)
        assert delta(sut, before) == {Stat.TRANSIT: 1}
        assert bytes(got.agg) == bytes(Hotagg(data[42:]))
    # a worker's own PUSH is processed as anywhere: the switch acks it
    only(sut.ports.exchange(W1, push(W1, 1, [(10, 5)])), W1)
    serve_at(sut, None)  # answer the COLLECT below: nothing but the worker's push was summed
    assert collect(sut, 1) == {10: 5}
