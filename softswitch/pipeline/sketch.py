"""The cold-key sketch of p4src/include/sketch.p4: count-min over (job_id, key) of the
entries of a fresh PUSH that missed the hot-key tables, and at most one digest per packet.
The cell indexes are contract/sketch.py's (crc32, as BMv2 computes them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from contract.sketch import indexes

if TYPE_CHECKING:
    from softswitch.pipeline import Pipeline

COUNT = 0x7FFFFFFF  # a cell's count bits (30..0); it wraps in 31 bits as in P4
REPORTED = 1 << 31
# (job_id, key, epoch, estimate): the fields of sketch_digest_t, in order
Digest = tuple[int, int, int, int]


def count_cold(
    p: Pipeline, job_id: int, keys: list[int], nbytes: int, epoch: int, threshold: int
) -> Digest | None:
    """Count each missed key, in entry order; returns the packet's digest, if any."""
    c0, c1 = p.sketch_cells
    (p0, b0), (p1, b1) = p.sketch_rows
    stale = epoch << 32  # a cell of another epoch reads as this: count 0, not reported
    report = None
    for key in keys:
        i0, i1 = indexes(job_id, key)
        p0[i0] += 1
        b0[i0] += nbytes
        p1[i1] += 1
        b1[i1] += nbytes
        a, b = c0[i0], c1[i1]
        if a >> 32 != epoch:
            a = stale
        if b >> 32 != epoch:
            b = stale
        a = (a & ~COUNT) | ((a + 1) & COUNT)
        b = (b & ~COUNT) | ((b + 1) & COUNT)
        estimate = min(a & COUNT, b & COUNT)
        if report is None and estimate >= threshold and not (a & b & REPORTED):
            report = (job_id, key, epoch, estimate)
            a |= REPORTED
            b |= REPORTED
        c0[i0], c1[i1] = a, b
    return report
