"""What a PS believes its switch's cache holds (docs/design.md section 3), and nothing else.

The ParameterServer owns one `CacheBeliefs`; hosts/switch_channel.py only reports what the
switch answered (refreshes it did or refused, acked or rejected WRITEBACKs, COLLECTs given up)
and the PS records it here. A wrong belief costs only a refused refresh or a pull the PS
answers: the switch refreshes a slot only if it caches exactly the expected key with the
expected tag.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CacheBeliefs:
    # key -> the iteration its cache entry is tagged with (acked WRITEBACKs and refreshes):
    # pulls for that iteration are answered by the switch
    tag: dict[int, int] = field(default_factory=dict)
    # offset -> (key, iteration) the slot caches: what a COLLECT may ask to refresh
    slot: dict[int, tuple[int, int]] = field(default_factory=dict)
    # key -> the offset where its sums were last collected (an acked WRITEBACK lands there)
    offset_of: dict[int, int] = field(default_factory=dict)
    # (offset, key) whose refresh was asked in a COLLECT that was given up: the switch may
    # have refreshed them, so the PS invalidates them before releasing the barrier
    unsure: list[tuple[int, int]] = field(default_factory=list)
    # keys the switch stopped caching or summing although they were believed cached, in the
    # order seen: told to the workers in DONE_ACK, so that they stop grouping them as cached
    # (a PULL with one of them misses whole; docs/design.md section 4)
    evicted: dict[int, None] = field(default_factory=dict)

    def seed(self, offsets: dict[int, int | None]) -> None:
        """The controller's hot set (key -> offset or None), before its prefill WRITEBACK."""
        self.offset_of.update({k: o for k, o in offsets.items() if o is not None})

    def holds(self, key: int, iteration: int) -> bool:
        """Whether the cache answers pulls of `key` for `iteration`."""
        return self.tag.get(key) == iteration

    def refreshable(self, iteration: int, cold: set[int]) -> dict[int, int]:
        """offset -> key of the slots a COLLECT of `iteration` may refresh: tagged
        `iteration`, holding a key with no cold part in it."""
        return {o: k for o, (k, it) in self.slot.items() if it == iteration and k not in cold}

    def refreshed(self, offset: int, key: int, iteration: int) -> None:
        """The switch refreshed `offset`'s `key` to `iteration`."""
        self.slot[offset] = (key, iteration)
        self.tag[key] = iteration

    def refused(self, offset: int) -> None:
        """The switch refused a refresh: that slot does not cache what was believed."""
        self.slot.pop(offset, None)

    def collected(self, key: int, offset: int) -> None:
        self.offset_of[key] = offset

    def written(self, key: int, iteration: int) -> bool:
        """A WRITEBACK of `key` tagged `iteration` was acked (cached); False if it is late
        (a refresh already moved the key further)."""
        if self.tag.get(key, -1) > iteration:
            return False
        self.tag[key] = iteration
        offset = self.offset_of.get(key)
        if offset is not None:
            self.slot[offset] = (key, iteration)
        return True

    def rejected(self, key: int) -> None:
        """A WRITEBACK of `key` was refused: the switch no longer holds it."""
        self.tag.pop(key, None)
        self.evicted[key] = None

    def not_served(self, key: int) -> None:
        """The switch did not answer a pull of `key` for the iteration its cache was believed
        to hold it for: no table entry maps the key there any more (or, while the key moves,
        not to that slot). The slot may still be refreshed: the switch checks the key and
        the tag, and the barrier invalidates a refresh that missed sums (docs/design.md)."""
        self.tag.pop(key, None)
        self.evicted[key] = None

    def not_summed(self, iteration: int, cold: set[int]) -> None:
        """Keys cached for `iteration` that had a cold part in it: the switch refused to sum
        them, most often because they left the hot set (their WRITEBACK tells for sure)."""
        for key, tagged in self.tag.items():
            if tagged == iteration and key in cold:
                self.evicted[key] = None

    def take_evicted(self, at_most: int, iteration: int) -> list[int]:
        """Up to `at_most` evicted keys to tell the workers, oldest first, leaving out keys
        the cache holds again for `iteration`."""
        out: list[int] = []
        for key in list(self.evicted):
            if len(out) == at_most:
                break
            del self.evicted[key]
            if self.tag.get(key) != iteration:
                out.append(key)
        return out

    def forget(self, offset: int, key: int) -> None:
        """The entry at `offset` is invalid (invalidated, or its refresh may have happened)."""
        self.slot.pop(offset, None)
        self.tag.pop(key, None)

    def refresh_lost(self, offset: int, key: int) -> None:
        """A COLLECT asking to refresh (`offset`, `key`) was given up."""
        self.unsure.append((offset, key))
        self.forget(offset, key)

    def take_unsure(self) -> list[tuple[int, int]]:
        unsure, self.unsure = self.unsure, []
        return unsure
