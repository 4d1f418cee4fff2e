"""Aggregation at every leaf (p4src/include/leaves.p4, docs/design.md section 7): the service
address, FLUSH turned into a partial PUSH, the root's count of absorbed partial PUSHes, and
the next leaf of a chained WRITEBACK."""

from __future__ import annotations

from typing import TYPE_CHECKING

from contract.constants import (
    DEDUP_JOB_MASK,
    ENTRY_LEN,
    FLAG_FROM_SWITCH,
    FLUSH_BATCH_BITS,
    HOTAGG_PORT,
    MAX_ENTRIES,
    NUM_SLOTS,
    Op,
    Stat,
)
from softswitch.pipeline.parser import (
    ENTRIES,
    ENTRY,
    HA_AUX,
    HA_CACHED,
    HA_COUNT,
    HA_FLAGS,
    HA_MASK,
    HA_OP,
    IP_DST,
    IP_SRC,
    U16,
    UDP,
    UDP_CSUM,
    shrink_lengths,
)

if TYPE_CHECKING:
    from softswitch.pipeline import Pipeline

FLUSH = Stat.FLUSH.value
PUSH = Op.PUSH.value
JOB_MASK = DEDUP_JOB_MASK  # the job index bits that index per-job state
PORT_BYTES = U16.pack(HOTAGG_PORT)


def service_address(p: Pipeline) -> int:
    """The service_address table's address (0: none set)."""
    return p.t_service._default_rec[1][0]


def chain_next(p: Pipeline) -> int:
    """The chain_next table's address (0: this switch is the chain's last leaf)."""
    return p.t_chain._default_rec[1][0]


def flush_cell(job_index: int, it: int) -> int:
    return ((job_index & JOB_MASK) << 1) | (it & 1)


def flush_count(p: Pipeline, job_index: int, it: int) -> int:
    """The partial PUSHes of (job, iteration `it`) absorbed whole here; 0 if the cell is
    tagged with another iteration (a lazy reset)."""
    cell = flush_cell(job_index, it)
    return p.flush_count[cell] if p.flush_iter[cell] == it else 0


def absorb(p: Pipeline, job_index: int, it: int) -> None:
    """One more partial PUSH of (job, `it`) absorbed whole."""
    cell = flush_cell(job_index, it)
    p.flush_count[cell] = (flush_count(p, job_index, it) + 1) & 0xFFFFFFFF
    p.flush_iter[cell] = it


def record_collected(p: Pipeline, job_index: int, it: int) -> None:
    """A COLLECT or FLUSH of iteration `it`: the PS has read every copy of iterations < it
    (docs/design.md section 8); iteration 0 records nothing."""
    if it:
        p.collected_iter[job_index & JOB_MASK] = it - 1


def flush(p: Pipeline, frame: bytes, nbytes: int, job: tuple, it: int) -> bytearray:
    """The FLUSH of docs/design.md section 7 at its addressee: the slot copies of iteration
    `it` among offsets 8 * aux .. 8 * aux + 7 of the job become the entries, in offset
    order, of a partial PUSH from this switch (the FLUSH's destination) to the PS (its
    source), UDP port HOTAGG_PORT to HOTAGG_PORT. Bytes after the header (padding) stay
    after the entries, as a P4 payload would. The job's flushed_iter becomes `it`."""
    p.stats_packets[FLUSH] += 1
    p.stats_bytes[FLUSH] += nbytes
    record_collected(p, job[0], it)
    if it:  # as collected_iter: a fresh push of `it` adds nothing here now (push.py)
        p.flushed_iter[job[0] & JOB_MASK] = it
    _, slot_base, slot_count = job
    first = U16.unpack_from(frame, HA_AUX)[0] << FLUSH_BATCH_BITS
    base = (it & 1) * NUM_SLOTS + slot_base
    a_iter, a_key, a_val = p.agg_iter, p.agg_key, p.agg_value
    out = bytearray(frame[:ENTRIES])
    count = 0
    for off in range(first, first + MAX_ENTRIES):
        if off >= slot_count or slot_base + off >= NUM_SLOTS:
            continue
        a = base + off
        if a_iter[a] == it:
            out += ENTRY.pack(a_key[a], a_val[a])
            count += 1
    out += frame[ENTRIES:]
    shrink_lengths(out, -ENTRY_LEN * count)  # grown by the entries
    out[HA_OP] = PUSH
    out[HA_FLAGS] |= FLAG_FROM_SWITCH
    out[HA_COUNT] = count
    out[HA_MASK] = 0
    out[HA_CACHED] = 0
    out[IP_SRC : IP_DST + 4] = out[IP_DST : IP_DST + 4] + out[IP_SRC:IP_DST]
    out[UDP : UDP + 2] = PORT_BYTES
    out[UDP_CSUM] = out[UDP_CSUM + 1] = 0
    return out
