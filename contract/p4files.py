"""Readers of the P4 files that hold the contract's numbers and names (standard library only).

- `read_consts`: the `const <type> NAME = <value>;` lines of p4src/include/types.p4 and
  sizes.p4 (an `@noWarn("unused")` or other annotation in front is allowed). A value is an
  integer literal (decimal, hex, or P4's width-prefixed `8w1`) or a small expression of
  literals and earlier constants (`+ - * << >> & |`, parentheses); lines whose value is
  anything else (a boolean, a cast) are not read. The same name twice is an error.
- `read_pinned_ids`: the `#define HOTAGG_ID_<KIND>_<NAME> 0x........  // <P4Info name>` lines of
  p4src/include/ids.p4.

Comments are removed before either is read, so a line commented out does not count.
"""

from __future__ import annotations

import ast
import operator
import re
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parent.parent
P4SRC = REPO / "p4src"
INCLUDE = P4SRC / "include"
TYPES_P4 = INCLUDE / "types.p4"
SIZES_P4 = INCLUDE / "sizes.p4"
IDS_P4 = INCLUDE / "ids.p4"
# The P4Info of the program: what the embedded target serves and the controller pushes.
P4INFO_PATH = P4SRC / "hotagg.p4info.txtpb"


class ContractError(ValueError):
    """A P4 file of the contract is missing, malformed or lacks a name Python needs."""


_CONST = re.compile(
    r"^[ \t]*(?:@\w+(?:\([^)]*\))?\s+)*const\s+[\w<>]+\s+(\w+)\s*=\s*([^;]+);", re.M
)
_PINNED = re.compile(
    r"^[ \t]*#define\s+HOTAGG_ID_(\w+)\s+(0x[0-9a-fA-F]+)\s*//\s*(\S+)[ \t]*$", re.M
)
_WIDTH_LITERAL = re.compile(r"\b\d+[ws](0x[0-9a-fA-F]+|\d+)\b")
_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
}


def strip_comments(text: str) -> str:
    """`/* */` and `//` comments removed (block comments first, as the preprocessor does)."""
    return re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", "", text, flags=re.S))


def _strip_block_comments(text: str) -> str:
    """Only `/* */` removed: an id line names its object in a `//` comment."""
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise ContractError(f"cannot read {path}: {exc.strerror}") from None


def _evaluate(expr: str, known: dict[str, int]) -> int | None:
    """An integer expression of literals and known constants, or None if it is anything else."""
    try:
        tree = ast.parse(_WIDTH_LITERAL.sub(r"\1", expr.strip()), mode="eval")
    except SyntaxError:
        return None

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name) and node.id in known:
            return known[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](value(node.left), value(node.right))
        raise ValueError(ast.dump(node))

    try:
        return value(tree.body)
    except ValueError:
        return None


def read_consts(*paths: Path) -> dict[str, int]:
    """NAME -> value of the integer `const` lines of `paths`, in file order."""
    consts: dict[str, int] = {}
    for path in paths:
        for name, expr in _CONST.findall(strip_comments(_read(path))):
            if name in consts:
                raise ContractError(f"{path}: const {name} is defined twice")
            number = _evaluate(expr, consts)
            if number is not None:
                consts[name] = number
    return consts


class PinnedId(NamedTuple):
    id: int
    name: str  # the P4Info full name


def read_pinned_ids(path: Path = IDS_P4) -> dict[str, PinnedId]:
    """`<KIND>_<NAME>` (the macro without HOTAGG_ID_) -> (id, P4Info name), in file order."""
    pinned: dict[str, PinnedId] = {}
    names: set[str] = set()
    for macro, value, name in _PINNED.findall(_strip_block_comments(_read(path))):
        if macro in pinned:
            raise ContractError(f"{path}: HOTAGG_ID_{macro} is defined twice")
        if name in names:
            raise ContractError(f"{path}: {name} is pinned twice")
        names.add(name)
        pinned[macro] = PinnedId(int(value, 16), name)
    if not pinned:
        raise ContractError(f"{path}: no `#define HOTAGG_ID_<KIND>_<NAME> 0x...  // name` lines")
    return pinned
