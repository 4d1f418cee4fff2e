"""Where the loop's changes land: a job's hot keys on one switch, written over P4Runtime."""

from __future__ import annotations

from p4.v1 import p4runtime_pb2

from contract.constants import MAX_ENTRIES
from contract.names import hot_keys_table, set_slot_action
from controller.errors import BadInput, BudgetExceeded, WriteError
from controller.hot_keys import HotKeys, check_key
from controller.jobs import Job
from controller.online.loop import HotSetTarget
from controller.online.policy import Changes
from p4rt import wire

STEP_BATCH = 4096  # updates per Write RPC of a step (~200 KB, far below gRPC's 4 MB)


class SwitchTarget:
    """A job's hot keys on one switch, over P4Runtime, kept in the loop's own record.

    The record (key -> offset, as in lookup instance 0) is read from the switch once, and
    again after a failed write; apply() keeps it up to date, so a step reads nothing back.
    apply() sends the whole change in one Write RPC: deletes from instances 0..7, then
    inserts into 7..0 at the offsets the deletes freed (HotKeys' order, so that instance 0
    stays the record if the switch refuses part of it; the data plane's slot tags keep the
    sums exact whatever the order, docs/design.md section 4). Like HotKeys, it tolerates
    orphans of an interrupted earlier write: NOT_FOUND from a delete in instances 1..7 is
    ignored, ALREADY_EXISTS from an insert there is rewritten with MODIFY."""

    def __init__(self, hot_keys: HotKeys, job: Job) -> None:
        self.hot_keys, self.job = hot_keys, job
        p4info = hot_keys.p4info
        self._keys_only = [p4info.encoder(hot_keys_table(i)) for i in range(MAX_ENTRIES)]
        self._with_slot = [
            p4info.encoder(hot_keys_table(i), set_slot_action(i)) for i in range(MAX_ENTRIES)
        ]
        self._offsets: dict[int, int] | None = None
        self.reads = self.writes = 0  # RPCs sent (the benchmark's and the tests' view)

    def offsets(self) -> dict[int, int]:
        if self._offsets is None:
            self._offsets = {hk.key: hk.offset for hk in self.hot_keys.list(self.job.job_id)}
            self.reads += 1
        return self._offsets

    def current(self) -> set[int]:
        return set(self.offsets())

    def apply(self, changes: Changes) -> None:
        if not changes.add and not changes.remove:
            return
        offsets = dict(self.offsets())
        remove = list(dict.fromkeys(check_key(k) for k in changes.remove))
        missing = [k for k in remove if k not in offsets]
        if missing:
            raise BadInput(f"key {missing[0]} is not hot for job {self.job.job_id}")
        for k in remove:
            del offsets[k]
        add = [k for k in dict.fromkeys(check_key(k) for k in changes.add) if k not in offsets]
        used = set(offsets.values())
        if len(add) > self.job.slot_count - len(used):
            raise BudgetExceeded(
                f"job {self.job.job_id} has {self.job.slot_count} slots, {len(used)} in use: "
                f"no room for {len(add)} more keys"
            )
        free = (o for o in range(self.job.slot_count) if o not in used)
        added = [(k, next(free)) for k in add]
        jid = self.job.job_id
        delete, insert = p4runtime_pb2.Update.DELETE, p4runtime_pb2.Update.INSERT
        batch: list[tuple[int, int, bytes]] = []  # (type, instance, TableEntry bytes)
        for i in range(MAX_ENTRIES):
            batch += [(delete, i, self._keys_only[i]((jid, k))) for k in remove]
        for i in reversed(range(MAX_ENTRIES)):
            batch += [(insert, i, self._with_slot[i]((jid, k), (o,))) for k, o in added]
        try:
            self._write([wire.update(kind, entry) for kind, _, entry in batch])
            repair: list[bytes] = []
        except WriteError as e:
            repair = []
            for x in e.errors:
                kind, i, entry = batch[x.index]
                if i and kind == delete and x.code == "NOT_FOUND":
                    continue  # an orphan's instance that an earlier delete already emptied
                if i and kind == insert and x.code == "ALREADY_EXISTS":
                    repair.append(wire.update(p4runtime_pb2.Update.MODIFY, entry))
                    continue
                self._offsets = None  # the switch holds something else: read it again
                raise
        if repair:
            try:
                self._write(repair)
            except WriteError:
                self._offsets = None
                raise
        for k, o in added:
            offsets[k] = o
        self._offsets = offsets

    def _write(self, updates: list[bytes]) -> None:
        self.writes += 1  # one RPC up to STEP_BATCH updates (a step: 16 per key moved)
        batch = min(len(updates), STEP_BATCH)
        self.hot_keys.client.write(updates, batch_size=batch, stop_on_error=False)


class MirroredTarget:
    """The hot set of a job that several switches aggregate (AGGREGATE=leaves, docs/design.md
    section 7): the loop reads `primary` (the PS's switch) and applies every change to it,
    then to each of `mirrors` in turn. A mirror that lags or assigns other offsets costs
    PS traffic, never a value: partial sums carry their keys, and the slot tags refuse a key
    a slot does not hold (section 4)."""

    def __init__(self, primary: HotSetTarget, mirrors: list[HotSetTarget]) -> None:
        self.primary, self.mirrors = primary, mirrors

    def current(self) -> set[int]:
        return self.primary.current()

    def apply(self, changes: Changes) -> None:
        self.primary.apply(changes)
        for mirror in self.mirrors:
            mirror.apply(changes)
