"""P4Info lookups (name <-> id) and value encoding, like p4runtime-shell's context.py.

Everything above this module speaks P4Info full names ("HotaggIngress.jobs") and Python ints;
this module turns them into P4Runtime messages with canonical byte strings (P4Runtime spec
section 8.4: no leading zero bytes, zero is one zero byte) and back.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from google.protobuf import text_format
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2

from controller import wire
from controller.errors import BadInput, PipelineMismatch, UnknownName

# An exact match value is an int; an lpm match value is (value, prefix_len).
MatchValue = Union[int, tuple[int, int]]

_KINDS = ("tables", "actions", "counters", "direct_counters", "controller_packet_metadata")


def encode(value: int, bitwidth: int, what: str = "value") -> bytes:
    """`value` as the canonical byte string of a `bitwidth`-bit field."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInput(f"{what}: expected an integer, got {value!r}")
    if value < 0 or value >= 1 << bitwidth:
        raise BadInput(f"{what}: {value} does not fit in {bitwidth} bits")
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


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
    packets: int = 0
    bytes: int = 0
    extra: dict[str, object] = field(default_factory=dict)


class P4Info:
    """Indexes one P4Info message by name and by id."""

    def __init__(self, message: p4info_pb2.P4Info) -> None:
        self.message = message
        self._by_name: dict[tuple[str, str], object] = {}
        self._by_id: dict[int, object] = {}
        for kind in _KINDS:
            for obj in getattr(message, kind):
                self._by_name[(kind, obj.preamble.name)] = obj
                self._by_id[obj.preamble.id] = obj

    @classmethod
    def from_file(cls, path: str | Path) -> P4Info:
        try:
            text = Path(path).read_text()
        except OSError as e:
            raise BadInput(f"cannot read P4Info {path}: {e.strerror}") from None
        message = p4info_pb2.P4Info()
        try:
            text_format.Parse(text, message, allow_unknown_field=True)
        except text_format.ParseError as e:
            raise BadInput(f"{path} is not a text-format P4Info: {e}") from None
        return cls(message)

    # --- lookups ---

    def _get(self, kind: str, name: str) -> Any:  # one of several P4Info message types
        try:
            return self._by_name[(kind, name)]
        except KeyError:
            names = [n for k, n in self._by_name if k == kind]
            near = difflib.get_close_matches(name, names, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise UnknownName(f"the P4Info has no {kind[:-1]} named {name!r}{hint}") from None

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

    def has(self, kind: str, name: str) -> bool:
        return (kind, name) in self._by_name

    def name_of(self, obj_id: int) -> str:
        try:
            return self._by_id[obj_id].preamble.name
        except KeyError:
            raise UnknownName(f"the P4Info has no object with id {obj_id:#x}") from None

    def table_id(self, name: str) -> int:
        return self.table(name).preamble.id

    def action_id(self, name: str) -> int:
        return self.action(name).preamble.id

    def match_field_id(self, table: str, field: str) -> int:
        for mf in self.table(table).match_fields:
            if mf.name == field:
                return mf.id
        raise UnknownName(f"table {table} has no match field {field}")

    def counter_id(self, name: str) -> int:
        return self.counter(name).preamble.id

    def direct_counter_id(self, name: str) -> int:
        return self.direct_counter(name).preamble.id

    # --- messages ---

    def table_entry(
        self,
        table: str,
        match: Mapping[str, MatchValue],
        action: str | None = None,
        params: Mapping[str, int] | None = None,
    ) -> p4runtime_pb2.TableEntry:
        """A TableEntry message for a match entry (see `default_entry` for default actions)."""
        t = self.table(table)
        entry = p4runtime_pb2.TableEntry(table_id=t.preamble.id)
        fields = {mf.name: mf for mf in t.match_fields}
        unknown = set(match) - set(fields)
        if unknown:
            raise BadInput(f"{table} has no match field {sorted(unknown)[0]!r}")
        missing = [n for n, mf in fields.items() if n not in match and mf.match_type != mf.LPM]
        if missing:
            raise BadInput(f"{table}: match field {missing[0]!r} is missing")
        for name, value in match.items():
            mf = fields[name]
            what = f"{table} field {name}"
            if mf.match_type == p4info_pb2.MatchField.LPM:
                prefix, plen = value if isinstance(value, tuple) else (value, mf.bitwidth)
                if not 0 <= plen <= mf.bitwidth:
                    raise BadInput(f"{what}: prefix length {plen} not in 0..{mf.bitwidth}")
                if plen == 0:
                    continue  # a /0 lpm field is a don't-care and must be omitted (spec 9.1.1)
                mask = ((1 << plen) - 1) << (mf.bitwidth - plen)
                if isinstance(prefix, int) and prefix & ~mask:
                    raise BadInput(f"{what}: {prefix:#x}/{plen} has bits set beyond the prefix")
                m = entry.match.add(field_id=mf.id)
                m.lpm.value = encode(prefix, mf.bitwidth, what)
                m.lpm.prefix_len = plen
            elif mf.match_type == p4info_pb2.MatchField.EXACT:
                m = entry.match.add(field_id=mf.id)
                m.exact.value = encode(value, mf.bitwidth, what)  # type: ignore[arg-type]
            else:
                raise BadInput(f"{what}: match kind {mf.match_type} is not supported")
        if action is not None:
            self._fill_action(entry.action.action, action, params or {})
        return entry

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
        entry = p4runtime_pb2.TableEntry(table_id=self.table_id(table), is_default_action=True)
        if action is not None:
            self._fill_action(entry.action.action, action, params or {})
        return entry

    def _fill_action(
        self, msg: p4runtime_pb2.Action, action: str, params: Mapping[str, int]
    ) -> None:
        a = self.action(action)
        msg.action_id = a.preamble.id
        declared = {p.name for p in a.params}
        if set(params) != declared:
            raise BadInput(f"action {action} takes params {sorted(declared)}, got {sorted(params)}")
        for p in a.params:
            msg.params.add(
                param_id=p.id, value=encode(params[p.name], p.bitwidth, f"{action} param {p.name}")
            )

    def decode_entry(self, entry: p4runtime_pb2.TableEntry) -> Entry:
        t = self._by_id.get(entry.table_id)
        if t is None:
            raise PipelineMismatch(f"switch returned an entry of unknown table {entry.table_id:#x}")
        fields = {mf.id: mf for mf in t.match_fields}
        match: dict[str, MatchValue] = {}
        for m in entry.match:
            mf = fields[m.field_id]
            if m.HasField("lpm"):
                match[mf.name] = (decode(m.lpm.value), m.lpm.prefix_len)
            else:
                match[mf.name] = decode(m.exact.value)
        for mf in t.match_fields:  # an omitted lpm field is /0
            if mf.name not in match and mf.match_type == p4info_pb2.MatchField.LPM:
                match[mf.name] = (0, 0)
        action, params = "", {}
        if entry.HasField("action"):
            a = self._by_id[entry.action.action.action_id]
            action = a.preamble.name
            names = {p.id: p.name for p in a.params}
            params = {names[p.param_id]: decode(p.value) for p in entry.action.action.params}
        return Entry(
            table=t.preamble.name,
            match=match,
            action=action,
            params=params,
            is_default=entry.is_default_action,
            packets=entry.counter_data.packet_count,
            bytes=entry.counter_data.byte_count,
        )

    def encoder(self, table: str, action: str | None = None) -> EntryEncoder:
        return EntryEncoder(self, table, action)

    def mismatches(self, other: P4Info) -> list[str]:
        """Differences in names, ids and widths that would make our writes wrong."""
        out = []
        for kind, name in sorted(self._by_name):
            mine = self._by_name[(kind, name)]
            theirs = other._by_name.get((kind, name))
            if theirs is None:
                out.append(f"the switch's P4Info has no {kind[:-1]} {name}")
            elif mine.preamble.id != theirs.preamble.id:
                out.append(f"{name}: id {mine.preamble.id:#x} here, {theirs.preamble.id:#x} there")
            elif kind == "tables" and _fields(mine) != _fields(theirs):
                out.append(f"{name}: match fields differ")
            elif kind == "actions" and _params(mine) != _params(theirs):
                out.append(f"{name}: action params differ")
        return out


class EntryEncoder:
    """Encodes entries of one table (with one action) straight to TableEntry wire bytes, for
    bulk writes (see controller/wire.py); the same checks and bytes as `P4Info.table_entry`.
    """

    def __init__(self, p4info: P4Info, table: str, action: str | None = None) -> None:
        t = p4info.table(table)
        self.table = table
        self.table_id = t.preamble.id
        self.fields = [(mf.id, mf.name, mf.bitwidth, mf.match_type) for mf in t.match_fields]
        self.action_id = 0
        self.params: list[tuple[int, str, int]] = []
        if action is not None:
            a = p4info.action(action)
            self.action = action
            self.action_id = a.preamble.id
            self.params = [(p.id, p.name, p.bitwidth) for p in a.params]

    def __call__(self, match: Sequence[MatchValue], params: Sequence[int] = ()) -> bytes:
        """`match` has one value per field in P4Info order; `params` one per action param."""
        if len(match) != len(self.fields):
            raise BadInput(f"{self.table}: {len(self.fields)} match values expected")
        out = []
        for (fid, name, width, kind), value in zip(self.fields, match):
            what = f"{self.table} field {name}"
            if kind == p4info_pb2.MatchField.LPM:
                prefix, plen = value if isinstance(value, tuple) else (value, width)
                if not 0 <= plen <= width:
                    raise BadInput(f"{what}: prefix length {plen} not in 0..{width}")
                if plen:
                    if prefix & ~(((1 << plen) - 1) << (width - plen)):
                        raise BadInput(f"{what}: {prefix:#x}/{plen} has bits set past the prefix")
                    out.append(wire.lpm_match(fid, encode(prefix, width, what), plen))
            else:
                out.append(wire.exact_match(fid, encode(value, width, what)))  # type: ignore[arg-type]
        action = b""
        if self.action_id:
            if len(params) != len(self.params):
                raise BadInput(f"action {self.action} takes {len(self.params)} params")
            action = wire.table_action(
                self.action_id,
                [
                    (pid, encode(v, w, f"{self.action} param {n}"))
                    for (pid, n, w), v in zip(self.params, params)
                ],
            )
        return wire.table_entry(self.table_id, b"".join(out), action)


def _fields(t: p4info_pb2.Table) -> list[tuple[int, str, int, int]]:
    return [(m.id, m.name, m.bitwidth, m.match_type) for m in t.match_fields]


def _params(a: p4info_pb2.Action) -> list[tuple[int, str, int]]:
    return [(p.id, p.name, p.bitwidth) for p in a.params]
