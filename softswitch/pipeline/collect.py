"""COLLECT: the PS reads aggregated slots of one iteration (read-only, so it can ask again)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hosts.protocol import ENTRY_LEN, NUM_SLOTS, Op, Stat
from softswitch.pipeline.parser import ENTRIES, ENTRY, ENTRY_LISTS, make_reply, processed

if TYPE_CHECKING:
    from softswitch.pipeline import Pipeline

COLLECT = Stat.COLLECT.value
COLLECT_REPLY = Op.COLLECT_REPLY.value


def collect(p: Pipeline, frame: bytes, nbytes: int, count: int, job: tuple, it: int) -> bytearray:
    """Entry keys are slot offsets; each valid one becomes (slot key, aggregated value).

    An offset outside the job's range is left as it is (mask bit 0) and counts no BAD_SLOT:
    that stat is for hot-key table offsets only.
    """
    p.stats_packets[COLLECT] += 1
    p.stats_bytes[COLLECT] += nbytes
    _, slot_base, slot_count = job
    vals = ENTRY_LISTS[count].unpack_from(frame, ENTRIES)
    a_iter, a_key, a_val = p.agg_iter, p.agg_key, p.agg_value
    base = (it & 1) * NUM_SLOTS + slot_base
    out = bytearray(frame)
    mask = 0
    for i in range(count):
        off = vals[2 * i]
        if off < slot_count and slot_base + off < NUM_SLOTS:
            a = base + off
            if a_iter[a] == it:
                ENTRY.pack_into(out, ENTRIES + ENTRY_LEN * i, a_key[a], a_val[a])
                mask |= 1 << i
    processed(out, mask)
    make_reply(out, COLLECT_REPLY)
    return out
