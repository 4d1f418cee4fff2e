"""PUSH: deduplication by (job, worker, seq) and aggregation into iteration-tagged slots."""

from __future__ import annotations

from typing import TYPE_CHECKING

from contract.constants import (
    DEDUP_WINDOW,
    ENTRY_LEN,
    INT32_MAX,
    INT32_MIN,
    MAX_WORKERS,
    NUM_SLOTS,
    Op,
    Stat,
)
from softswitch.pipeline.hot_key_lookup import lookup_slots
from softswitch.pipeline.parser import (
    ENTRIES,
    ENTRY_LISTS,
    HA_COUNT,
    make_reply,
    processed,
    remove_entries,
    shrink_lengths,
)

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
PUSH_SWITCH_ACK = Stat.PUSH_SWITCH_ACK.value
PUSH_ACK = Op.PUSH_ACK.value
WINDOW_MASK = DEDUP_WINDOW - 1
MASK_BITS = tuple(bin(m).count("1") for m in range(256))
WORKER_MASK = MAX_WORKERS - 1


def aggregate(
    p: Pipeline, frame: bytes, nbytes: int, count: int, job_id: int, job: tuple, it: int
) -> int:
    """Add the hot entries into this iteration's slot copy; returns the applied mask."""
    vals = ENTRY_LISTS[count].unpack_from(frame, ENTRIES)
    slots = lookup_slots(p, vals, count, job_id, job[1], job[2], nbytes)
    a_iter, a_key, a_val = p.agg_iter, p.agg_key, p.agg_value
    base = (it & 1) * NUM_SLOTS
    mask = overflow = conflict = 0
    bit = 1
    for slot, key, value in zip(slots, vals[::2], vals[1::2]):
        if slot >= 0:
            a = base + slot
            if a_iter[a] != it:  # lazy reset: the first contribution of an iteration claims it
                a_iter[a] = it
                a_key[a] = key
                a_val[a] = value
                mask |= bit
            elif a_key[a] == key:
                s = a_val[a] + value
                if INT32_MIN <= s <= INT32_MAX:
                    a_val[a] = s
                    mask |= bit
                else:
                    overflow += 1
            else:
                conflict += 1
        bit <<= 1
    applied = MASK_BITS[mask]
    sp, sb = p.stats_packets, p.stats_bytes
    if applied:
        sp[HOT_APPLIED] += applied
        sb[HOT_APPLIED] += applied * nbytes
    if overflow:
        sp[OVERFLOW] += overflow
        sb[OVERFLOW] += overflow * nbytes
    if conflict:
        sp[SLOT_CONFLICT] += conflict
        sb[SLOT_CONFLICT] += conflict * nbytes
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
) -> bytearray | None:
    """The PUSH block of docs/design.md; returns the frame to route, or None (dropped)."""
    sp, sb = p.stats_packets, p.stats_bytes
    if seq == 0:
        sp[MALFORMED] += 1
        sb[MALFORMED] += nbytes
        return None
    if worker >= MAX_WORKERS:
        sp[BAD_WORKER] += 1
        sb[BAD_WORKER] += nbytes
        return None
    sp[PUSH] += 1
    sb[PUSH] += nbytes
    d = ((job[0] & 15) << 12) | ((worker & WORKER_MASK) << 6) | (seq & WINDOW_MASK)
    last = p.dedup_seq[d]
    if last == seq:
        sp[PUSH_DUP] += 1
        sb[PUSH_DUP] += nbytes
        mask = p.dedup_mask[d]
    elif last > seq:
        sp[PUSH_STALE] += 1
        sb[PUSH_STALE] += nbytes
        return None
    else:
        mask = aggregate(p, frame, nbytes, count, job_id, job, it)
        p.dedup_seq[d] = seq
        p.dedup_mask[d] = mask
    if mask == (1 << count) - 1:
        # everything was applied here: the switch acks, nothing goes to the PS
        out = bytearray(frame[:ENTRIES])
        out += frame[ENTRIES + ENTRY_LEN * count :]
        out[HA_COUNT] = 0
        shrink_lengths(out, ENTRY_LEN * count)
        processed(out, mask)
        make_reply(out, PUSH_ACK)
        sp[PUSH_SWITCH_ACK] += 1
        sb[PUSH_SWITCH_ACK] += nbytes
        return out
    out, kept = remove_entries(frame, count, mask)
    processed(out, mask)
    sp[COLD_FORWARDED] += kept
    sb[COLD_FORWARDED] += kept * nbytes
    return out
