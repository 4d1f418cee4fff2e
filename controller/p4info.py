"""P4Info lookups (name <-> id) and table entries from names and ints, like p4runtime-shell's
context.py.

Everything above this module speaks P4Info full names ("HotaggIngress.jobs") and Python ints;
this module checks them (BadInput, UnknownName) and turns them into P4Runtime table entries,
through the one P4Info index and the one TableEntry encoder of p4rt/, and entries read back
into names and ints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

from google.protobuf import text_format
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2

from controller.errors import BadInput, PipelineMismatch, UnknownName
from p4rt import bytestrings, wire
from p4rt.p4info import Field, P4InfoIndex, differences, explain

# An exact match value is an int; an lpm match value is (value, prefix_len).
MatchValue = Union[int, tuple[int, int]]

# What must agree between our P4Info and the switch's for our writes to be right.
_CHECKED_KINDS = ("tables", "actions", "counters", "direct_counters", "controller_packet_metadata")
_CHECKED_ASPECTS = ("id", "match fields", "params", "metadata")


def check(value: object, bitwidth: int, what: str = "value") -> int:
    """`value` if it is an int that fits in `bitwidth` bits, else BadInput."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInput(f"{what}: expected an integer, got {value!r}")
    if value < 0 or value >= 1 << bitwidth:
        raise BadInput(f"{what}: {value} does not fit in {bitwidth} bits")
    return value


def encode(value: int, bitwidth: int, what: str = "value") -> bytes:
    """`value` as the canonical byte string of a `bitwidth`-bit field."""
    return bytestrings.encode(check(value, bitwidth, what))


def decode(data: bytes) -> int:
    return int.from_bytes(data, "big")


@dataclass
class Entry:
    """A decoded table entry (names and ints); counters are filled when they were read."""

    table: str
    match: dict[str, MatchValue]
    action: str
    params: dict[str, int]
    is_default: bool = False
    metadata: bytes = b""  # the controller's own, stored with the entry
    packets: int = 0
    bytes: int = 0


class P4Info(P4InfoIndex):
    """The P4Info index, with the controller's errors and its table entry builders."""

    def __init__(self, message: p4info_pb2.P4Info) -> None:
        super().__init__(message)
        self._encoders: dict[tuple[str, str | None], EntryEncoder] = {}

    @classmethod
    def from_file(cls, path: str | Path) -> P4Info:
        try:
            text = Path(path).read_text()
        except OSError as e:
            raise BadInput(f"cannot read P4Info {path}: {e.strerror}") from None
        try:
            return cls(P4InfoIndex.parse(text, allow_unknown_fields=True).message)
        except text_format.ParseError as e:
            raise BadInput(f"{path} is not a text-format P4Info: {e}") from None

    # --- lookups ---

    def _get(self, kind: str, name: str) -> Any:  # one of several P4Info message types
        obj = self.find(kind, name)
        if obj is None:
            near = self.closest(kind, name)
            hint = f"; did you mean {near!r}?" if near else ""
            raise UnknownName(f"the P4Info has no {kind[:-1]} named {name!r}{hint}")
        return obj

    def table(self, name: str) -> p4info_pb2.Table:
        return self._get("tables", name)

    def action(self, name: str) -> p4info_pb2.Action:
        return self._get("actions", name)

    def counter(self, name: str) -> p4info_pb2.Counter:
        return self._get("counters", name)

    def direct_counter(self, name: str) -> p4info_pb2.DirectCounter:
        return self._get("direct_counters", name)

    def packet_metadata(self, name: str) -> p4info_pb2.ControllerPacketMetadata:
        return self._get("controller_packet_metadata", name)

    def table_id(self, name: str) -> int:
        return self.table(name).preamble.id

    def action_id(self, name: str) -> int:
        return self.action(name).preamble.id

    def match_field_id(self, table: str, field: str) -> int:
        for mf in self.match_fields(self.table(table)):
            if mf.name == field:
                return mf.id
        raise UnknownName(f"table {table} has no match field {field}")

    def counter_id(self, name: str) -> int:
        return self.counter(name).preamble.id

    def direct_counter_id(self, name: str) -> int:
        return self.direct_counter(name).preamble.id

    # --- messages ---

    def encoder(self, table: str, action: str | None = None) -> EntryEncoder:
        """The (cached) encoder of `table`'s entries with `action` (None: match only)."""
        enc = self._encoders.get((table, action))
        if enc is None:
            enc = self._encoders[(table, action)] = EntryEncoder(self, table, action)
        return enc

    def table_entry(
        self,
        table: str,
        match: Mapping[str, MatchValue],
        action: str | None = None,
        params: Mapping[str, int] | None = None,
    ) -> p4runtime_pb2.TableEntry:
        """A TableEntry message for a match entry (see `default_entry` for default actions).
        An lpm field may be left out: it is then a /0 wildcard."""
        enc = self.encoder(table, action)
        names = [f.name for f in enc.fields]
        unknown = set(match) - set(names)
        if unknown:
            raise BadInput(f"{table} has no match field {sorted(unknown)[0]!r}")
        values: list[MatchValue] = []
        for f in enc.fields:
            if f.name in match:
                values.append(match[f.name])
            elif f.kind == "lpm":
                values.append((0, 0))
            else:
                raise BadInput(f"{table}: match field {f.name!r} is missing")
        data = enc(values, enc.param_values(params or {}))
        return p4runtime_pb2.TableEntry.FromString(data)

    def wildcard(self, table: str, counters: bool = False) -> p4runtime_pb2.TableEntry:
        """A read request for every entry of `table` (with their direct counters if asked)."""
        entry = p4runtime_pb2.TableEntry(table_id=self.table_id(table))
        if counters:
            entry.counter_data.SetInParent()
        return entry

    def default_entry(
        self, table: str, action: str | None = None, params: Mapping[str, int] | None = None
    ) -> p4runtime_pb2.TableEntry:
        """The default-action entry of `table` (for MODIFY, or for a read without action)."""
        if action is None:
            return p4runtime_pb2.TableEntry(table_id=self.table_id(table), is_default_action=True)
        enc = self.encoder(table, action)
        data = enc.default(enc.param_values(params or {}))
        return p4runtime_pb2.TableEntry.FromString(data)

    def decode_entry(self, entry: wire.RawEntry | p4runtime_pb2.TableEntry) -> Entry:
        """Names and ints of a table entry read back (as bytes decoded by p4rt.wire, or as a
        protobuf message)."""
        raw = entry if isinstance(entry, wire.RawEntry) else wire.raw_entry(entry)
        t = self.by_id(raw.table_id)
        if not isinstance(t, p4info_pb2.Table):
            raise PipelineMismatch(f"switch returned an entry of unknown table {raw.table_id:#x}")
        fields = {mf.id: mf for mf in self.match_fields(t)}
        match: dict[str, MatchValue] = {}
        for field_id, kind, value, plen in raw.matches:
            mf = fields[field_id]
            match[mf.name] = (decode(value), plen) if kind == "lpm" else decode(value)
        for mf in fields.values():  # an omitted lpm field is /0
            if mf.name not in match and mf.kind == "lpm":
                match[mf.name] = (0, 0)
        action, params = "", {}
        if isinstance(raw.action, tuple):
            action_id, values = raw.action
            a = self.by_id(action_id)
            if not isinstance(a, p4info_pb2.Action):
                raise PipelineMismatch(f"switch returned an entry of unknown action {action_id:#x}")
            action = a.preamble.name
            names = {p.id: p.name for p in a.params}
            params = {names[pid]: decode(v) for pid, v in values}
        packets, nbytes = raw.counters or (0, 0)
        return Entry(
            table=t.preamble.name,
            match=match,
            action=action,
            params=params,
            is_default=raw.is_default,
            packets=packets,
            bytes=nbytes,
            metadata=raw.metadata,
        )

    def mismatches(self, other: P4InfoIndex) -> list[str]:
        """Differences in names, ids and widths that would make our writes wrong."""
        found = differences(self, other, _CHECKED_KINDS, ids=True, aspects=_CHECKED_ASPECTS)
        return [explain(d, theirs="on the switch") for d in found if d.ours is not None]


class EntryEncoder:
    """Encodes entries of one table (with one action) straight to TableEntry wire bytes (the
    TableEncoder of p4rt/wire.py), checking each value against its P4Info width first."""

    def __init__(self, p4info: P4Info, table: str, action: str | None = None) -> None:
        t = p4info.table(table)
        self.table = table
        self.fields = p4info.match_fields(t)
        for f in self.fields:
            if f.kind not in ("exact", "lpm"):
                raise BadInput(f"{table} field {f.name}: match kind {f.kind} is not supported")
        self.action = action
        self.params: tuple[Field, ...] = ()
        actions = {}
        if action is not None:
            a = p4info.action(action)
            self.params = p4info.params(a)
            actions[action] = (a.preamble.id, [p.id for p in self.params])
        positions = [(i, f.kind, f.id) for i, f in enumerate(self.fields)]
        self._encoder = wire.TableEncoder(t.preamble.id, positions, actions)

    def match_values(self, match: Sequence[MatchValue]) -> list[MatchValue]:
        """`match` (one value per field in P4Info order; an lpm field as (value, prefix
        length) or a plain int for /width) checked; lpm fields as (value, prefix length)."""
        if len(match) != len(self.fields):
            raise BadInput(f"{self.table}: {len(self.fields)} match values expected")
        out: list[MatchValue] = []
        for f, value in zip(self.fields, match):
            what = f"{self.table} field {f.name}"
            if f.kind != "lpm":
                out.append(check(value, f.bitwidth, what))
                continue
            prefix, plen = value if isinstance(value, tuple) else (value, f.bitwidth)
            if not 0 <= plen <= f.bitwidth:
                raise BadInput(f"{what}: prefix length {plen} not in 0..{f.bitwidth}")
            check(prefix, f.bitwidth, what)
            if plen and prefix & ~(((1 << plen) - 1) << (f.bitwidth - plen)):
                raise BadInput(f"{what}: {prefix:#x}/{plen} has bits set beyond the prefix")
            out.append((prefix, plen))  # /0 is a don't-care: the encoder leaves it out
        return out

    def param_values(self, params: Mapping[str, int]) -> list[int]:
        """The action's parameters by name, in P4Info order."""
        declared = [p.name for p in self.params]
        if set(params) != set(declared):
            raise BadInput(
                f"action {self.action} takes params {sorted(declared)}, got {sorted(params)}"
            )
        return [params[name] for name in declared]

    def _params(self, params: Sequence[int]) -> list[int]:
        if len(params) != len(self.params):
            raise BadInput(f"action {self.action} takes {len(self.params)} params")
        return [
            check(v, p.bitwidth, f"{self.action} param {p.name}")
            for p, v in zip(self.params, params)
        ]

    def __call__(self, match: Sequence[MatchValue], params: Sequence[int] = ()) -> bytes:
        """TableEntry bytes; `match` has one value per field in P4Info order, `params` one
        per action param (none without an action)."""
        values = self.match_values(match)
        return self._encoder.entry(values, self.action, self._params(params))

    def default(self, params: Sequence[int]) -> bytes:
        """The default entry's TableEntry bytes, with this encoder's action."""
        if self.action is None:
            raise BadInput(f"{self.table}: a default entry needs an action")
        return self._encoder.default_entry(self.action, self._params(params))
