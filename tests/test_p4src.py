"""The P4 program's ids, its declarations and the committed P4Info agree with each other.

Pure tests, without p4c: declarations are read from the .p4 text, constants and pinned ids
with the contract's own readers (contract/p4files.py), the P4Info with protobuf. They catch
an @id on the wrong object, a P4Info that no longer describes the program, a stale committed
P4Info, and the Scapy layers drifting from the P4 headers. What the program does is checked
on the real compiler and switch (tests/test_p4c.py, test_packets.py, test_differential.py).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2
from scapy.fields import PacketListField

from contract import layers as protocol
from contract.p4files import read_consts, read_pinned_ids

REPO = Path(__file__).resolve().parent.parent
P4SRC = REPO / "p4src"
INCLUDE = P4SRC / "include"
P4INFO_PATH = P4SRC / "hotagg.p4info.txtpb"
GEN = REPO / "scripts" / "gen_p4info.py"
INGRESS = "HotaggIngress"
PREFIX = {"action": 0x01, "table": 0x02, "counter": 0x12, "direct_counter": 0x13,
          "register": 0x16, "controller_header": 0x04}  # fmt: skip


def strip_comments(text: str) -> str:
    return re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", "", text, flags=re.S))


def strip_macros(text: str) -> str:
    """Drop preprocessor lines, including continued #define bodies."""
    return re.sub(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", "", text, flags=re.M)


def source(name: str) -> str:
    return strip_macros(strip_comments((INCLUDE / name).read_text()))


def consts(name: str) -> dict[str, int]:
    """The consts of one include file, read by the contract's own reader."""
    return read_consts(INCLUDE / name)


def braced(text: str, start: int) -> str:
    """The text between the '{' at or after `start` and its matching '}'."""
    open_at = text.index("{", start)
    depth = 0
    for i in range(open_at, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[open_at + 1 : i]
    raise AssertionError("unbalanced braces")


TYPEDEFS = {
    name: bits for bits, name in re.findall(r"typedef\s+(bit<\d+>)\s+(\w+)", source("types.p4"))
}


def width(p4type: str) -> int:
    p4type = TYPEDEFS.get(p4type, p4type)
    match = re.fullmatch(r"bit<(\d+)>", p4type)
    assert match, f"no width for {p4type}"
    return int(match.group(1))


def fields(body: str) -> list[tuple[str, str]]:
    return re.findall(r"([\w<>]+(?:\[\w+\])?)\s+(\w+)\s*;", body)


def layout() -> tuple[dict[str, list[tuple[str, str]]], dict[str, str]]:
    """Header types -> [(type, field)], and headers_t field -> header type."""
    text = source("headers.p4")
    headers = {
        m.group(1): fields(braced(text, m.end())) for m in re.finditer(r"header\s+(\w+)", text)
    }
    struct = re.search(r"struct\s+headers_t", text)
    return headers, {f: t for t, f in fields(braced(text, struct.end()))}


def key_width(expr: str, params: dict[str, str]) -> int:
    """Width of a table key: a control parameter, or a path through hdr/meta, whose types
    are the headers and structs of headers.p4."""
    text = source("headers.p4")
    types = {
        m[2]: {f: t for t, f in fields(braced(text, m.end()))}
        for m in re.finditer(r"(header|struct)\s+(\w+)", text)
    }
    root, *path = expr.split(".")
    typ = {"hdr": "headers_t", "meta": "local_metadata_t", **params}[root]
    for member in path:
        typ = types[typ][member]
    return width(typ)


ANNOTATIONS = r"(?P<annots>(?:@\w+(?:\([^)]*\))?\s*)*)"


def declarations(text: str, prefix: str, params: dict[str, str]) -> list[tuple[str, str, dict]]:
    """(kind, full name, details) in declaration order, control instances expanded.

    An object's P4Info name is prefix.name, or X for @name(".X") (p4c's absolute names);
    @hidden objects are not in P4Info.
    """
    pattern = re.compile(
        ANNOTATIONS + r"(?:"
        r"action\s+(?P<action>\w+)\s*\((?P<params>[^)]*)\)|table\s+(?P<table>\w+)\s*\{|"
        r"counter\((?P<csize>\w+),\s*CounterType\.(?P<cunit>\w+)\)\s+(?P<counter>\w+);|"
        r"direct_counter\(CounterType\.(?P<dunit>\w+)\)\s+(?P<direct>\w+);|"
        r"register<(?P<rtype>\w+)>\((?P<rsize>\w+)\)\s+(?P<register>\w+);|"
        r"(?P<control>[A-Z]\w*)\([^)]*\)\s+(?P<instance>\w+);)"
    )
    out = []
    for m in pattern.finditer(text):
        g = {k: v for k, v in m.groupdict().items() if v}
        annots = g.get("annots", "")
        if "@hidden" in annots:
            continue
        pinned = {"id_macro": (re.search(r"@id\((\w+)\)", annots) or [None, None])[1]}
        absolute = re.search(r'@name\("\.([\w.]+)"\)', annots)

        def full(name: str, absolute=absolute) -> str:
            return absolute[1] if absolute else f"{prefix}.{name}"

        if "action" in g:
            ps = [p.split() for p in g.get("params", "").split(",") if p.strip()]
            out.append(("action", full(g["action"]), {**pinned, "params": ps}))
        elif "table" in g:
            out.append(("table", full(g["table"]), {**pinned, **table(text, m, params)}))
        elif "counter" in g:
            out.append(("counter", full(g["counter"]), {**pinned, **g}))
        elif "direct" in g:
            out.append(("direct_counter", full(g["direct"]), {**pinned, **g}))
        elif "register" in g:
            out.append(("register", full(g["register"]), {**pinned, **g}))
        else:
            body, control_params = control(g["control"])
            out += declarations(body, f"{prefix}.{g['instance']}", control_params)
    return out


def control_sources() -> str:
    """Comment- and macro-free text of every include file."""
    return "".join(source(p.name) for p in sorted(INCLUDE.glob("*.p4")))


def control(name: str, text: str | None = None) -> tuple[str, dict[str, str]]:
    """The body of `control name` and its parameters (name -> type)."""
    text = text if text is not None else control_sources()
    m = re.search(rf"control\s+{name}\s*\(([^)]*)\)(?:\s*\([^)]*\))?", text)
    assert m, f"no control {name}"
    params = {name: typ for _, typ, name in re.findall(r"(in|out|inout)\s+(\w+)\s+(\w+)", m[1])}
    return braced(text, m.end()), params


def table(text: str, m: re.Match, params: dict[str, str]) -> dict:
    body = braced(text, m.start("table"))
    keys = re.findall(r"([\w.\[\]]+)\s*:\s*(\w+)\s*@name\(\"(\w+)\"\)", body)
    default = re.search(r"(const\s+)?default_action\s*=\s*(\w+)\(([^)]*)\)", body)
    return {
        "keys": [(name, key_width(expr, params), kind.upper()) for expr, kind, name in keys],
        "actions": re.findall(r"(@defaultonly\s+)?(\w+)\s*;", braced(body, body.index("actions"))),
        "default": (default[2], [a.strip() for a in default[3].split(",") if a.strip()]),
        "const_default": bool(default[1]),
        "size": re.search(r"size\s*=\s*(\w+)\s*;", body)[1],
        "counters": (re.search(r"counters\s*=\s*(\w+)\s*;", body) or [None, None])[1],
    }


def program() -> list[tuple[str, str, dict]]:
    """Every P4Runtime object of HotaggIngress, its control instances expanded."""
    main = strip_macros(strip_comments((P4SRC / "hotagg.p4").read_text()))
    body, _ = control(INGRESS, main)
    return declarations(body[: body.index("apply {")], INGRESS, {})


def controller_headers() -> dict[str, str]:
    """@controller_header name -> header type (the type name is what p4c hashes)."""
    pattern = r"@controller_header\(\"(\w+)\"\)\s*header\s+(\w+)"
    return dict(re.findall(pattern, source("headers.p4")))


def number(token: str) -> int:
    values = {**consts("sizes.p4"), **consts("types.p4")}
    return values[token] if token in values else int(token, 0)


@pytest.fixture(scope="module")
def p4info() -> p4info_pb2.P4Info:
    return text_format.Parse(P4INFO_PATH.read_text(), p4info_pb2.P4Info())


@pytest.fixture(scope="module")
def by_name(p4info) -> dict[tuple[str, str], object]:
    objs = {}
    for kind, msgs in [("table", p4info.tables), ("action", p4info.actions),
                       ("counter", p4info.counters), ("direct_counter", p4info.direct_counters),
                       ("register", p4info.registers)]:  # fmt: skip
        objs.update({(kind, m.preamble.name): m for m in msgs})
    return objs


def pinned_ids() -> dict[str, tuple[int, str]]:
    """HOTAGG_ID_<KIND>_<NAME> -> (id, P4Info name), read by the contract's own reader."""
    return {f"HOTAGG_ID_{macro}": tuple(pinned) for macro, pinned in read_pinned_ids().items()}


def jenkins(name: str) -> int:
    h = 0
    for b in name.encode():
        h = (h + b) & 0xFFFFFFFF
        h = (h + (h << 10)) & 0xFFFFFFFF
        h ^= h >> 6
    h = (h + (h << 3)) & 0xFFFFFFFF
    h ^= h >> 11
    return (h + (h << 15)) & 0xFFFFFFFF


# ---- derived sizes and the header layout (contract/constants.py reads the values) ----


def test_index_layouts_follow_sizes():
    s = consts("sizes.p4")
    assert s["NUM_SLOTS"] == 1 << s["SLOT_BITS"] and s["SLOT_MASK"] == s["NUM_SLOTS"] - 1
    assert s["AGG_SIZE"] == 2 * s["NUM_SLOTS"]
    assert s["DEDUP_SIZE"] == s["MAX_JOBS"] * s["MAX_WORKERS"] * s["DEDUP_WINDOW"]
    assert s["DEDUP_SEQ_MASK"] == s["DEDUP_WINDOW"] - 1 == (1 << s["DEDUP_WORKER_SHIFT"]) - 1
    assert s["DEDUP_WORKER_MASK"] == s["MAX_WORKERS"] - 1
    assert s["DEDUP_JOB_MASK"] == s["MAX_JOBS"] - 1
    assert 1 << s["DEDUP_JOB_SHIFT"] == s["MAX_WORKERS"] * s["DEDUP_WINDOW"]
    largest = (s["DEDUP_JOB_MASK"] << s["DEDUP_JOB_SHIFT"]) | (
        s["DEDUP_WORKER_MASK"] << s["DEDUP_WORKER_SHIFT"]) | s["DEDUP_SEQ_MASK"]  # fmt: skip
    assert largest == s["DEDUP_SIZE"] - 1
    assert s["WORKER_ADMISSION_SIZE"] == s["MAX_JOBS"] * s["MAX_WORKERS"]  # one per worker
    assert s["UDP_HEADER_LEN"] + s["HEADER_LEN"] + s["MAX_ENTRIES"] * s["ENTRY_LEN"] + 34 == 158


def test_dedup_cell_is_masked_by_the_sizes_and_its_comments_say_the_numbers():
    s = consts("sizes.p4")
    # worker_id >= MAX_WORKERS is BAD_WORKER: the const must not wrap round in its own width
    declared = re.search(r"const\s+(bit<\d+>)\s+MAX_WORKERS\b", (INCLUDE / "sizes.p4").read_text())
    assert declared and s["MAX_WORKERS"] < 1 << width(declared.group(1))
    assert s["MAX_WORKERS"] <= 1 << width("worker_id_t")
    # dedup_cell() takes every bit from a mask and shift of sizes.p4, no number of its own
    dedup = source("dedup.p4")
    body = braced(dedup, dedup.index("dedup_cell("))
    for name in ("DEDUP_JOB_MASK", "DEDUP_JOB_SHIFT", "DEDUP_WORKER_MASK",
                 "DEDUP_WORKER_SHIFT", "DEDUP_SEQ_MASK"):  # fmt: skip
        assert name in body, name
    assert not re.search(r"\b\d+\b", body), body
    # the comments that spell the layout out in numbers follow the sizes
    spelled = (
        f"(job_index & {s['DEDUP_JOB_MASK']}) << {s['DEDUP_JOB_SHIFT']} | "
        f"(worker_id & {s['DEDUP_WORKER_MASK']}) << {s['DEDUP_WORKER_SHIFT']} | "
        f"(seq & {s['DEDUP_SEQ_MASK']})"
    )
    for name in ("sizes.p4", "dedup.p4"):
        assert spelled in (INCLUDE / name).read_text(), name


def test_headers_mirror_scapy_layers():
    headers, _ = layout()
    for p4name, layer in [("hotagg_t", protocol.Hotagg), ("entry_t", protocol.Entry)]:
        scapy = [
            (f.name, 8 * f.sz) for f in layer.fields_desc if not isinstance(f, PacketListField)
        ]
        assert [(name, width(typ)) for typ, name in headers[p4name]] == scapy
    sizes = consts("sizes.p4")
    assert sum(width(typ) for typ, _ in headers["hotagg_t"]) == 8 * sizes["HEADER_LEN"]
    assert sum(width(typ) for typ, _ in headers["entry_t"]) == 8 * sizes["ENTRY_LEN"]


# ---- ids ----


def test_every_pinned_id_is_in_p4info_with_its_name(by_name):
    ids = pinned_ids()
    assert len({v for v, _ in ids.values()}) == len(ids)
    found = {(m.preamble.name, m.preamble.id) for m in by_name.values()}
    for macro, (value, name) in ids.items():
        assert (name, value) in found, macro


def test_id_annotations_sit_on_the_named_objects():
    ids = pinned_ids()
    used = Counter()
    for kind, name, d in program():
        if d.get("id_macro"):
            used[d["id_macro"]] += 1
            value, expected = ids[d["id_macro"]]
            assert (name, value >> 24) == (expected, PREFIX[kind])
    assert used == Counter(dict.fromkeys(ids, 1))
    next_free = re.search(r"Next free:(.*?)\n\n", (INCLUDE / "ids.p4").read_text(), re.S)[1]
    for value in re.findall(r"0x[0-9a-fA-F]{8}", next_free):
        assert int(value, 16) > max([v for v, _ in ids.values() if v >> 24 == int(value, 16) >> 24],
                                    default=0)  # fmt: skip


def test_no_id_inside_hot_key_lookup():
    assert "@id" not in strip_comments((INCLUDE / "hot_key_lookup.p4").read_text())


def test_hash_rule_verified_values():
    # Ids p4c 1.2.4.17 gave: NoAction (core.p4), a table of its issue461-bmv2 test program.
    assert (0x01 << 24) | (jenkins("NoAction") & 0xFFFFFF) == 21257015
    assert (0x02 << 24) | (jenkins("ingress.ipv4_da_lpm") & 0xFFFFFF) == 35996228


def test_unpinned_ids_follow_p4c_hash_rule(p4info):
    pinned = {name for _, name in pinned_ids().values()}
    kinds = {"table": p4info.tables, "action": p4info.actions, "counter": p4info.counters,
             "direct_counter": p4info.direct_counters, "register": p4info.registers}  # fmt: skip
    names = {k: [m.preamble.name for m in msgs] for k, msgs in kinds.items()}
    names["controller_header"] = list(controller_headers().values())
    actual = {(k, m.preamble.name): m.preamble.id for k, msgs in kinds.items() for m in msgs}
    for m in p4info.controller_packet_metadata:
        actual["controller_header", controller_headers()[m.preamble.name]] = m.preamble.id
    taken = {actual[k, n] for k, ns in names.items() for n in ns if n in pinned}
    for kind, ns in names.items():
        for name in sorted(n for n in ns if n not in pinned):
            h = jenkins(name)
            while (PREFIX[kind] << 24) | (h & 0xFFFFFF) in taken:
                h += 1
            assert actual[kind, name] == (PREFIX[kind] << 24) | (h & 0xFFFFFF), name
            taken.add(actual[kind, name])


# ---- the P4Info describes the program ----


@pytest.fixture(scope="module")
def decls() -> list[tuple[str, str, dict]]:
    return program()


def owners(decls) -> dict[str, str]:
    """Direct counter -> its table, in table order (the order p4c lists direct counters in)."""
    tables = [(t, d["counters"]) for k, t, d in decls if k == "table" and d["counters"]]
    return {f"{t.rsplit('.', 1)[0]}.{counter}": t for t, counter in tables}


@pytest.mark.parametrize(
    "kind, attr",
    [("table", "tables"), ("action", "actions"), ("counter", "counters"),
     ("direct_counter", "direct_counters"), ("register", "registers")],
)  # fmt: skip
def test_p4info_objects_in_declaration_order(p4info, decls, kind, attr):
    declared = [name for k, name, _ in decls if k == kind]
    if kind == "direct_counter":
        declared = list(owners(decls))
    assert [m.preamble.name for m in getattr(p4info, attr)] == declared


def test_action_params_match(by_name, decls):
    for _, name, d in (x for x in decls if x[0] == "action"):
        expected = [(pname, width(ptype)) for ptype, pname in d["params"]]
        assert [(p.name, p.bitwidth) for p in by_name["action", name].params] == expected, name


def test_tables_match(p4info, by_name, decls):
    action_name = {m.preamble.id: m.preamble.name for m in p4info.actions}
    match_type = p4info_pb2.MatchField.MatchType.Name
    for _, name, d in (x for x in decls if x[0] == "table"):
        msg, scope = by_name["table", name], name.rsplit(".", 1)[0]
        fields_ = [(f.id, f.name, f.bitwidth, match_type(f.match_type)) for f in msg.match_fields]
        assert fields_ == [(i, *k) for i, k in enumerate(d["keys"], start=1)], name
        refs = [(action_name[r.id], r.scope, list(r.annotations)) for r in msg.action_refs]
        only = p4info_pb2.ActionRef.DEFAULT_ONLY
        assert refs == [
            (f"{scope}.{a}", only if at else 0, ["@defaultonly"] if at else [])
            for at, a in d["actions"]
        ], name
        default, args = d["default"]
        default_msg = by_name["action", f"{scope}.{default}"]
        assert msg.initial_default_action.action_id == default_msg.preamble.id
        values = [a.value for a in msg.initial_default_action.arguments]
        widths = [p.bitwidth for p in default_msg.params]
        assert values == [number(a).to_bytes((w + 7) // 8, "big") for a, w in zip(args, widths)]
        assert msg.const_default_action_id == (default_msg.preamble.id if d["const_default"] else 0)
        assert msg.size == number(d["size"])
        counter = by_name.get(("direct_counter", f"{scope}.{d['counters']}"))
        assert list(msg.direct_resource_ids) == ([counter.preamble.id] if counter else [])


def test_counters_and_registers_match(by_name, decls):
    both = p4info_pb2.CounterSpec.BOTH
    table_of = owners(decls)
    for kind, name, d in decls:
        msg = by_name.get((kind, name))
        if kind == "register":
            got = (msg.type_spec.bitstring.bit.bitwidth, msg.size)
            assert got == (width(d["rtype"]), number(d["rsize"])), name
        elif kind == "counter":
            assert (msg.size, msg.spec.unit, d["cunit"]) == (
                number(d["csize"]), both, "packets_and_bytes")  # fmt: skip
        elif kind == "direct_counter":
            assert (msg.spec.unit, d["dunit"]) == (both, "packets_and_bytes")
            assert msg.direct_table_id == by_name["table", table_of[name]].preamble.id


def test_aliases_are_shortest_unique_suffixes(p4info, by_name):
    names = [name for _, name in by_name] + list(controller_headers().values())
    for (_, name), msg in by_name.items():
        parts = name.split(".")
        n = next(i for i in range(1, len(parts) + 1)
                 if sum(x.split(".")[-i:] == parts[-i:] for x in names) == 1)  # fmt: skip
        assert msg.preamble.alias == ".".join(parts[-n:]), name


def test_controller_headers_match_the_api_contract(p4info):
    headers, _ = layout()
    types = controller_headers()
    got = {m.preamble.name: [(f.id, f.name, f.bitwidth) for f in m.metadata]
           for m in p4info.controller_packet_metadata}  # fmt: skip
    assert got == {name: [(i, f, width(t)) for i, (t, f) in enumerate(headers[typ], start=1)]
                   for name, typ in types.items()}  # fmt: skip
    assert got["packet_in"] == [(1, "ingress_port", 9), (2, "_pad", 7)]
    assert got["packet_out"] == [(1, "egress_port", 9), (2, "_pad", 7)]
    assert p4info.pkg_info.arch == "v1model"


def test_each_table_applied_once_and_each_position_processed_once():
    # p4c applies a table at most once per pass: every table has one apply call, and each
    # entry position's hot-key instance is applied through HOTAGG_PROCESS_ENTRY(i) once.
    text = control_sources()
    tables = {name.rsplit(".", 1)[1] for k, name, _ in program() if k == "table"}
    applied = Counter(re.findall(r"(\w+)\.apply\s*\(", text))
    assert {t: applied[t] for t in tables} == dict.fromkeys(tables, 1)
    main = strip_comments((P4SRC / "hotagg.p4").read_text())
    positions = re.findall(r"HOTAGG_PROCESS_ENTRY\((\d+)\)", main)
    assert sorted(map(int, positions)) == list(range(protocol.MAX_ENTRIES))
    instances = re.findall(r"HotKeyLookup\(\)\s+(lookup\d+);", main)
    assert instances == [f"lookup{i}" for i in range(protocol.MAX_ENTRIES)]


def test_register_owners_are_instantiated_once():
    # A register declared in a control instantiated twice would exist twice.
    owners_ = {m[1] for m in re.finditer(r"control\s+(\w+)", control_sources())
               if "register<" in control(m[1])[0]}  # fmt: skip
    text = strip_comments((P4SRC / "hotagg.p4").read_text()) + control_sources()
    counts = Counter(re.findall(r"\b([A-Z]\w*)\([^)]*\)\s+\w+;", text))
    assert owners_ == {"Dedup", "SlotStore", "Sketch", "FlushCount", "CollectedIter"}
    assert {c: counts[c] for c in owners_} == dict.fromkeys(owners_, 1)


# ---- the committed P4Info is the generator's output ----


def test_generator_reproduces_committed_p4info(tmp_path):
    out = tmp_path / "hotagg.p4info.txtpb"
    run = subprocess.run([sys.executable, str(GEN), "--output", str(out)], capture_output=True)
    assert run.returncode == 0, run.stderr
    assert out.read_bytes() == P4INFO_PATH.read_bytes()


def test_generator_check_flags_a_stale_file(tmp_path):
    stale = tmp_path / "stale.txtpb"
    stale.write_text(P4INFO_PATH.read_text().replace("size: 1024", "size: 512"))
    run = subprocess.run([sys.executable, str(GEN), "--check", "--output", str(stale)])
    assert run.returncode == 1
    ok = subprocess.run([sys.executable, str(GEN), "--check", "--output", str(P4INFO_PATH)])
    assert ok.returncode == 0
