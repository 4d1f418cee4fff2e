"""The HotKeyLookup control, one instance per entry position (`lookupN.hot_keys`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from contract.constants import NUM_SLOTS, Stat
from contract.names import SET_SLOT_ACTIONS as SET_SLOT

if TYPE_CHECKING:
    from softswitch.pipeline import Pipeline

BAD_SLOT = Stat.BAD_SLOT.value
MISS = -1


def lookup_slots(
    p: Pipeline,
    vals: tuple[int, ...],
    count: int,
    job_id: int,
    slot_base: int,
    slot_count: int,
    nbytes: int,
) -> list[int]:
    """Absolute slot of each entry (keys at vals[0], vals[2], ...), MISS for a miss.

    An entry hit counts on that instance's direct counter; an offset outside the job's range
    or past NUM_SLOTS counts BAD_SLOT and is a miss. As in P4, the action that runs decides:
    a default action set to set_slot gives every missing key that offset.
    """
    slots: list[int] = []
    append = slots.append
    limit = min(slot_count, NUM_SLOTS - slot_base)  # both range checks in one compare
    bad = 0
    for t, key, set_slot in zip(p.t_hot, vals[::2], SET_SLOT):
        rec = t._entries.get((job_id, key))
        if rec is None:
            rec = t._default_rec
            if rec[0] != set_slot:
                append(MISS)
                continue
        else:
            ctr = rec[2]
            ctr[0] += 1
            ctr[1] += nbytes
        off = rec[1][0]
        if off < limit:
            append(slot_base + off)
        else:
            bad += 1
            append(MISS)
    if bad:
        p.stats_packets[BAD_SLOT] += bad
        p.stats_bytes[BAD_SLOT] += bad * nbytes
    return slots
