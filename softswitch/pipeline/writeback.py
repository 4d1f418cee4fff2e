"""WRITEBACK: the PS fills the parameter cache for the hot keys, tagged with an iteration."""

from __future__ import annotations

from typing import TYPE_CHECKING

from contract.constants import Op, Stat
from softswitch.pipeline.hot_key_lookup import lookup_slots
from softswitch.pipeline.parser import ENTRIES, ENTRY_LISTS, make_reply, processed

if TYPE_CHECKING:
    from softswitch.pipeline import Pipeline

WRITEBACK = Stat.WRITEBACK.value
CACHE_WRITE = Stat.CACHE_WRITE.value
WRITEBACK_ACK = Op.WRITEBACK_ACK.value


def writeback(
    p: Pipeline, frame: bytes, nbytes: int, count: int, job_id: int, job: tuple, it: int
) -> bytearray:
    """Cache every entry whose key is hot here; the ack's mask says which."""
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
    out = bytearray(frame)
    processed(out, mask)
    make_reply(out, WRITEBACK_ACK)
    return out
