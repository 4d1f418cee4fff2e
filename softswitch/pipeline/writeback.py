"""WRITEBACK: the PS fills the parameter cache for the hot keys, tagged with an iteration; a
chained one (docs/design.md section 7) goes on to the next leaf, and the last one acks it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from contract.constants import ENTRY_LEN, FLAG_CHAIN, Op, Stat
from softswitch.pipeline.hot_key_lookup import lookup_slots
from softswitch.pipeline.leaves import chain_next
from softswitch.pipeline.parser import (
    ENTRIES,
    ENTRY_LISTS,
    HA_COUNT,
    IP_DST,
    U32,
    make_reply,
    processed,
    shrink_lengths,
)

if TYPE_CHECKING:
    from softswitch.pipeline import Pipeline

WRITEBACK = Stat.WRITEBACK.value
CACHE_WRITE = Stat.CACHE_WRITE.value
WRITEBACK_ACK = Op.WRITEBACK_ACK.value
CHAIN_FORWARD = Stat.CHAIN_FORWARD.value


def writeback(
    p: Pipeline,
    frame: bytes,
    nbytes: int,
    count: int,
    job_id: int,
    job: tuple,
    it: int,
    flags: int = 0,
) -> bytearray:
    """Cache every entry whose key is hot here; the ack's mask says which. With FLAG_CHAIN
    the WRITEBACK goes on to chain_next's address (its mask saying what this switch cached),
    or, at the last leaf, the ack carries no entries."""
    sp, sb = p.stats_packets, p.stats_bytes
    sp[WRITEBACK] += 1
    sb[WRITEBACK] += nbytes
    vals = ENTRY_LISTS[count].unpack_from(frame, ENTRIES)
    slots = lookup_slots(p, vals, count, job_id, job[1], job[2], nbytes)
    c_iter, c_key, c_val = p.cache_iter, p.cache_key, p.cache_value
    mask = written = 0
    for i in range(count):
        slot = slots[i]
        if slot >= 0:
            c_key[slot] = vals[2 * i]
            c_val[slot] = vals[2 * i + 1]
            c_iter[slot] = it
            mask |= 1 << i
            written += 1
    if written:
        sp[CACHE_WRITE] += written
        sb[CACHE_WRITE] += written * nbytes
    if flags & FLAG_CHAIN:
        nxt = chain_next(p)
        if nxt:
            out = bytearray(frame)
            processed(out, mask)
            U32.pack_into(out, IP_DST, nxt)
            sp[CHAIN_FORWARD] += 1
            sb[CHAIN_FORWARD] += nbytes
            return out
        out = bytearray(frame[:ENTRIES]) + frame[ENTRIES + ENTRY_LEN * count :]
        out[HA_COUNT] = 0
        shrink_lengths(out, ENTRY_LEN * count)
    else:
        out = bytearray(frame)
    processed(out, mask)
    make_reply(out, WRITEBACK_ACK)
    return out
