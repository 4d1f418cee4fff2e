"""The cold-key sketch (p4src/include/sketch.p4; docs/design.md, "Measuring cold keys in the
switch"): the embedded pipeline directly, then both targets over P4Runtime (counters and
digests through controller/sketch.py)."""

from __future__ import annotations

import time

import pytest

from contract.constants import SKETCH_HASH_MAX, SKETCH_INDEX_MASK, Op
from contract.names import SKETCH_CELL_REGISTERS, SKETCH_ROW_COUNTERS, TABLE_SKETCH_CONFIG
from contract.sketch import JOB_KEY, indexes
from controller.errors import BadInput
from controller.sketch import Candidate, Sketch, SketchSource
from softswitch.pipeline import Pipeline
from tests.packet_harness import frame
from tests.test_pipeline import p  # noqa: F401  (the fixture: routes, jobs 1 and 2, hot keys)

JOB = 1
W1, PS = 1, 3
COLD = 500
T = 5


def bmv2_crc32(data: bytes) -> int:
    """behavioral-model's crc32 as src/bm_sim/calculations.cpp writes it: each byte
    reflected into a non-reflected table walk, the remainder reflected at the end."""

    def reflect(v: int, bits: int) -> int:
        return int(f"{v:0{bits}b}"[::-1], 2)

    rem = 0xFFFFFFFF
    for byte in data:
        rem ^= reflect(byte, 8) << 24
        for _ in range(8):
            rem = ((rem << 1) ^ 0x04C11DB7 if rem & 0x80000000 else rem << 1) & 0xFFFFFFFF
    return reflect(rem, 32) ^ 0xFFFFFFFF


def colliding_key(job_id: int, key: int) -> int:
    """Another key with the same cells in both rows. crc32 is affine over GF(2) for inputs
    of one length, so key ^ d collides iff the low 24 bits of crc(d) ^ crc(0) are 0: d is a
    non-zero solution of 24 linear equations in its 64 bits (Gaussian elimination)."""
    zero = JOB_KEY.pack(0, 0)

    def image(d: int) -> int:
        return (
            __import__("zlib").crc32(JOB_KEY.pack(0, d)) ^ __import__("zlib").crc32(zero)
        ) % SKETCH_HASH_MAX

    basis: dict[int, tuple[int, int]] = {}  # pivot bit -> (image, combination of key bits)
    for bit in range(64):
        v, combo = image(1 << bit), 1 << bit
        while v:
            top = v.bit_length() - 1
            if top not in basis:
                basis[top] = (v, combo)
                break
            v ^= basis[top][0]
            combo ^= basis[top][1]
        else:
            other = key ^ combo
            assert indexes(job_id, other) == indexes(job_id, key)
            return other
    raise AssertionError("no collision found")


def push(pipe: Pipeline, seq: int, keys, job: int = JOB, worker: int = 0) -> list:
    data = frame(
        W1, PS, Op.PUSH, [(k, 1) for k in keys], seq=seq, iteration=1, job_id=job,
        worker_id=worker,
    )  # fmt: skip
    return pipe.process(W1, data)


def turn_on(pipe: Pipeline, epoch: int, threshold: int) -> None:
    pipe.tables[TABLE_SKETCH_CONFIG].set_default(
        "HotaggIngress.set_sketch", (epoch, threshold)
    )  # fmt: skip


def estimate(pipe: Pipeline, job: int, key: int) -> int:
    """Count-min estimate over the counters (what the controller reads)."""
    return min(pipe.counters[c].packets[i] for c, i in zip(SKETCH_ROW_COUNTERS, indexes(job, key)))


# ---- the hash, as BMv2 computes it ----


def test_indexes_are_bmv2_crc32_of_job_and_key():
    for job, key in [(0, 0), (1, 500), (65535, 2**64 - 1), (7, 0x0123456789ABCDEF)]:
        h = bmv2_crc32(JOB_KEY.pack(job, key)) % SKETCH_HASH_MAX
        assert indexes(job, key) == (h & SKETCH_INDEX_MASK, h >> 12)


# ---- the embedded pipeline ----


def test_off_by_default_counts_nothing(p):  # noqa: F811
    push(p, 1, [COLD, COLD + 1])
    assert all(not any(p.counters[c].packets) for c in SKETCH_ROW_COUNTERS)
    assert all(not any(p.registers[r].values) for r in SKETCH_CELL_REGISTERS)


def test_only_cold_entries_of_fresh_pushes_are_counted(p):  # noqa: F811
    turn_on(p, 1, 1000)
    push(p, 1, [100, COLD, 101, COLD + 1])  # 100, 101 are hot
    push(p, 1, [100, COLD, 101, COLD + 1])  # a duplicate: not counted again
    push(p, 2, [COLD])
    assert estimate(p, JOB, COLD) == 2 and estimate(p, JOB, COLD + 1) == 1
    assert estimate(p, JOB, 100) == 0
    assert estimate(p, 2, COLD) == 0  # another job's (job_id is hashed)
    assert p.digests == []


def test_estimate_is_at_least_the_count_and_exact_without_collisions(p):  # noqa: F811
    turn_on(p, 1, 1000)
    other = colliding_key(JOB, COLD)
    for seq in range(1, 4):
        push(p, seq, [COLD, COLD + 1])
    push(p, 4, [other])
    assert estimate(p, JOB, COLD + 1) == 3
    assert estimate(p, JOB, COLD) == 4 >= 3  # shares both cells with `other`
    assert estimate(p, JOB, other) == 4 >= 1


def test_threshold_crossing_is_reported_once_per_epoch(p):  # noqa: F811
    turn_on(p, 1, T)
    for seq in range(1, T + 4):
        push(p, seq, [COLD])
    assert p.digests == [(JOB, COLD, 1, T)]
    turn_on(p, 2, T)  # a new epoch: the cells reset lazily, the key is reported again
    for seq in range(T + 4, 2 * T + 8):
        push(p, seq, [COLD])
    assert p.digests == [(JOB, COLD, 1, T), (JOB, COLD, 2, T)]
    assert estimate(p, JOB, COLD) == 2 * T + 7  # the counters are cumulative


def test_one_digest_per_packet_the_other_key_comes_later(p):  # noqa: F811
    turn_on(p, 3, 2)
    push(p, 1, [COLD, COLD + 1])
    push(p, 2, [COLD, COLD + 1])  # both reach 2: only the first is reported
    assert p.digests == [(JOB, COLD, 3, 2)]
    push(p, 3, [COLD + 1, COLD])  # COLD + 1 now, COLD not again
    assert p.digests == [(JOB, COLD, 3, 2), (JOB, COLD + 1, 3, 3)]


def test_a_key_sharing_the_cells_of_a_reported_one_is_not_reported(p):  # noqa: F811
    # The reported bits are a Bloom filter: a false positive hides a key for the epoch.
    turn_on(p, 1, 1)
    other = colliding_key(JOB, COLD)
    push(p, 1, [COLD])
    push(p, 2, [other])
    assert p.digests == [(JOB, COLD, 1, 1)]


# ---- both targets, over P4Runtime ----


def send_pushes(sut, first_seq: int, n: int, keys) -> None:
    for seq in range(first_seq, first_seq + n):
        out = sut.ports.exchange(W1, frame(W1, PS, Op.PUSH, [(k, 1) for k in keys], seq=seq,
                                           iteration=1, job_id=JOB, worker_id=0))  # fmt: skip
        assert [o.port for o in out] == [PS]


def candidates(sketch: Sketch, want: int, timeout: float = 3.0) -> list[Candidate]:
    """Reports until `want` arrived (or the timeout), then a short wait for any extra."""
    got: list[Candidate] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got += sketch.candidates(timeout=0.2)
    return got + sketch.candidates(timeout=0.3)


@pytest.mark.root
def test_cold_key_is_reported_once_per_epoch_over_p4runtime(sut):
    sketch = Sketch(sut.client, sut.p4info)
    before = sketch.read_sketch()
    sketch.configure(epoch=1, threshold=T, max_list_size=4, max_timeout_ns=5_000_000)
    send_pushes(sut, 1, T + 3, [COLD, COLD + 1])
    # One report per packet: COLD + 1, which reached T in the same packet, comes next.
    assert candidates(sketch, 2) == [Candidate(JOB, COLD, 1, T), Candidate(JOB, COLD + 1, 1, T + 1)]
    counts = sketch.read_sketch().since(before)
    assert counts.estimate(JOB, COLD) == counts.estimate(JOB, COLD + 1) == T + 3
    assert counts.estimate(JOB, COLD + 2) == 0
    sketch.start_epoch(2, T)
    send_pushes(sut, T + 4, T, [COLD + 1])
    assert candidates(sketch, 1) == [Candidate(JOB, COLD + 1, 2, T)]  # and only once
    assert sketch.read_sketch().since(before).estimate(JOB, COLD + 1) == 2 * T + 3


@pytest.mark.root
def test_colliding_keys_over_p4runtime(sut):
    sketch = Sketch(sut.client, sut.p4info)
    before = sketch.read_sketch()
    sketch.configure(epoch=7, threshold=3, max_list_size=1, max_timeout_ns=5_000_000)
    other = colliding_key(JOB, COLD)
    send_pushes(sut, 1, 2, [COLD])
    send_pushes(sut, 3, 2, [other])  # reaches 3 through COLD's counts: reported first
    send_pushes(sut, 5, 1, [COLD])  # the Bloom filter says "reported": no digest
    assert candidates(sketch, 1) == [Candidate(JOB, other, 7, 3)]
    counts = sketch.read_sketch().since(before)
    assert counts.estimate(JOB, COLD) == counts.estimate(JOB, other) == 5


class FakeSketch:
    """Sketch's controller side without a switch: reports and cumulative cell counts the
    test sets, and what SketchSource asked of it."""

    def __init__(self) -> None:
        self.reports: list[Candidate] = []
        self.cells: dict[tuple[int, int], int] = {}
        self.epochs: list[int] = []
        self.asked: list[set[tuple[int, int]]] = []

    def configure(self, epoch: int, threshold: int) -> None:
        self.epochs.append(epoch)

    def start_epoch(self, epoch: int, threshold: int) -> None:
        self.epochs.append(epoch)

    def candidates(self) -> list[Candidate]:
        out, self.reports = self.reports, []
        return out

    def read_cells(self, cells) -> dict[tuple[int, int], int]:
        asked = set(cells)
        self.asked.append(asked)
        return {c: self.cells.get(c, 0) for c in asked}

    def add(self, job: int, key: int, n: int) -> None:
        for row, index in enumerate(indexes(job, key)):
            self.cells[(row, index)] = self.cells.get((row, index), 0) + n


def test_sketch_source_follows_reported_keys_by_their_cells_only():
    fake = FakeSketch()
    src = SketchSource(fake, JOB, threshold=3)  # type: ignore[arg-type]
    a, b = COLD, colliding_key(JOB, COLD)
    fake.add(JOB, a, 4)
    fake.add(JOB, 900, 2)  # below the threshold: never reported, never read
    fake.reports = [Candidate(JOB, a, 1, 3), Candidate(JOB + 1, 77, 1, 9)]  # 77: other job
    # a newly reported key counts its report (no earlier read of its cells)
    assert src.read().counts == {a: 3.0}
    assert fake.asked[-1] == set(enumerate(indexes(JOB, a))) and src.known == {a}
    fake.add(JOB, a, 5)
    fake.add(JOB, b, 2)  # shares both cells with a: the count-min over-counts a by it
    assert src.read().counts == {a: 7.0}
    fake.add(JOB, b, 1)  # a had no cold update: only b's, in its cells
    fake.reports = [Candidate(JOB, b, 3, 3)]
    assert src.read().counts == {a: 1.0, b: 3.0}
    assert src.read().counts == {}  # nothing new in a step: neither is followed any more
    assert src.known == set() and fake.asked[-1] == set(enumerate(indexes(JOB, a)))
    assert src.read().counts == {} and fake.asked[-1] == set()
    assert fake.epochs == [1, 2, 3, 4, 5, 6]  # a new epoch per read: keys reported again
    with pytest.raises(BadInput, match="threshold"):
        SketchSource(fake, JOB, threshold=0)  # type: ignore[arg-type]
