"""Jobs (table HotaggIngress.jobs): job_id -> job_index, slot_base, slot_count.

The switch's table is the only record: every call reads it, so several controller processes
(or a restarted one) agree on what is allocated. Each job owns the disjoint slot range
[slot_base, slot_base + slot_count) of the NUM_SLOTS slot registers and a job_index in
0..MAX_JOBS-1 (the switch's dedup registers are indexed by it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from contract import names
from contract.constants import MAX_JOBS, NUM_SLOTS
from controller.client import SwitchClient
from controller.errors import AlreadyExists, BadInput, BudgetExceeded, UnknownJob
from controller.p4info import P4Info

TABLE = names.TABLE_JOBS
SET_JOB = names.ACTION_SET_JOB
JOB_ID_MAX = (1 << 16) - 1


@dataclass(frozen=True)
class Job:
    job_id: int
    job_index: int
    slot_base: int
    slot_count: int

    @property
    def slot_end(self) -> int:
        return self.slot_base + self.slot_count

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def check_job_id(job_id: int) -> int:
    if not 0 <= job_id <= JOB_ID_MAX:
        raise BadInput(f"job id {job_id} is not in 0..{JOB_ID_MAX}")
    return job_id


def allocate(existing: list[Job], slots: int, slot_base: int | None = None) -> tuple[int, int]:
    """(job_index, slot_base) for a new job of `slots` slots: the lowest free index and the
    first free range that fits (or the given `slot_base`, if free)."""
    if not 1 <= slots <= NUM_SLOTS:
        raise BadInput(f"a job needs 1..{NUM_SLOTS} slots, not {slots}")
    used = {j.job_index for j in existing}
    free = [i for i in range(MAX_JOBS) if i not in used]
    if not free:
        raise BudgetExceeded(f"all {MAX_JOBS} job indices are in use; remove a job first")
    ranges = sorted((j.slot_base, j.slot_end) for j in existing)
    if slot_base is not None:
        end = slot_base + slots
        if slot_base < 0 or end > NUM_SLOTS:
            raise BadInput(f"slots {slot_base}..{end - 1} are outside 0..{NUM_SLOTS - 1}")
        if any(lo < end and slot_base < hi for lo, hi in ranges):
            raise BudgetExceeded(f"slots {slot_base}..{end - 1} overlap another job's slots")
        return free[0], slot_base
    for lo, hi in _gaps(ranges):
        if hi - lo >= slots:
            return free[0], lo
    taken = sum(hi - lo for lo, hi in ranges)
    raise BudgetExceeded(
        f"no {slots} consecutive free slots (the switch has {NUM_SLOTS}, jobs hold {taken})"
    )


def _gaps(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(gap start, gap end) between sorted ranges, including the one after the last range."""
    out, start = [], 0
    for lo, hi in ranges:
        out.append((start, lo))
        start = max(start, hi)
    out.append((start, NUM_SLOTS))
    return out


class Jobs:
    """The jobs table of one switch."""

    def __init__(self, client: SwitchClient, p4info: P4Info) -> None:
        self.client = client
        self.p4info = p4info

    def list(self) -> list[Job]:
        jobs = []
        for entry in self.client.read_table(self.p4info.wildcard(TABLE)):
            e = self.p4info.decode_entry(entry)
            # job_id is exact, so it decodes to int (MatchValue's tuple is lpm's)
            jobs.append(Job(int(e.match["job_id"]), **e.params))  # type: ignore[arg-type]
        return sorted(jobs, key=lambda j: j.job_id)

    def get(self, job_id: int) -> Job:
        for job in self.list():
            if job.job_id == job_id:
                return job
        raise UnknownJob(f"job {job_id} is not configured on the switch (see 'job add')")

    def add(self, job_id: int, slots: int, slot_base: int | None = None) -> Job:
        check_job_id(job_id)
        existing = self.list()
        for job in existing:
            if job.job_id == job_id:
                raise AlreadyExists(
                    f"job {job_id} exists already (slots {job.slot_base}..{job.slot_end - 1});"
                    " remove it first"
                )
        index, base = allocate(existing, slots, slot_base)
        job = Job(job_id, index, base, slots)
        entry = self.p4info.table_entry(
            TABLE,
            {"job_id": job_id},
            SET_JOB,
            {"job_index": index, "slot_base": base, "slot_count": slots},
        )
        self.client.write_entries("insert", [entry])
        return job

    def remove(self, job_id: int) -> Job:
        """Delete the job's entry. Its hot keys stay unless the caller clears them first
        (HotKeys.clear); packets of the job are then counted UNKNOWN_JOB and dropped.

        The job index's dedup registers and its slots' sums stay as they are (BMv2 has no
        P4Runtime register access to reset them), so a job that reuses them (a re-run with
        seqs from 1, or another job given the same index) would be deduplicated or summed
        against old state: push the pipeline again first, as `make run` does per phase."""
        job = self.get(job_id)
        self.client.write_entries("delete", [self.p4info.table_entry(TABLE, {"job_id": job_id})])
        return job
