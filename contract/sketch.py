"""Where (job_id, key) lives in the cold-key sketch (p4src/include/sketch.p4).

BMv2 computes the index with v1model hash(crc32, base 0, {job_id, key}, SKETCH_HASH_MAX):
behavioral-model's crc32 (src/bm_sim/calculations.cpp: reflected, polynomial 0x04c11db7,
init and final xor 0xffffffff) over the 10 bytes of the two fields, which is zlib.crc32,
then `base + hash % max` (modify_field_with_hash_based_offset). Row r takes bits
[12r + 11 : 12r] of it. The embedded pipeline and the controller both use `indexes`.
"""

from __future__ import annotations

import struct
import zlib

from contract.constants import SKETCH_HASH_MAX, SKETCH_INDEX_BITS, SKETCH_INDEX_MASK

JOB_KEY = struct.Struct("!HQ")  # the hash input: job_id (16 bits), key (64 bits)


def indexes(job_id: int, key: int) -> tuple[int, int]:
    """The cell of (job_id, key) in row 0 and in row 1."""
    h = zlib.crc32(JOB_KEY.pack(job_id, key)) % SKETCH_HASH_MAX
    return h & SKETCH_INDEX_MASK, (h >> SKETCH_INDEX_BITS) & SKETCH_INDEX_MASK
