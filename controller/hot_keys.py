"""Hot keys (p4src/include/hot_key_lookup.p4: HotaggIngress.lookup0..7.hot_keys).

The switch looks entry i of a packet up in instance i, so every hot key lives in all 8
instances with the same slot offset (relative to its job's slot_base). Offsets are allocated
in the job's range [0, slot_count). The switch tables are the only record, read on every call.

Instance 0 is the record of which keys are hot: inserts go to instances 7..0 and deletes to
0..7, so a write that fails half way leaves at worst "orphans" in instances 1..7 of a key
that instance 0 lacks. Reading instance 0 alone is then enough (a table read is slow on a
pure-Python server); an insert that meets an orphan (ALREADY_EXISTS in 1..7) rewrites it
with the new offset, and a delete ignores NOT_FOUND in 1..7. Meanwhile the data plane stays
exact: slot tags, not lookup consistency, keep the sums right (docs/design.md).
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from contract.constants import KEY_MAX, MAX_ENTRIES
from contract.names import hot_keys_table, set_slot_action
from controller.client import SwitchClient
from controller.errors import BadInput, BudgetExceeded, NotFound, WriteError
from controller.jobs import Job
from controller.p4info import P4Info


def check_key(key: int) -> int:
    if isinstance(key, bool) or not isinstance(key, int) or not 0 <= key <= KEY_MAX:
        raise BadInput(f"key {key!r} is not a uint64 (0..{KEY_MAX})")
    return key


@dataclass
class HotKey:
    job_id: int
    key: int
    offset: int  # instance 0's (or, for an orphan, the first instance's that has the key)
    offsets: list[int | None] = field(default_factory=list)  # per instance, if all were read
    packets: int = 0  # direct counter hits summed over the instances
    bytes: int = 0
    instance_packets: list[int] = field(default_factory=list)

    @property
    def complete(self) -> bool | None:
        """In all 8 instances with one offset; None when only instance 0 was read."""
        if not self.offsets:
            return None
        return all(o == self.offset for o in self.offsets)

    def as_dict(self) -> dict[str, object]:
        return {
            "job_id": self.job_id,
            "key": self.key,
            "offset": self.offset,
            "complete": self.complete,
            "offsets": self.offsets,
            "packets": self.packets,
            "bytes": self.bytes,
            "instance_packets": self.instance_packets,
        }


@dataclass
class InstallReport:
    added: list[tuple[int, int]]  # (key, offset)
    kept: int  # already hot, left at their offsets
    repaired: int  # orphan entries in instances 1..7 rewritten
    evicted: int  # with replace: the job's other keys, removed
    entries_written: int


class HotKeys:
    """The 8 hot-key table instances of one switch."""

    def __init__(self, client: SwitchClient, p4info: P4Info) -> None:
        self.client = client
        self.p4info = p4info
        # Bulk writes: encoders per instance write entry bytes directly (p4rt/wire.py).
        self._keys_only = [p4info.encoder(hot_keys_table(i)) for i in range(MAX_ENTRIES)]
        self._with_slot = [
            p4info.encoder(hot_keys_table(i), set_slot_action(i)) for i in range(MAX_ENTRIES)
        ]

    def list(
        self, job_id: int | None = None, counters: bool = False, all_instances: bool = False
    ) -> list[HotKey]:
        """Hot keys (of one job, or all) sorted by (job, key). Reads instance 0 only, unless
        `counters` (hits summed over the 8 direct counters) or `all_instances` (per-instance
        offsets, which shows partial keys and orphans) ask for all 8."""
        found: dict[tuple[int, int], HotKey] = {}
        every = counters or all_instances
        for i in range(MAX_ENTRIES if every else 1):
            request = self.p4info.wildcard(hot_keys_table(i), counters=counters)
            for raw in self.client.read_table(request):
                e = self.p4info.decode_entry(raw)
                # exact fields decode to int (MatchValue's tuple is lpm's)
                jid, key = int(e.match["job_id"]), int(e.match["key"])  # type: ignore[arg-type]
                if job_id is not None and jid != job_id:
                    continue
                offset = e.params.get("offset", 0)
                hk = found.get((jid, key))
                if hk is None:
                    hk = found[(jid, key)] = HotKey(jid, key, offset)
                    if every:
                        hk.offsets = [None] * MAX_ENTRIES
                        hk.instance_packets = [0] * MAX_ENTRIES
                if every:
                    hk.offsets[i] = offset
                if counters:
                    hk.packets += e.packets
                    hk.bytes += e.bytes
                    hk.instance_packets[i] = e.packets
        return [found[k] for k in sorted(found)]

    # builtins.list: in the class body, `list` is the method above
    def _entries(
        self, i: int, job_id: int, pairs: Iterable[tuple[int, int]]
    ) -> builtins.list[bytes]:
        enc = self._with_slot[i]
        return [enc((job_id, key), (offset,)) for key, offset in pairs]

    def _keys(self, i: int, job_id: int, keys: Iterable[int]) -> builtins.list[bytes]:
        enc = self._keys_only[i]
        return [enc((job_id, key)) for key in keys]

    def install(self, job: Job, keys: Iterable[int], replace: bool = False) -> InstallReport:
        """Make `keys` hot for `job` (each key in all 8 instances at one free offset).

        Keys already hot keep their offsets. With `replace`, the job's other hot keys are
        evicted first (their offsets become free). Raises BudgetExceeded, before writing
        anything, when the job's slot range cannot hold the keys.
        """
        wanted = list(dict.fromkeys(check_key(k) for k in keys))  # dedup, keep order
        wanted_set = set(wanted)
        current = {hk.key: hk.offset for hk in self.list(job.job_id)}
        evicted = 0
        if replace:
            stale = [k for k in current if k not in wanted_set]
            evicted = self._delete(job.job_id, stale)
            for k in stale:
                del current[k]
        used = set(current.values())
        new = [k for k in wanted if k not in current]
        avail = job.slot_count - len(used)
        if len(new) > avail:
            raise BudgetExceeded(
                f"job {job.job_id} has {job.slot_count} slots, {len(used)} in use: no room for "
                f"{len(new)} more keys (evict keys, or add the job with more slots)"
            )
        free = (o for o in range(job.slot_count) if o not in used)
        added = [(k, next(free)) for k in new]
        written = repaired = 0
        for i in reversed(range(MAX_ENTRIES)):
            entries = self._entries(i, job.job_id, added)
            try:
                written += self.client.write_entries("insert", entries, stop_on_error=False)
            except WriteError as e:
                if i == 0 or any(x.code != "ALREADY_EXISTS" for x in e.errors):
                    raise
                # Orphans of an interrupted write: give them this install's offsets.
                fix = [entries[x.index] for x in e.errors]
                self.client.write_entries("modify", fix)
                repaired += len(fix)
                written += len(entries)
        kept = len(wanted) - len(new)
        return InstallReport(added, kept, repaired, evicted, written)

    def evict(self, job_id: int, keys: Sequence[int]) -> int:
        """Remove `keys` from all instances; returns how many keys were removed."""
        wanted = list(dict.fromkeys(check_key(k) for k in keys))
        current = {hk.key for hk in self.list(job_id)}
        missing = [k for k in wanted if k not in current]
        if missing:
            raise NotFound(
                f"key {missing[0]} is not hot for job {job_id}"
                + (f" (nor are {len(missing) - 1} more)" if len(missing) > 1 else "")
            )
        return self._delete(job_id, wanted)

    def _delete(self, job_id: int, keys: Sequence[int]) -> int:
        for i in range(MAX_ENTRIES):
            try:
                self.client.write_entries(
                    "delete", self._keys(i, job_id, keys), stop_on_error=False
                )
            except WriteError as e:
                # instances 1..7 may lack a key whose earlier install was interrupted
                if i == 0 or any(x.code != "NOT_FOUND" for x in e.errors):
                    raise
        return len(keys)

    def clear(self, job_id: int | None = None) -> int:
        """Remove every hot key (of one job, or of all jobs), orphans included, reading all
        8 instances; returns how many keys were hot (in instance 0)."""
        hot = self.list(job_id, all_instances=True)
        for i in range(MAX_ENTRIES):
            present: dict[int, list[int]] = {}
            for hk in hot:
                if hk.offsets[i] is not None:
                    present.setdefault(hk.job_id, []).append(hk.key)
            for jid, keys in present.items():
                self.client.write_entries("delete", self._keys(i, jid, keys))
        return sum(1 for hk in hot if hk.offsets[0] is not None)
