"""contract/: the P4 files' numbers and names as Python reads them, and what importing costs.

Pure tests. The numbers are read from p4src/include/{types,sizes,ids}.p4 at import, so
equality with the P4 files holds by construction; these tests check the readers on the forms
the files use, the names Python relies on, and that nothing loads Scapy just for a constant.
"""

from __future__ import annotations

import importlib.util
import json
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

from contract import constants, names, p4files
from contract.p4files import (
    IDS_P4,
    SIZES_P4,
    TYPES_P4,
    ContractError,
    read_consts,
    read_pinned_ids,
    strip_comments,
)

REPO = Path(__file__).resolve().parent.parent
# Everything except the Scapy layers themselves and entry points that run on import.
PACKAGES = ["contract", "controller", "softswitch", "hosts", "topologies", "experiment", "bench"]
SCAPY_ALLOWED = {"contract.layers"}


def loaded_after(statement: str) -> list[str]:
    """Top-level packages a fresh interpreter loads to run `statement`, beyond its start-up."""
    code = (
        "import json, sys\n"
        "before = set(sys.modules)\n"
        f"{statement}\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in set(sys.modules) - before})))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=False
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_constants_and_names_load_only_the_standard_library():
    loaded = loaded_after("import contract.constants, contract.names")
    assert set(loaded) - set(sys.stdlib_module_names) == {"contract"}


def project_modules() -> list[str]:
    out = []
    for package in PACKAGES:
        path = [str(REPO / package)]
        for info in pkgutil.walk_packages(path, prefix=f"{package}."):
            if not info.name.endswith(".__main__") and info.name not in SCAPY_ALLOWED:
                out.append(info.name)
    return [*PACKAGES, *out]


def test_no_project_module_loads_scapy():
    """Only contract.layers (and the tests) may import Scapy: the controller, the embedded
    switch and the agents take numbers from contract.constants."""
    modules = project_modules()
    assert "controller.stats" in modules and "softswitch.pipeline.push" in modules
    statement = "\n".join(f"import {m}" for m in modules)
    assert "scapy" not in loaded_after(statement)


def test_layers_is_where_scapy_comes_in():
    assert "scapy" in loaded_after("import contract.layers")


# ---- the readers ----


def test_read_consts_forms(tmp_path):
    p4 = tmp_path / "x.p4"
    p4.write_text(
        "/* const bit<8> IN_BLOCK_COMMENT = 1; */\n"
        "// const bit<8> IN_LINE_COMMENT = 1;\n"
        "const bit<8> A = 8;  // trailing comment\n"
        '@noWarn("unused") const bit<32> B = 0x3fff;\n'
        "const slot_t C = 2 * B + 2;\n"
        "  const bit<8> D = 8w1 << 3;\n"
        "const bool E = true;\n"
    )
    assert read_consts(p4) == {"A": 8, "B": 0x3FFF, "C": 0x8000, "D": 8}


def test_read_consts_rejects_a_name_defined_twice(tmp_path):
    p4 = tmp_path / "x.p4"
    p4.write_text("const bit<8> A = 1;\nconst bit<8> A = 2;\n")
    with pytest.raises(ContractError, match="A is defined twice"):
        read_consts(p4)


def test_read_pinned_ids_forms_and_errors(tmp_path):
    p4 = tmp_path / "ids.p4"
    p4.write_text(
        "/* #define HOTAGG_ID_TABLE_OLD 0x02000009  // HotaggIngress.old */\n"
        "#define HOTAGG_ID_TABLE_T 0x02000001  // HotaggIngress.t\n"
        "// #define HOTAGG_ID_TABLE_RETIRED 0x02000002  // HotaggIngress.retired\n"
    )
    assert read_pinned_ids(p4) == {"TABLE_T": (0x02000001, "HotaggIngress.t")}
    p4.write_text(p4.read_text() + "#define HOTAGG_ID_TABLE_U 0x02000003  // HotaggIngress.t\n")
    with pytest.raises(ContractError, match="pinned twice"):
        read_pinned_ids(p4)
    with pytest.raises(ContractError, match="cannot read"):
        read_pinned_ids(tmp_path / "missing.p4")


# ---- what Python reads from the real files ----


def test_every_const_of_the_p4_files_is_read():
    text = strip_comments(TYPES_P4.read_text() + SIZES_P4.read_text())
    consts = read_consts(TYPES_P4, SIZES_P4)
    # Every integer const (bit<W>, int<W> or a typedef named *_t); a bool const would not count.
    integer = r"\bconst\s+(?:(?:bit|int)<\d+>|\w+_t)\s"
    assert len(consts) == len(re.findall(integer, text))


def test_enums_follow_the_p4_consts():
    consts = read_consts(TYPES_P4, SIZES_P4)
    assert {f"OP_{op.name}": op.value for op in constants.Op} == {
        k: v for k, v in consts.items() if k.startswith("OP_") and k != "OP_MAX"
    }
    assert {f"STAT_{s.name}": s.value for s in constants.Stat} == {
        k: v for k, v in consts.items() if k.startswith("STAT_")
    }
    assert max(constants.Stat) < constants.STATS_SIZE
    # Names the Python code relies on.
    assert constants.Op.PUSH == 1 and constants.Stat.MALFORMED == 0
    ops = set(constants.Op)
    assert ops.issuperset(constants.SWITCH_OPS) and ops.issuperset(constants.REPLY_OP)


def import_constants_reading(types_p4: Path, monkeypatch) -> None:
    """Run contract/constants.py afresh (not the imported module) with `types_p4` as types.p4."""
    monkeypatch.setattr(p4files, "TYPES_P4", types_p4)
    spec = importlib.util.spec_from_file_location("constants_under_test", constants.__file__)
    assert spec is not None and spec.loader is not None
    spec.loader.exec_module(importlib.util.module_from_spec(spec))


def test_a_p4_name_python_lacks_or_needs_fails_at_import(tmp_path, monkeypatch):
    types_p4 = tmp_path / "types.p4"
    text = TYPES_P4.read_text()
    types_p4.write_text(text)
    import_constants_reading(types_p4, monkeypatch)  # the copy itself imports

    types_p4.write_text(re.sub(r"^.*\bOP_PULL_REPLY\b.*$", "", text, flags=re.M))
    with pytest.raises(ContractError, match=r"OP_PULL_REPLY is not defined in types\.p4"):
        import_constants_reading(types_p4, monkeypatch)

    types_p4.write_text(text + "\nconst stat_t STAT_NEW_REASON = 99;\n")
    with pytest.raises(ContractError, match=r"types\.p4 defines STAT_NEW_REASON but .* Stat does"):
        import_constants_reading(types_p4, monkeypatch)


def test_derived_sizes_agree():
    c = constants
    assert c.DEDUP_SIZE == c.MAX_JOBS * c.MAX_WORKERS * c.DEDUP_WINDOW
    assert c.AGG_SIZE == 2 * c.NUM_SLOTS
    assert c.MAX_ENTRIES <= 8  # the per-entry masks are one byte on the wire
    assert c.to_fixed(1.5) == 3 * c.VALUE_SCALE // 2 and c.from_fixed(c.VALUE_SCALE) == 1.0


def test_pinned_names_are_ids_p4():
    pinned = read_pinned_ids(IDS_P4)
    assert {p.name: p.id for p in pinned.values()} == names.PINNED_IDS
    for macro, (_, name) in pinned.items():
        assert getattr(names, macro) == name, macro


def test_lookup_naming():
    n = constants.MAX_ENTRIES
    assert tuple(f"HotaggIngress.lookup{i}" for i in range(n)) == names.LOOKUPS
    assert names.hot_keys_table(0) == "HotaggIngress.lookup0.hot_keys"
    assert names.set_slot_action(n - 1) == f"HotaggIngress.lookup{n - 1}.set_slot"
    assert names.miss_action(1) == "HotaggIngress.lookup1.miss"
    assert names.hits_counter(2) == "HotaggIngress.lookup2.hits"
    assert len(names.HOT_KEYS_TABLES) == len(names.SET_SLOT_ACTIONS) == n
    for bad in (-1, n):
        with pytest.raises(ValueError, match="out of range"):
            names.lookup(bad)
