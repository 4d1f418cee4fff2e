"""The project's import graph, read from the source (ast), not by importing it.

Every import statement counts: at module level, inside functions, in `try`. A cycle that a
function-local import holds apart is still a cycle (the modules still need each other at run
time), so it fails here as a module-level one would. Imports under `if TYPE_CHECKING:` count
too, except in the cycle check inside a package: no module runs them, and a class and the
functions that take it (softswitch/pipeline/) may name each other for a type checker.

- the packages (contract, controller, hosts, ... : every top-level folder of Python files)
  import each other without a cycle;
- contract/ imports no other project package: the protocol and file formats every side reads;
- no library package imports tests/ (tests are not shipped, bench and scripts included);
- no two modules of one package import each other, directly or through others;
- every import of a project module names a module or name that exists (a name moved to
  another module and a caller left behind fail here, even in code no test runs).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOT_PACKAGES = {"build", "docs", "p4src", "runs", "sweeps"}
LEAF = "contract"
TESTS = "tests"


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the project module imported (a package's __init__ for `import pkg`)
    names: tuple[str, ...]  # `from target import names` ("*" for a star import)
    where: str  # path:line, for the failure message
    typing_only: bool = False  # under `if TYPE_CHECKING:`


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def modules() -> dict[str, Path]:
    """Every project module (dotted name -> file) below the top-level folders of Python files."""
    found: dict[str, Path] = {}
    for top in sorted(ROOT.iterdir()):
        if not top.is_dir() or top.name.startswith(".") or top.name in NOT_PACKAGES:
            continue
        for path in sorted(top.rglob("*.py")):
            rel = path.relative_to(ROOT).parts
            if any(p.startswith(".") or p == "__pycache__" for p in rel):
                continue
            found[_module_name(path)] = path
    return found


def packages() -> list[str]:
    return sorted({name.split(".")[0] for name in modules()})


def _package_of(module: str) -> str:
    return module.split(".")[0]


def _resolve(module: str, node: ast.ImportFrom) -> str:
    """The absolute name `from ... import` refers to (relative imports included)."""
    if not node.level:
        return node.module or ""
    is_package = modules()[module].name == "__init__.py"
    base = module.split(".")
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _existing(name: str) -> str | None:
    """The longest prefix of a dotted name that is a project module."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules():
            return candidate
        parts.pop()
    return None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(
    node: ast.AST, typing_only: bool = False
) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement below `node`, and whether only a type checker runs it."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node, typing_only
        return
    if isinstance(node, ast.If) and _is_type_checking(node.test):
        for child in node.body:
            yield from _import_nodes(child, True)
        for child in node.orelse:
            yield from _import_nodes(child, typing_only)
        return
    for child in ast.iter_child_nodes(node):
        yield from _import_nodes(child, typing_only)


@cache
def imports() -> tuple[Import, ...]:
    """Every import of a project module by a project module, wherever it is written."""
    found: list[Import] = []
    for module, path in modules().items():
        tree = ast.parse(path.read_text(), str(path))
        for node, typing_only in _import_nodes(tree):
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            if isinstance(node, ast.Import):
                for alias in node.names:
                    target = _existing(alias.name)
                    if target is not None:
                        found.append(Import(module, target, (), where, typing_only))
                continue
            base = _resolve(module, node)
            if _existing(base) is None and base.split(".")[0] not in packages():
                continue  # a third-party or standard module
            for alias in node.names:
                # `from pkg import submodule` imports the submodule itself
                sub = f"{base}.{alias.name}"
                if sub in modules():
                    found.append(Import(module, sub, (), where, typing_only))
                else:
                    found.append(Import(module, base, (alias.name,), where, typing_only))
    return tuple(found)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node, or a self-loop (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in edges.get(v, ()):
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def _explain(component: list[str], edge_of: Iterator[Import]) -> str:
    """A cycle's members and the imports that join them (path:line)."""
    members = set(component)
    lines = [f"{i.source} -> {i.target} ({i.where})" for i in edge_of if i.target in members]
    return "cycle " + " <-> ".join(component) + ":\n    " + "\n    ".join(sorted(set(lines)))


def _library_imports() -> Iterator[Import]:
    return (i for i in imports() if i.source.split(".")[0] != TESTS)


def test_the_graph_is_read_from_every_package() -> None:
    """The test reads what it checks: the packages, and imports of each kind."""
    found = packages()
    for expected in ("contract", "controller", "hosts", "softswitch", "topologies", TESTS):
        assert expected in found
    sources = {i.source for i in imports()}
    # a module-level import, a function-local one and one of a subpackage's module
    assert "controller.cli" in sources and "controller.commands" in sources
    assert any(i.target.startswith("softswitch.p4rt.") for i in imports())


def test_the_package_graph_has_no_cycle() -> None:
    edges: dict[str, set[str]] = {}
    for i in _library_imports():
        a, b = _package_of(i.source), _package_of(i.target)
        if a != b and TESTS not in (a, b):
            edges.setdefault(a, set()).add(b)
    cycles = _cycles(edges)
    crossing = [i for i in _library_imports() if _package_of(i.source) != _package_of(i.target)]
    assert not cycles, "\n".join(
        _explain(
            c,
            (
                Import(_package_of(i.source), _package_of(i.target), (), i.where)
                for i in crossing
                if _package_of(i.source) in c
            ),
        )
        for c in cycles
    )


def test_contract_imports_no_other_project_package() -> None:
    bad = [
        f"{i.where}: {i.source} imports {i.target}"
        for i in imports()
        if _package_of(i.source) == LEAF and _package_of(i.target) != LEAF
    ]
    assert not bad, "\n".join(bad)


def test_no_library_package_imports_the_tests() -> None:
    bad = [
        f"{i.where}: {i.source} imports {i.target}"
        for i in _library_imports()
        if _package_of(i.target) == TESTS
    ]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("package", packages())
def test_no_import_cycle_inside_a_package(package: str) -> None:
    inside = [
        i
        for i in imports()
        if _package_of(i.source) == package == _package_of(i.target)
        and i.source != i.target
        and not i.typing_only
    ]
    edges: dict[str, set[str]] = {}
    for i in inside:
        edges.setdefault(i.source, set()).add(i.target)
    cycles = _cycles(edges)
    assert not cycles, "\n".join(_explain(c, (i for i in inside if i.source in c)) for c in cycles)


@cache
def _top_level_names(module: str) -> frozenset[str] | None:
    """The names a module defines or imports at its top level (None: it has a star import
    or a module __getattr__, so any name may exist)."""
    tree = ast.parse(modules()[module].read_text())
    names: set[str] = set()
    body = list(tree.body)
    while body:
        node = body.pop()
        if isinstance(node, (ast.If, ast.Try)):  # TYPE_CHECKING, optional imports
            body += node.body + node.orelse + getattr(node, "finalbody", [])
            for handler in getattr(node, "handlers", []):
                body += handler.body
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any(a.name == "*" for a in node.names):
                return None
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return None if "__getattr__" in names else frozenset(names)


def test_every_project_import_names_something_that_exists() -> None:
    bad = []
    for i in imports():
        if i.target not in modules():
            continue  # no such module: the loop below says so
        defined = _top_level_names(i.target)
        if defined is None:
            continue
        missing = [n for n in i.names if n != "*" and n not in defined]
        bad += [f"{i.where}: {i.target} has no {n!r}" for n in missing]
    # `import a.b.c` and `from a.b import c` of a module that is not there
    for path in modules().values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                named = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                named = [node.module or ""]
            else:
                continue
            for name in named:
                if name.split(".")[0] in packages() and _existing(name) != name:
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: no module {name}")
    assert not bad, "\n".join(bad)
