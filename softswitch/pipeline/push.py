"""PUSH: deduplication by (job, worker, seq) and aggregation into iteration-tagged slots; a
partial PUSH (FROM_SWITCH, docs/design.md section 7) applied whole is absorbed, not acked."""

from __future__ import annotations

from typing import TYPE_CHECKING

from contract.constants import (
    DEDUP_JOB_SHIFT,
    DEDUP_SEQ_MASK,
    DEDUP_WORKER_MASK,
    DEDUP_WORKER_SHIFT,
    ENTRY_LEN,
    FLAG_FROM_SWITCH,
    INT32_MAX,
    INT32_MIN,
    MAX_ENTRIES,
    MAX_WORKERS,
    NUM_SLOTS,
    Op,
    Stat,
)
from softswitch.pipeline.forwarding import (
    ANSWER,
    FORWARD,
    HEAD,
    Output,
    head_out,
    route,
)
from softswitch.pipeline.hot_key_lookup import BAD_SLOT, SET_SLOT
from softswitch.pipeline.leaves import JOB_MASK, absorb
from softswitch.pipeline.parser import (
    ENTRIES,
    ENTRY_LISTS,
    HA_COUNT,
    HA_FLAGS,
    HA_MASK,
    HA_OP,
    answer_headers,
    processed,
    remove_entries,
)
from softswitch.pipeline.sketch import count_cold

if TYPE_CHECKING:
    from softswitch.pipeline import Pipeline

MALFORMED = Stat.MALFORMED.value
BAD_WORKER = Stat.BAD_WORKER.value
PUSH = Stat.PUSH.value
PUSH_DUP = Stat.PUSH_DUP.value
PUSH_STALE = Stat.PUSH_STALE.value
HOT_APPLIED = Stat.HOT_APPLIED.value
COLD_FORWARDED = Stat.COLD_FORWARDED.value
OVERFLOW = Stat.OVERFLOW.value
SLOT_CONFLICT = Stat.SLOT_CONFLICT.value
SLOT_BUSY = Stat.SLOT_BUSY.value
SLOT_FLUSHED = Stat.SLOT_FLUSHED.value
PUSH_SWITCH_ACK = Stat.PUSH_SWITCH_ACK.value
FLUSH_ABSORBED = Stat.FLUSH_ABSORBED.value
PUSH_ACK = Op.PUSH_ACK.value
MASK_BITS = tuple(bin(m).count("1") for m in range(256))
FULL = tuple((1 << c) - 1 for c in range(MAX_ENTRIES + 1))
BITS = tuple(1 << i for i in range(MAX_ENTRIES))


def aggregate(
    p: Pipeline,
    frame: bytes,
    nbytes: int,
    count: int,
    job_id: int,
    job: tuple,
    it: int,
    misses: list[int],
) -> int:
    """Add the hot entries into this iteration's slot copy; returns the applied mask and
    appends the keys that missed the hot-key tables to `misses`, in entry order.

    Entry i is looked up in instance i as hot_key_lookup.lookup_slots does, inlined here so
    the eight entries cost one pass: a hit counts on the instance's direct counter, an
    offset outside the job's range (or past NUM_SLOTS) counts BAD_SLOT and is a miss, and a
    default action set to set_slot gives a missing key that offset. A copy of another
    iteration is claimed only by a push of `it` <= the job's collected_iter + 2 (mod 2^32, as
    bit<32>); further ahead it is busy: SLOT_BUSY, not applied (docs/design.md section 8).
    """
    vals = ENTRY_LISTS[count].unpack_from(frame, ENTRIES)
    job_index, slot_base, slot_count = job
    ahead = it > (p.collected_iter[job_index & JOB_MASK] + 2) & 0xFFFFFFFF
    limit = min(slot_count, NUM_SLOTS - slot_base)  # both range checks in one compare
    a_iter, a_key, a_val = p.agg_iter, p.agg_key, p.agg_value
    base = (it & 1) * NUM_SLOTS + slot_base
    mask = overflow = conflict = bad = busy = 0
    for t, set_slot, key, value, bit in zip(p.t_hot, SET_SLOT, vals[::2], vals[1::2], BITS):
        rec = t._entries.get((job_id, key))
        if rec is None:
            rec = t._default_rec
            if rec[0] != set_slot:
                misses.append(key)
                continue
        else:
            ctr = rec[2]
            ctr[0] += 1
            ctr[1] += nbytes
        a = rec[1][0]
        if a >= limit:
            bad += 1
            continue
        a += base
        if a_iter[a] != it and ahead:
            busy += 1  # the copy may hold an iteration the PS has not read: not overwritten
        elif a_iter[a] != it:  # lazy reset: the first contribution of an iteration claims it
            a_iter[a] = it
            a_key[a] = key
            a_val[a] = value
            mask |= bit
        elif a_key[a] == key:
            value += a_val[a]
            if INT32_MIN <= value <= INT32_MAX:
                a_val[a] = value
                mask |= bit
            else:
                overflow += 1
        else:
            conflict += 1
    if bad:
        p.stats_packets[BAD_SLOT] += bad
        p.stats_bytes[BAD_SLOT] += bad * nbytes
    if mask:
        applied = MASK_BITS[mask]
        p.stats_packets[HOT_APPLIED] += applied
        p.stats_bytes[HOT_APPLIED] += applied * nbytes
    if overflow:
        p.stats_packets[OVERFLOW] += overflow
        p.stats_bytes[OVERFLOW] += overflow * nbytes
    if conflict:
        p.stats_packets[SLOT_CONFLICT] += conflict
        p.stats_bytes[SLOT_CONFLICT] += conflict * nbytes
    if busy:
        p.stats_packets[SLOT_BUSY] += busy
        p.stats_bytes[SLOT_BUSY] += busy * nbytes
    return mask


def push(
    p: Pipeline,
    frame: bytes,
    nbytes: int,
    count: int,
    job_id: int,
    job: tuple,
    worker: int,
    seq: int,
    it: int,
    ingress_port: int,
    partial: int = 0,
) -> Output:
    """The PUSH block of docs/design.md, then routing; returns the frames to emit.
    `partial`: the FROM_SWITCH flag, at a switch with a service address (one that absorbs
    partial PUSHes)."""

    sp, sb = p.stats_packets, p.stats_bytes
    if seq == 0:
        sp[MALFORMED] += 1
        sb[MALFORMED] += nbytes
        return []
    if worker >= MAX_WORKERS:
        sp[BAD_WORKER] += 1
        sb[BAD_WORKER] += nbytes
        return []
    sp[PUSH] += 1
    sb[PUSH] += nbytes
    d = (
        ((job[0] & JOB_MASK) << DEDUP_JOB_SHIFT)
        | ((worker & DEDUP_WORKER_MASK) << DEDUP_WORKER_SHIFT)
        | (seq & DEDUP_SEQ_MASK)
    )
    last = p.dedup_seq[d]
    fresh = False
    if last == seq:
        sp[PUSH_DUP] += 1
        sb[PUSH_DUP] += nbytes
        mask = p.dedup_mask[d]
    elif last > seq:
        sp[PUSH_STALE] += 1
        sb[PUSH_STALE] += nbytes
        return []
    else:
        if it == p.flushed_iter[job[0] & JOB_MASK]:
            # this switch's sums of `it` were flushed (leaves.py): nothing is added to them
            # now, every entry goes on toward the PS (no lookup, no sketch; design.md §7)
            sp[SLOT_FLUSHED] += 1
            sb[SLOT_FLUSHED] += nbytes
            mask = 0
        else:
            misses: list[int] = []
            mask = aggregate(p, frame, nbytes, count, job_id, job, it, misses)
            epoch, threshold = p.t_sketch._default_rec[1]
            if threshold and misses:  # the cold-key sketch is on (sketch.py)
                digest = count_cold(p, job_id, misses, nbytes, epoch, threshold)
                if digest is not None:
                    if p.digest_sink is None:
                        p.digests.append(digest)
                    else:
                        p.digest_sink(digest)
        p.dedup_seq[d] = seq
        p.dedup_mask[d] = mask
        fresh = True
    if mask == FULL[count] and partial:
        # a partial PUSH absorbed whole: never acked; a fresh one counts for the PS's COLLECT
        if fresh:
            absorb(p, job[0], it)
            sp[FLUSH_ABSORBED] += 1
            sb[FLUSH_ABSORBED] += nbytes
        return []
    if mask == FULL[count]:
        # everything was applied here: the switch acks, nothing goes to the PS
        sp[PUSH_SWITCH_ACK] += 1
        sb[PUSH_SWITCH_ACK] += nbytes
        shrink = ENTRY_LEN * count
        end = ENTRIES + shrink
        head = head_out(p, frame, ANSWER, shrink)
        if head is None:
            out = bytearray(frame[:ENTRIES])
            answer_headers(out, frame, shrink)
        else:
            out = head[1]
            out += frame[HEAD:ENTRIES]
        if nbytes != end:
            out += frame[end:]
        out[HA_OP] = PUSH_ACK
        out[HA_FLAGS] |= FLAG_FROM_SWITCH
        out[HA_COUNT] = 0
        out[HA_MASK] = mask
        if head is None:
            return route(p, out, ingress_port, True, nbytes)
        return [(head[0], bytes(out))]
    if mask == 0:  # every entry goes on to the PS: the frame as it came, mask 0, UDP checksum 0
        sp[COLD_FORWARDED] += count
        sb[COLD_FORWARDED] += count * nbytes
        head = head_out(p, frame, FORWARD)
        if head is None:
            out = bytearray(frame)
            processed(out, 0)
            return route(p, out, ingress_port, True, nbytes)
        port, out = head
        out += frame[HEAD:]
        out[HA_MASK] = 0
        return [(port, bytes(out))]
    out, kept = remove_entries(frame, count, mask)
    processed(out, mask)
    sp[COLD_FORWARDED] += kept
    sb[COLD_FORWARDED] += kept * nbytes
    head = head_out(p, frame, FORWARD, ENTRY_LEN * (count - kept))
    if head is None:
        return route(p, out, ingress_port, True, nbytes)
    out[:HEAD] = head[1]  # the same lengths and UDP checksum, routed
    return [(head[0], bytes(out))]
