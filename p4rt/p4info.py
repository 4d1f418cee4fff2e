"""The P4Info index: a P4Info's objects by name and by id, their parts as plain tuples, and
the comparison of two P4Infos.

The controller maps names to ids with it, the embedded target builds and binds its pipeline
with it, scripts/gen_p4info.py and the tests compare P4Infos with it. A comparison is made of
each object's *shape*: what a peer relies on (match fields, parameters, sizes, ...), with the
objects an object refers to named, not numbered, so that two compilations that number the
same program differently can be compared with `ids=False`.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

# The P4Info's repeated fields of objects with a preamble (name and id), indexed here.
KINDS = (
    "tables",
    "actions",
    "counters",
    "direct_counters",
    "registers",
    "digests",
    "controller_packet_metadata",
)
MATCH_KINDS = {
    p4info_pb2.MatchField.EXACT: "exact",
    p4info_pb2.MatchField.LPM: "lpm",
    p4info_pb2.MatchField.TERNARY: "ternary",
    p4info_pb2.MatchField.RANGE: "range",
    p4info_pb2.MatchField.OPTIONAL: "optional",
}
SCOPES = {
    p4info_pb2.ActionRef.TABLE_AND_DEFAULT: "TABLE_AND_DEFAULT",
    p4info_pb2.ActionRef.TABLE_ONLY: "TABLE_ONLY",
    p4info_pb2.ActionRef.DEFAULT_ONLY: "DEFAULT_ONLY",
}
UNITS = {v: k for k, v in p4info_pb2.CounterSpec.Unit.items()}
LABELS = {  # what a message calls an object of each kind
    "tables": "table",
    "actions": "action",
    "counters": "counter",
    "direct_counters": "direct counter",
    "registers": "register",
    "digests": "digest",
    "controller_packet_metadata": "controller header",
}


class Field(NamedTuple):
    """A match field, action parameter or controller header field."""

    id: int
    name: str
    bitwidth: int
    kind: str = ""  # a match field's kind: "exact", "lpm", ...


@dataclass(frozen=True)
class Difference:
    """One aspect of one object that differs; None on a side: the object is not there."""

    kind: str  # one of KINDS
    name: str
    aspect: str  # "" when the object itself is missing on a side
    ours: Any
    theirs: Any


def bitwidth(type_spec: p4info_pb2.P4DataTypeSpec) -> int:
    """The width of a bit<W> or int<W> type (0 for any other type)."""
    bs = type_spec.bitstring
    return bs.bit.bitwidth if bs.HasField("bit") else bs.int.bitwidth


class P4InfoIndex:
    """One P4Info message's objects by (kind, name) and by id."""

    def __init__(self, message: p4info_pb2.P4Info) -> None:
        self.message = message
        self._by_name: dict[tuple[str, str], Any] = {}
        self._by_id: dict[int, Any] = {}
        for kind in KINDS:
            for obj in getattr(message, kind):
                self._by_name[(kind, obj.preamble.name)] = obj
                self._by_id[obj.preamble.id] = obj
        self._direct = {d.direct_table_id: d for d in message.direct_counters}

    @classmethod
    def parse(cls, text: str, allow_unknown_fields: bool = False) -> P4InfoIndex:
        """The index of a text-format P4Info; text_format.ParseError if it is not one."""
        message = text_format.Parse(
            text, p4info_pb2.P4Info(), allow_unknown_field=allow_unknown_fields
        )
        return cls(message)

    @classmethod
    def load(cls, path: Path) -> P4InfoIndex:
        return cls.parse(path.read_text())

    # --- lookups ---

    def find(self, kind: str, name: str) -> Any | None:
        """The object of `kind` (one of KINDS) named `name`, or None."""
        return self._by_name.get((kind, name))

    def by_id(self, obj_id: int) -> Any | None:
        return self._by_id.get(obj_id)

    def objects(self, kind: str) -> list[Any]:
        return list(getattr(self.message, kind))

    def names(self, kind: str) -> list[str]:
        return [name for k, name in self._by_name if k == kind]

    def closest(self, kind: str, name: str) -> str | None:
        """The name of `kind` nearest to `name`, for a "did you mean" hint."""
        near = difflib.get_close_matches(name, self.names(kind), n=1)
        return near[0] if near else None

    def direct_counter_of(self, table_id: int) -> p4info_pb2.DirectCounter | None:
        return self._direct.get(table_id)

    def action_refs(self, table: p4info_pb2.Table) -> list[tuple[p4info_pb2.Action | None, int]]:
        """(action, or None if the P4Info lacks it, scope) of each of a table's actions."""
        return [(self._by_id.get(ref.id), ref.scope) for ref in table.action_refs]

    def digest_widths(self, digest: p4info_pb2.Digest) -> tuple[int, ...] | None:
        """The member widths of a digest whose type is a struct (None otherwise)."""
        struct = self.message.type_info.structs.get(digest.type_spec.struct.name)
        if struct is None:
            return None
        return tuple(bitwidth(m.type_spec) for m in struct.members)

    # --- parts ---

    @staticmethod
    def match_fields(table: p4info_pb2.Table) -> tuple[Field, ...]:
        return tuple(
            Field(m.id, m.name, m.bitwidth, MATCH_KINDS.get(m.match_type, "unsupported"))
            for m in table.match_fields
        )

    @staticmethod
    def params(action: p4info_pb2.Action) -> tuple[Field, ...]:
        return tuple(Field(p.id, p.name, p.bitwidth) for p in action.params)

    @staticmethod
    def metadata(header: p4info_pb2.ControllerPacketMetadata) -> tuple[Field, ...]:
        return tuple(Field(m.id, m.name, m.bitwidth) for m in header.metadata)

    # --- shapes ---

    def _name_of(self, obj_id: int) -> str | None:
        obj = self._by_id.get(obj_id)
        return obj.preamble.name if obj is not None else None

    def shape(self, kind: str, obj: Any) -> dict[str, Any]:
        """What a peer relies on of one object, aspect -> value; referenced objects by name."""
        if kind == "tables":
            fields = self.match_fields(obj)
            direct = self.direct_counter_of(obj.preamble.id)
            return {
                "match fields": fields,
                # a table without key holds its default entry only: its size means nothing
                "size": obj.size if fields else None,
                "actions": {
                    self._name_of(ref.id) or f"{ref.id:#x}": SCOPES.get(ref.scope, ref.scope)
                    for ref in obj.action_refs
                },
                "direct counter": None
                if direct is None
                else (direct.preamble.name, UNITS.get(direct.spec.unit)),
            }
        if kind == "actions":
            return {"params": self.params(obj)}
        if kind == "counters":
            return {"size": obj.size, "unit": UNITS.get(obj.spec.unit)}
        if kind == "direct_counters":
            return {"table": self._name_of(obj.direct_table_id), "unit": UNITS.get(obj.spec.unit)}
        if kind == "registers":
            return {"size": obj.size, "bitwidth": bitwidth(obj.type_spec)}
        if kind == "digests":
            return {"members": self.digest_widths(obj)}
        if kind == "controller_packet_metadata":
            return {"metadata": self.metadata(obj)}
        raise ValueError(f"unknown P4Info kind {kind!r}; one of {KINDS}")


def differences(
    ours: P4InfoIndex,
    theirs: P4InfoIndex,
    kinds: Iterable[str] = KINDS,
    ids: bool = True,
    aspects: Iterable[str] | None = None,
) -> list[Difference]:
    """What differs between two P4Infos, object by object (by name) and aspect by aspect (all
    of `shape`, or only `aspects`), plus each object's id with `ids`. A dict-valued aspect
    (a table's actions) is compared entry by entry, as aspect "<aspect minus s> <key>"."""
    wanted = None if aspects is None else set(aspects)
    out: list[Difference] = []
    for kind in kinds:
        mine = {o.preamble.name: o for o in ours.objects(kind)}
        other = {o.preamble.name: o for o in theirs.objects(kind)}
        for name in sorted(mine.keys() - other.keys()):
            out.append(Difference(kind, name, "", mine[name], None))
        for name in sorted(other.keys() - mine.keys()):
            out.append(Difference(kind, name, "", None, other[name]))
        for name in sorted(mine.keys() & other.keys()):
            a, b = ours.shape(kind, mine[name]), theirs.shape(kind, other[name])
            if ids:
                a["id"], b["id"] = mine[name].preamble.id, other[name].preamble.id
            for aspect in a:
                if wanted is not None and aspect not in wanted:
                    continue
                x, y = a[aspect], b[aspect]
                if isinstance(x, dict) and isinstance(y, dict):
                    item = aspect.removesuffix("s")
                    for k in sorted(x.keys() | y.keys()):
                        if x.get(k) != y.get(k):
                            out.append(Difference(kind, name, f"{item} {k}", x.get(k), y.get(k)))
                elif x != y:
                    out.append(Difference(kind, name, aspect, x, y))
    return out


def _show(value: Any, aspect: str) -> str:
    if aspect == "id":
        return f"{value:#x}"
    if isinstance(value, tuple) and value and all(isinstance(f, Field) for f in value):
        return (
            "["
            + ", ".join(f"{f.name} #{f.id} bit<{f.bitwidth}> {f.kind}".rstrip() for f in value)
            + "]"
        )
    return repr(value)


def explain(d: Difference, ours: str = "here", theirs: str = "there") -> str:
    """One line for a Difference, `theirs` first; `ours`/`theirs` say where each P4Info is
    ("in the P4Info", "on the switch", ...)."""
    what = f"{LABELS[d.kind]} {d.name}" + (f": {d.aspect}" if d.aspect else "")
    if d.theirs is None:
        return f"{what} is missing {theirs}"
    if d.ours is None:
        return f"{what} is missing {ours}"
    return (
        f"{LABELS[d.kind]} {d.name}: {d.aspect} {_show(d.theirs, d.aspect)} {theirs}, "
        f"{_show(d.ours, d.aspect)} {ours}"
    )
