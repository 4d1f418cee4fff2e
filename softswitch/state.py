"""Tables, counters and registers of the embedded target (the P4Runtime-visible state).

Every write builds the new entry record first and publishes it with one dict assignment, so the
packet thread, which reads the same dicts without locks, never sees a half-written entry.

Fast path for the pipeline (same package, documented here because it is a contract):
- `Table._entries` maps a lookup key to a record `(action, params, ctr)`; the lookup key is
  the value itself for a table with one exact field and the match tuple otherwise. `ctr` is a
  `[packets, bytes]` list shared by the record's versions, so modify keeps its counts.
- `Table._default_rec` is the default action's record (its `ctr` is None).
- `Table.lpm_lookup(value)` is the longest-prefix lookup of a one-field lpm table.
- `Table._gen` counts changes of what a lookup can return (entries and default action); it
  goes up after each change is published, so a cache of lookup results filled while `_gen`
  was G is stale once `_gen` != G, never before.
- `Counter.packets`, `Counter.bytes` and `Register.values` are plain lists, cleared in place.
  A signed register keeps two's-complement values as Python ints (the API shows them unsigned).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

Match = tuple  # one item per field: exact -> int, lpm -> (value, prefix_len)
Record = tuple  # (action, params, ctr)


class StateError(Exception):
    """Base class of every error that a table, counter or register write can raise."""


class EntryExists(StateError):
    pass


class EntryNotFound(StateError):
    pass


class TableFull(StateError):
    pass


class BadMatch(StateError):
    pass


class BadAction(StateError):
    pass


class BadIndex(StateError):
    pass


class BadValue(StateError):
    """A counter or register value that is negative or wider than the cell."""


@dataclass(frozen=True)
class MatchField:
    name: str
    bitwidth: int
    kind: str  # "exact" or "lpm"


@dataclass(frozen=True)
class ActionSpec:
    name: str
    params: tuple[tuple[str, int], ...]  # (param name, bitwidth) in P4Info order


@dataclass
class TableEntry:
    match: Match
    action: str
    params: tuple[int, ...]
    packets: int = 0
    bytes: int = 0


def _check_width(what: str, value: Any, bitwidth: int, exc: type[StateError]) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise exc(f"{what} must be an integer, got {value!r}")
    if value < 0 or value >> bitwidth:
        raise exc(f"{what} = {value} does not fit in {bitwidth} bits")
    return value


class Table:
    """A match-action table with exact fields, or a single lpm field, or no key."""

    def __init__(
        self,
        name: str,
        size: int,
        fields: Iterable[MatchField],
        actions: Iterable[ActionSpec],
        default_only: Iterable[str] = (),
        initial_default: tuple[str, tuple[int, ...]] = ("NoAction", ()),
        has_direct_counter: bool = False,
        table_only: Iterable[str] = (),
    ) -> None:
        self.name = name
        self.size = size
        self.fields = tuple(fields)
        self.actions = {a.name: a for a in actions}
        self.default_only = frozenset(default_only)
        self.table_only = frozenset(table_only)
        self.initial_default = (initial_default[0], tuple(initial_default[1]))
        self.has_direct_counter = has_direct_counter
        kinds = [f.kind for f in self.fields]
        if any(k not in ("exact", "lpm") for k in kinds):
            raise ValueError(f"{name}: match kinds {kinds} are not all exact or lpm")
        if "lpm" in kinds and len(kinds) != 1:
            raise ValueError(f"{name}: an lpm field must be the table's only field")
        self._lpm = kinds == ["lpm"]
        self._single = len(kinds) == 1
        self._entries: dict[Any, Record] = {}
        # lpm only: prefix length -> {value: record}, and the lengths present, longest first
        self._by_len: dict[int, dict[int, Record]] = {}
        self._lens: tuple[int, ...] = ()
        self._gen = 0
        self._check_action(*self.initial_default, as_default=True)
        self._default_rec: Record = (self.initial_default[0], self.initial_default[1], None)

    # --- validation ---
    def _norm_match(self, match: Match | Mapping[str, Any]) -> Match:
        if isinstance(match, Mapping):
            names = {f.name for f in self.fields}
            unknown = set(match) - names
            if unknown:
                raise BadMatch(f"{self.name} has no match field {sorted(unknown)}")
            items = []
            for f in self.fields:
                if f.name in match:
                    items.append(match[f.name])
                elif f.kind == "lpm":  # P4Runtime: an omitted lpm field is a /0 wildcard
                    items.append((0, 0))
                else:
                    raise BadMatch(f"{self.name}: exact field {f.name!r} is missing")
            match = tuple(items)
        if not isinstance(match, tuple) or len(match) != len(self.fields):
            raise BadMatch(
                f"{self.name} takes {len(self.fields)} match field(s) "
                f"{[f.name for f in self.fields]}, got {match!r}"
            )
        out: list[int | tuple[int, int]] = []  # exact: value; lpm: (value, prefix_len)
        for f, v in zip(self.fields, match):
            what = f"{self.name} field {f.name}"
            if f.kind == "exact":
                out.append(_check_width(what, v, f.bitwidth, BadMatch))
                continue
            if not (isinstance(v, tuple) and len(v) == 2):
                raise BadMatch(f"{what} is lpm: give (value, prefix_len), got {v!r}")
            value = _check_width(what, v[0], f.bitwidth, BadMatch)
            plen = v[1]
            if isinstance(plen, bool) or not isinstance(plen, int) or not 0 <= plen <= f.bitwidth:
                raise BadMatch(f"{what}: prefix length {plen!r} is not in 0..{f.bitwidth}")
            if value & ((1 << (f.bitwidth - plen)) - 1):
                raise BadMatch(f"{what}: value {value:#x} has bits set beyond prefix /{plen}")
            out.append((value, plen))
        return tuple(out)

    def _check_action(self, action: str, params: tuple[int, ...], as_default: bool) -> tuple:
        spec = self.actions.get(action)
        if spec is None:
            raise BadAction(f"{action!r} is not an action of {self.name}: {sorted(self.actions)}")
        if as_default and action in self.table_only:
            raise BadAction(f"{action} cannot be the default action of {self.name}")
        if not as_default and action in self.default_only:
            raise BadAction(f"{action} is default-only in {self.name}: use set_default")
        params = tuple(params)
        if len(params) != len(spec.params):
            raise BadAction(
                f"{action} takes {len(spec.params)} parameter(s) "
                f"{[p for p, _ in spec.params]}, got {len(params)}"
            )
        for (pname, width), v in zip(spec.params, params):
            _check_width(f"{action} parameter {pname}", v, width, BadAction)
        return params

    def _key(self, match: Match) -> Any:
        return match[0] if self._single else match

    def _match_of(self, key: Any) -> Match:
        return (key,) if self._single else key

    # --- entries ---
    def _publish(self, key: Any, rec: Record) -> None:
        if self._lpm:
            value, plen = key
            bucket = self._by_len.get(plen)
            if bucket is None:
                bucket = self._by_len[plen] = {}
            bucket[value] = rec
            if plen not in self._lens:
                self._lens = tuple(sorted((*self._lens, plen), reverse=True))
        self._entries[key] = rec
        self._gen += 1

    def insert(self, match: Match, action: str, params: tuple[int, ...]) -> None:
        if not self.fields:
            raise BadMatch(f"{self.name} has no key: set its default action instead")
        key = self._key(self._norm_match(match))
        params = self._check_action(action, params, as_default=False)
        if key in self._entries:
            raise EntryExists(f"{self.name} already has an entry for {self._match_of(key)}")
        if len(self._entries) >= self.size:
            raise TableFull(f"{self.name} is full ({self.size} entries)")
        self._publish(key, (action, params, [0, 0]))

    def modify(self, match: Match, action: str, params: tuple[int, ...]) -> None:
        key = self._key(self._norm_match(match))
        params = self._check_action(action, params, as_default=False)
        old = self._entries.get(key)
        if old is None:
            raise EntryNotFound(f"{self.name} has no entry for {self._match_of(key)}")
        self._publish(key, (action, params, old[2]))

    def delete(self, match: Match) -> None:
        key = self._key(self._norm_match(match))
        if key not in self._entries:
            raise EntryNotFound(f"{self.name} has no entry for {self._match_of(key)}")
        if self._lpm:
            value, plen = key
            bucket = self._by_len[plen]
            del bucket[value]
            if not bucket:
                self._lens = tuple(x for x in self._lens if x != plen)
                del self._by_len[plen]
        del self._entries[key]
        self._gen += 1

    def get(self, match: Match) -> TableEntry:
        key = self._key(self._norm_match(match))
        rec = self._entries.get(key)
        if rec is None:
            raise EntryNotFound(f"{self.name} has no entry for {self._match_of(key)}")
        return TableEntry(self._match_of(key), rec[0], rec[1], rec[2][0], rec[2][1])

    def entries(self) -> list[TableEntry]:
        return [
            TableEntry(self._match_of(k), r[0], r[1], r[2][0], r[2][1])
            for k, r in list(self._entries.items())
        ]

    def set_direct_counter(self, match: Match, packets: int, bytes: int) -> None:
        if not self.has_direct_counter:
            raise StateError(f"{self.name} has no direct counter")
        key = self._key(self._norm_match(match))
        rec = self._entries.get(key)
        if rec is None:
            raise EntryNotFound(f"{self.name} has no entry for {self._match_of(key)}")
        _check_width("packet count", packets, 64, BadValue)
        _check_width("byte count", bytes, 64, BadValue)
        rec[2][:] = [packets, bytes]

    # --- default action ---
    def set_default(self, action: str, params: tuple[int, ...]) -> None:
        params = self._check_action(action, params, as_default=True)
        self._default_rec = (action, params, None)
        self._gen += 1

    def reset_default(self) -> None:
        self._default_rec = (self.initial_default[0], self.initial_default[1], None)
        self._gen += 1

    def default(self) -> tuple[str, tuple[int, ...]]:
        rec = self._default_rec
        return rec[0], rec[1]

    def clear(self) -> None:
        self._entries.clear()
        self._by_len.clear()
        self._lens = ()
        self.reset_default()  # counts as a change (_gen)

    def __len__(self) -> int:
        return len(self._entries)

    # --- lookups (the pipeline's fast path) ---
    def lookup(self, match: Match) -> tuple[str, tuple[int, ...], bool]:
        """(action, params, hit) for a packet's key values (lpm fields given as plain ints)."""
        if self._lpm:
            rec = self.lpm_lookup(match[0])
        else:
            rec = self._entries.get(self._key(match)) if self.fields else None
        if rec is None:
            rec = self._default_rec
        return rec[0], rec[1], rec[2] is not None

    def lpm_lookup(self, value: int) -> Record | None:
        width = self.fields[0].bitwidth
        by_len = self._by_len
        for plen in self._lens:
            bucket = by_len.get(plen)
            if bucket is not None:
                rec = bucket.get(value >> (width - plen) << (width - plen))
                if rec is not None:
                    return rec
        return None


def _check_index(name: str, index: Any, size: int) -> int:
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < size:
        raise BadIndex(f"{name}: index {index!r} is out of range 0..{size - 1}")
    return index


class Counter:
    """An indirect counter of packets and bytes."""

    def __init__(self, name: str, size: int) -> None:
        self.name = name
        self.size = size
        self.packets = [0] * size
        self.bytes = [0] * size

    def read(self, index: int) -> tuple[int, int]:
        _check_index(self.name, index, self.size)
        return self.packets[index], self.bytes[index]

    def write(self, index: int, packets: int, bytes: int) -> None:
        _check_index(self.name, index, self.size)
        _check_width("packet count", packets, 64, BadValue)
        _check_width("byte count", bytes, 64, BadValue)
        self.packets[index] = packets
        self.bytes[index] = bytes

    def count(self, index: int, nbytes: int) -> None:
        _check_index(self.name, index, self.size)
        self.packets[index] += 1
        self.bytes[index] += nbytes

    def clear(self) -> None:
        self.packets[:] = [0] * self.size
        self.bytes[:] = [0] * self.size


class Register:
    """A register array of `bitwidth`-bit cells; read/write show cells as unsigned ints."""

    def __init__(self, name: str, size: int, bitwidth: int, signed: bool = False) -> None:
        self.name = name
        self.size = size
        self.bitwidth = bitwidth
        self.signed = signed
        self.values = [0] * size

    def read(self, index: int) -> int:
        _check_index(self.name, index, self.size)
        v = self.values[index]
        return v & ((1 << self.bitwidth) - 1) if self.signed else v

    def write(self, index: int, value: int) -> None:
        _check_index(self.name, index, self.size)
        _check_width(f"{self.name} value", value, self.bitwidth, BadValue)
        if self.signed and value >> (self.bitwidth - 1):
            value -= 1 << self.bitwidth
        self.values[index] = value

    def clear(self) -> None:
        self.values[:] = [0] * self.size
