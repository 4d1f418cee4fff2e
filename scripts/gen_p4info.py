#!/usr/bin/env python3
"""Write p4src/hotagg.p4info.txtpb, the P4Info that p4c-bm2-ss 1.2.4.x emits for hotagg.p4.

p4c is not installable on the development machines, so this script is our stand-in for
`p4c-bm2-ss --p4runtime-files X.p4info.txtpb`. It builds the P4Info from the description
below (the P4 objects of p4src/, in declaration order) and follows p4c's serializer
(control-plane/p4RuntimeSerializer.cpp, p4RuntimeArchStandard.h, p4RuntimeSymbolTable.cpp):

- object order: tables and actions in declaration order, direct counters in the order of
  their tables, controller headers in declaration order; fields print in field-number order;
- ids pinned with @id come from p4src/include/ids.p4 (read by contract/names.py); every other id is
  (P4Runtime prefix << 24) | (Jenkins one-at-a-time hash of the full name & 0xffffff), names
  taken in sorted order per object type, collisions resolved by probing the next hash value;
- alias = the shortest dot-separated suffix unique among all P4Runtime symbol names;
- match field, action parameter and packet metadata ids count from 1 in declaration order;
- action refs carry "@defaultonly" plus scope DEFAULT_ONLY; the initial default action and
  its arguments (padded big-endian bytes) are given, const_default_action_id only for a
  const default; v1model tables say idle_timeout_behavior NO_TIMEOUT (the proto default);
- p4c leaves an empty type_info message at the end and starts the file with the
  proto-file/proto-message comment lines.

`make check-p4info` diffs the result against p4c's own output where p4c is installed.

The description (`describe`) is the one hand-written list of the program's P4Runtime objects
in Python: names, ids, sizes and the lookup{i} scheme come from contract/ (which reads them
from p4src/include), and softswitch/schema.py reads the generated P4Info, not this list.

Usage: gen_p4info.py [--check] [--output PATH]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

# Run as a file, the script reads the contract/ of its own checkout (the one whose p4src/ it
# describes), even where the installed hotagg is another checkout's.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from contract.p4files import P4INFO_PATH, ContractError
from p4rt.p4info import P4InfoIndex, differences, explain

PREFIX = {
    "action": p4info_pb2.P4Ids.ACTION,
    "table": p4info_pb2.P4Ids.TABLE,
    "controller_header": p4info_pb2.P4Ids.CONTROLLER_HEADER,
    "counter": p4info_pb2.P4Ids.COUNTER,
    "direct_counter": p4info_pb2.P4Ids.DIRECT_COUNTER,
    "register": p4info_pb2.P4Ids.REGISTER,
    "digest": p4info_pb2.P4Ids.DIGEST,
}
MAX_SHOWN = 10  # differences --check lists
HEADER = "# proto-file: p4/config/v1/p4info.proto\n# proto-message: p4.config.v1.P4Info\n\n"


class P4InfoError(Exception):
    """The description and ids.p4 disagree; the message says where."""


@dataclass(frozen=True)
class Action:
    name: str
    params: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class Table:
    name: str
    keys: tuple[tuple[str, int, str], ...]  # (name, bitwidth, "EXACT" | "LPM")
    actions: tuple[tuple[str, bool], ...]  # (action name, default only)
    default: tuple[str, tuple[int, ...]]  # initial default action and its arguments
    size: int
    direct_counter: str | None = None
    direct_counter_unit: str = "BOTH"
    const_default: bool = False


@dataclass(frozen=True)
class Counter:
    name: str
    size: int
    unit: str = "BOTH"


@dataclass(frozen=True)
class Register:
    name: str
    bitwidth: int
    size: int


@dataclass(frozen=True)
class Digest:
    name: str  # the struct type's name: P4Info digest name and type_info struct key
    fields: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class ControllerHeader:
    name: str  # @controller_header("...") argument: the P4Info name
    type_name: str  # the P4 header type: what p4c hashes for the id
    fields: tuple[tuple[str, int], ...]


@dataclass
class Program:
    tables: list[Table] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    counters: list[Counter] = field(default_factory=list)
    registers: list[Register] = field(default_factory=list)
    controller_headers: list[ControllerHeader] = field(default_factory=list)
    digests: list[Digest] = field(default_factory=list)


def describe() -> Program:
    """The P4Runtime-visible objects of p4src/hotagg.p4, in p4c's (declaration) order."""
    from contract import constants as c  # here, so that a broken P4 file is a one-line error
    from contract import names as n

    prog = Program()
    prog.actions += [
        Action(n.ACTION_IPV4_FORWARD, (("dst_mac", 48), ("port", 9))),
        Action(n.ACTION_SEND_TO_CPU),
        Action(n.ACTION_DROP),
        Action(n.ACTION_SET_JOB, (("job_index", 8), ("slot_base", 32), ("slot_count", 32))),
        Action(n.ACTION_UNKNOWN_JOB),
        Action(n.ACTION_SET_DROP_RATE, (("rate", 32),)),
    ]
    prog.tables += [
        Table(
            n.TABLE_IPV4_LPM,
            keys=(("dst_addr", 32, "LPM"),),
            actions=(
                (n.ACTION_IPV4_FORWARD, False),
                (n.ACTION_SEND_TO_CPU, False),
                (n.ACTION_DROP, False),
            ),
            default=(n.ACTION_DROP, ()),
            size=c.IPV4_LPM_SIZE,
        ),
        Table(
            n.TABLE_JOBS,
            keys=(("job_id", 16, "EXACT"),),
            actions=((n.ACTION_SET_JOB, False), (n.ACTION_UNKNOWN_JOB, True)),
            default=(n.ACTION_UNKNOWN_JOB, ()),
            size=c.MAX_JOBS,
        ),
        Table(
            n.TABLE_DROP_SIM,
            keys=(),
            actions=((n.ACTION_SET_DROP_RATE, False),),
            default=(n.ACTION_SET_DROP_RATE, (0,)),
            size=1,
        ),
    ]
    for i in range(c.MAX_ENTRIES):
        set_slot, miss = n.set_slot_action(i), n.miss_action(i)
        prog.actions += [Action(set_slot, (("offset", 32),)), Action(miss)]
        prog.tables.append(
            Table(
                n.hot_keys_table(i),
                keys=(("job_id", 16, "EXACT"), ("key", 64, "EXACT")),
                actions=((set_slot, False), (miss, True)),
                default=(miss, ()),
                size=c.HOT_KEYS_SIZE,
                direct_counter=n.hits_counter(i),
            )
        )
    # Admission (tenancy.p4), instantiated after the lookups: its objects come last.
    prog.actions += [Action(n.ACTION_ADMIT), Action(n.ACTION_REFUSE)]
    admission = ((n.ACTION_ADMIT, False), (n.ACTION_REFUSE, True))
    prog.tables += [
        Table(
            n.TABLE_WORKER_ADMISSION,
            keys=(
                ("job_id", 16, "EXACT"),
                ("worker_id", 16, "EXACT"),
                ("ingress_port", 9, "EXACT"),
                ("src_addr", 32, "EXACT"),
            ),
            actions=admission,
            default=(n.ACTION_REFUSE, ()),
            size=c.WORKER_ADMISSION_SIZE,
        ),
        Table(
            n.TABLE_PS_ADMISSION,
            keys=(("job_id", 16, "EXACT"), ("ingress_port", 9, "EXACT"), ("src_addr", 32, "EXACT")),
            actions=admission,
            default=(n.ACTION_REFUSE, ()),
            size=c.PS_ADMISSION_SIZE,
        ),
    ]
    # Cold-key sketch (sketch.p4), declared after the lookups.
    prog.actions.append(Action(n.ACTION_SET_SKETCH, (("epoch", 32), ("threshold", 32))))
    prog.tables.append(
        Table(
            n.TABLE_SKETCH_CONFIG,
            keys=(),
            actions=((n.ACTION_SET_SKETCH, False),),
            default=(n.ACTION_SET_SKETCH, (0, 0)),
            size=1,
        )
    )
    # Aggregation at every leaf (leaves.p4), instantiated after the sketch.
    prog.actions += [
        Action(n.ACTION_SET_SERVICE_ADDRESS, (("addr", 32),)),
        Action(n.ACTION_SET_CHAIN_NEXT, (("addr", 32),)),
    ]
    prog.tables += [
        Table(
            n.TABLE_SERVICE_ADDRESS,
            keys=(),
            actions=((n.ACTION_SET_SERVICE_ADDRESS, False),),
            default=(n.ACTION_SET_SERVICE_ADDRESS, (0,)),
            size=1,
        ),
        Table(
            n.TABLE_CHAIN_NEXT,
            keys=(),
            actions=((n.ACTION_SET_CHAIN_NEXT, False),),
            default=(n.ACTION_SET_CHAIN_NEXT, (0,)),
            size=1,
        ),
    ]
    prog.counters.append(Counter(n.COUNTER_STATS, c.STATS_SIZE))
    prog.counters += [Counter(name, c.SKETCH_WIDTH) for name in n.SKETCH_ROW_COUNTERS]
    prog.registers += [
        Register(n.REGISTER_DEDUP_SEQ, 32, c.DEDUP_SIZE),
        Register(n.REGISTER_DEDUP_MASK, 8, c.DEDUP_SIZE),
        Register(n.REGISTER_AGG_VALUE, 32, c.AGG_SIZE),
        Register(n.REGISTER_AGG_ITER, 32, c.AGG_SIZE),
        Register(n.REGISTER_AGG_KEY, 64, c.AGG_SIZE),
        Register(n.REGISTER_CACHE_VALUE, 32, c.NUM_SLOTS),
        Register(n.REGISTER_CACHE_ITER, 32, c.NUM_SLOTS),
        Register(n.REGISTER_CACHE_KEY, 64, c.NUM_SLOTS),
    ]
    prog.registers += [Register(name, 64, c.SKETCH_WIDTH) for name in n.SKETCH_CELL_REGISTERS]
    prog.registers += [
        Register(n.REGISTER_FLUSH_COUNT, 32, c.FLUSH_COUNT_SIZE),
        Register(n.REGISTER_FLUSH_ITER, 32, c.FLUSH_COUNT_SIZE),
        Register(n.REGISTER_COLLECTED_ITER, 32, c.MAX_JOBS),
        Register(n.REGISTER_FLUSHED_ITER, 32, c.MAX_JOBS),
    ]
    prog.digests.append(Digest(n.DIGEST_SKETCH, n.DIGEST_SKETCH_FIELDS))
    prog.controller_headers += [
        ControllerHeader(n.PACKET_IN, "packet_in_header_t", (("ingress_port", 9), ("_pad", 7))),
        ControllerHeader(n.PACKET_OUT, "packet_out_header_t", (("egress_port", 9), ("_pad", 7))),
    ]
    return prog


def jenkins_one_at_a_time(name: str) -> int:
    """The 32-bit hash p4c uses for unpinned ids (p4RuntimeSymbolTable.cpp)."""
    h = 0
    for byte in name.encode():
        h = (h + byte) & 0xFFFFFFFF
        h = (h + (h << 10)) & 0xFFFFFFFF
        h ^= h >> 6
    h = (h + (h << 3)) & 0xFFFFFFFF
    h ^= h >> 11
    return (h + (h << 15)) & 0xFFFFFFFF


def symbols(prog: Program) -> dict[str, list[str]]:
    """Symbol names per object type; controller headers are known by their type name."""
    return {
        "action": [a.name for a in prog.actions],
        "table": [t.name for t in prog.tables],
        "controller_header": [h.type_name for h in prog.controller_headers],
        "counter": [c.name for c in prog.counters],
        "direct_counter": [t.direct_counter for t in prog.tables if t.direct_counter],
        "register": [r.name for r in prog.registers],
        "digest": [d.name for d in prog.digests],
    }


def assign_ids(prog: Program, pinned: dict[str, int]) -> dict[tuple[str, str], int]:
    """(type, name) -> id: pinned ids first, then hashed ids in sorted name order."""
    ids: dict[tuple[str, str], int] = {}
    taken: set[int] = set()
    by_type = symbols(prog)
    known = {name for names in by_type.values() for name in names}
    for name in pinned:
        if name not in known:
            raise P4InfoError(f"ids.p4 pins {name}, which the program does not declare")
    for kind, names in by_type.items():
        for name in names:
            if name in pinned:
                if pinned[name] >> 24 != PREFIX[kind]:
                    raise P4InfoError(f"ids.p4: {name} has the wrong prefix for a {kind}")
                if pinned[name] in taken:
                    raise P4InfoError(f"ids.p4: id {pinned[name]:#x} is used twice")
                ids[kind, name] = pinned[name]
                taken.add(pinned[name])
    for kind, names in by_type.items():
        for name in sorted(n for n in names if n not in pinned):
            value = jenkins_one_at_a_time(name)
            while (PREFIX[kind] << 24) | (value & 0xFFFFFF) in taken:
                value = (value + 1) & 0xFFFFFFFF
            ids[kind, name] = (PREFIX[kind] << 24) | (value & 0xFFFFFF)
            taken.add(ids[kind, name])
    return ids


def aliases(names: list[str]) -> dict[str, str]:
    """Shortest unique dot-separated suffix of each name among all of them."""
    counts: dict[tuple[str, ...], int] = {}
    unique = set(names)
    for name in unique:
        parts = tuple(name.split("."))
        for i in range(len(parts)):
            counts[parts[i:]] = counts.get(parts[i:], 0) + 1
    result = {}
    for name in unique:
        parts = tuple(name.split("."))
        n = 1
        while n < len(parts) and counts[parts[-n:]] > 1:
            n += 1
        result[name] = ".".join(parts[-n:])
    return result


def _preamble(msg: p4info_pb2.Preamble, obj_id: int, name: str, alias: str) -> None:
    msg.id = obj_id
    msg.name = name
    msg.alias = alias


def build(prog: Program, pinned: dict[str, int]) -> p4info_pb2.P4Info:
    """The P4Info message p4c would produce for `prog`."""
    ids = assign_ids(prog, pinned)
    alias = aliases([n for names in symbols(prog).values() for n in names])
    actions = {a.name: a for a in prog.actions}
    info = p4info_pb2.P4Info()
    info.pkg_info.arch = "v1model"
    for t in prog.tables:
        msg = info.tables.add()
        _preamble(msg.preamble, ids["table", t.name], t.name, alias[t.name])
        for i, (key, width, kind) in enumerate(t.keys, start=1):
            mf = msg.match_fields.add(id=i, name=key, bitwidth=width)
            mf.match_type = p4info_pb2.MatchField.MatchType.Value(kind)
        for name, default_only in t.actions:
            ref = msg.action_refs.add(id=ids["action", name])
            if default_only:
                ref.annotations.append("@defaultonly")
                ref.scope = p4info_pb2.ActionRef.DEFAULT_ONLY
        default_name, args = t.default
        default_id = ids["action", default_name]
        if t.const_default:
            msg.const_default_action_id = default_id
        msg.initial_default_action.action_id = default_id
        params = actions[default_name].params
        if len(args) != len(params):
            raise P4InfoError(f"{t.name}: default {default_name} needs {len(params)} arguments")
        for i, (value, (_, width)) in enumerate(zip(args, params), start=1):
            arg = msg.initial_default_action.arguments.add(param_id=i)
            arg.value = value.to_bytes((width + 7) // 8, "big")
        if t.direct_counter:
            msg.direct_resource_ids.append(ids["direct_counter", t.direct_counter])
        msg.size = t.size
    for a in prog.actions:
        msg = info.actions.add()
        _preamble(msg.preamble, ids["action", a.name], a.name, alias[a.name])
        for i, (param, width) in enumerate(a.params, start=1):
            msg.params.add(id=i, name=param, bitwidth=width)
    for c in prog.counters:
        msg = info.counters.add(size=c.size)
        _preamble(msg.preamble, ids["counter", c.name], c.name, alias[c.name])
        msg.spec.unit = p4info_pb2.CounterSpec.Unit.Value(c.unit)
    for t in prog.tables:
        if t.direct_counter:
            msg = info.direct_counters.add(direct_table_id=ids["table", t.name])
            name = t.direct_counter
            _preamble(msg.preamble, ids["direct_counter", name], name, alias[name])
            msg.spec.unit = p4info_pb2.CounterSpec.Unit.Value(t.direct_counter_unit)
    for h in prog.controller_headers:
        msg = info.controller_packet_metadata.add()
        _preamble(msg.preamble, ids["controller_header", h.type_name], h.name, h.name)
        msg.preamble.annotations.append(f'@controller_header("{h.name}")')
        for i, (name, width) in enumerate(h.fields, start=1):
            msg.metadata.add(id=i, name=name, bitwidth=width)
    for r in prog.registers:
        msg = info.registers.add(size=r.size)
        _preamble(msg.preamble, ids["register", r.name], r.name, alias[r.name])
        msg.type_spec.bitstring.bit.bitwidth = r.bitwidth
    for d in prog.digests:
        msg = info.digests.add()
        _preamble(msg.preamble, ids["digest", d.name], d.name, alias[d.name])
        msg.type_spec.struct.name = d.name
    info.type_info.SetInParent()  # p4c always leaves a type_info, empty without digests
    for d in prog.digests:
        struct = info.type_info.structs[d.name]
        for name, width in d.fields:
            struct.members.add(name=name).type_spec.bitstring.bit.bitwidth = width
    return info


def render() -> str:
    """The text of p4src/hotagg.p4info.txtpb."""
    from contract.names import PINNED_IDS  # here, as in describe()

    info = build(describe(), PINNED_IDS)
    return HEADER + text_format.MessageToString(info)


def changes(generated: str, current: str, path: Path) -> list[str]:
    """What differs between the generated P4Info and the file's, object by object."""
    try:
        theirs = P4InfoIndex.parse(current)
    except text_format.ParseError as exc:
        return [f"{path} is not a text-format P4Info: {exc}"]
    found = differences(P4InfoIndex.parse(generated), theirs)
    lines = [explain(d, ours="generated", theirs=f"in {path.name}") for d in found]
    return lines or ["the same objects; the order or the formatting differs"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=P4INFO_PATH, help="file to write")
    parser.add_argument(
        "--check", action="store_true", help="only compare with --output; exit 1 if it differs"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        text = render()
    except (P4InfoError, ContractError) as exc:
        print(f"gen_p4info: {exc}", file=sys.stderr)
        return 2
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"gen_p4info: {args.output} is out of date; run {sys.argv[0]}", file=sys.stderr)
            for line in changes(text, current, args.output)[:MAX_SHOWN]:
                print(f"  {line}", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
