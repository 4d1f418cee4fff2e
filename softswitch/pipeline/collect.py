"""COLLECT: the PS reads aggregated slots of one iteration and, where it asks, moves the
slot's cached parameter on to the next iteration in the same pass (docs/design.md, COLLECT).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from contract.constants import ENTRY_LEN, FLAG_INVALIDATE, NUM_SLOTS, Op, Stat
from softswitch.pipeline.leaves import flush_count, record_collected
from softswitch.pipeline.parser import (
    ENTRIES,
    ENTRY,
    ENTRY_LISTS,
    HA_AUX,
    HA_CACHED,
    HA_FLAGS,
    HA_MASK,
    U16,
    make_reply,
    processed,
)

if TYPE_CHECKING:
    from softswitch.pipeline import Pipeline

COLLECT = Stat.COLLECT.value
CACHE_WRITE = Stat.CACHE_WRITE.value
COLLECT_REPLY = Op.COLLECT_REPLY.value
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
U32_MASK = 0xFFFFFFFF


def collect(p: Pipeline, frame: bytes, nbytes: int, count: int, job: tuple, it: int) -> bytearray:
    """Entry i is (expected cached key, slot offset as u32); each valid offset whose copy was
    written in iteration `it` becomes (slot key, aggregated value), mask bit i.

    Request mask bit i asks to refresh the slot's cache: if it holds the expected key tagged
    `it`, its value minus the slot's sum for that key (0 when the copy is untouched or holds
    another key) is cached, tagged it + 1, unless that overflows int32. Reply `cached` bit i:
    the cache holds the expected key tagged it + 1 after this pass (so a repeated COLLECT
    reports the same). With FLAG_INVALIDATE, a set bit instead untags a cache entry that holds
    the expected key. An offset outside the job's range is left as it is and counts no
    BAD_SLOT: that stat is for hot-key table offsets only. The reply's aux is the job's
    count of partial PUSHes absorbed whole in iteration `it` (mod 2^16, section 7). The job's
    collected_iter becomes it - 1: the PS has read every older copy (section 8).
    """
    sp, sb = p.stats_packets, p.stats_bytes
    sp[COLLECT] += 1
    sb[COLLECT] += nbytes
    record_collected(p, job[0], it)
    _, slot_base, slot_count = job
    vals = ENTRY_LISTS[count].unpack_from(frame, ENTRIES)
    ask = frame[HA_MASK]
    invalidate = frame[HA_FLAGS] & FLAG_INVALIDATE
    a_iter, a_key, a_val = p.agg_iter, p.agg_key, p.agg_value
    c_iter, c_key, c_val = p.cache_iter, p.cache_key, p.cache_value
    base = (it & 1) * NUM_SLOTS + slot_base
    nxt = (it + 1) & U32_MASK
    out = bytearray(frame)
    mask = cached = written = 0
    for i in range(count):
        off = vals[2 * i + 1] & U32_MASK
        if off >= slot_count or slot_base + off >= NUM_SLOTS:
            continue
        a = base + off
        touched = a_iter[a] == it
        if ask >> i & 1:
            slot, key = slot_base + off, vals[2 * i]
            if c_key[slot] == key:
                if invalidate:
                    c_iter[slot] = 0
                else:
                    if c_iter[slot] == it:
                        new = c_val[slot] - (a_val[a] if touched and a_key[a] == key else 0)
                        if INT32_MIN <= new <= INT32_MAX:
                            c_val[slot] = new
                            c_iter[slot] = nxt
                            written += 1
                    if c_iter[slot] == nxt:
                        cached |= 1 << i
        if touched:
            ENTRY.pack_into(out, ENTRIES + ENTRY_LEN * i, a_key[a], a_val[a])
            mask |= 1 << i
    if written:
        sp[CACHE_WRITE] += written
        sb[CACHE_WRITE] += written * nbytes
    processed(out, mask)
    out[HA_CACHED] = cached
    U16.pack_into(out, HA_AUX, flush_count(p, job[0], it) & 0xFFFF)
    make_reply(out, COLLECT_REPLY)
    return out
