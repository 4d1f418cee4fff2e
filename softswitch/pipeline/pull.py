"""PULL: answer from the parameter cache when every entry is cached for the iteration asked."""

from __future__ import annotations

from typing import TYPE_CHECKING

from contract.constants import ENTRY_LEN, Op, Stat
from softswitch.pipeline.hot_key_lookup import lookup_slots
from softswitch.pipeline.parser import ENTRIES, ENTRY_LISTS, VALUE, make_reply, processed

if TYPE_CHECKING:
    from softswitch.pipeline import Pipeline

PULL = Stat.PULL.value
PULL_HIT = Stat.PULL_HIT.value
PULL_MISS = Stat.PULL_MISS.value
PULL_REPLY = Op.PULL_REPLY.value


def pull(
    p: Pipeline, frame: bytes, nbytes: int, count: int, job_id: int, job: tuple, it: int
) -> bytearray:
    """The PULL block of docs/design.md: a reply if all entries hit, else on to the PS."""
    sp, sb = p.stats_packets, p.stats_bytes
    sp[PULL] += 1
    sb[PULL] += nbytes
    vals = ENTRY_LISTS[count].unpack_from(frame, ENTRIES)
    slots = lookup_slots(p, vals, count, job_id, job[1], job[2], nbytes)
    c_iter, c_key, c_val = p.cache_iter, p.cache_key, p.cache_value
    out = bytearray(frame)
    mask = 0
    for i in range(count):
        slot = slots[i]
        if slot >= 0 and c_iter[slot] == it and c_key[slot] == vals[2 * i]:
            VALUE.pack_into(out, ENTRIES + ENTRY_LEN * i + 8, c_val[slot])
            mask |= 1 << i
    processed(out, mask)
    if count and mask == (1 << count) - 1:
        make_reply(out, PULL_REPLY)
        sp[PULL_HIT] += 1
        sb[PULL_HIT] += nbytes
    else:
        sp[PULL_MISS] += 1
        sb[PULL_MISS] += nbytes
    return out
