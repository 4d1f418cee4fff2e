"""The docs name only what exists: every make variable, make target and command-line option
that README.md and docs/*.md mention, and their example commands parse.

What is read where:
- make variables and targets: the Makefile itself (assignments, `$(NAME)` references, rule
  heads); example `make` lines must pass `make -n`;
- options: the real argparse parsers, built in process (`experiment.__main__.build_parser`,
  `controller.cli.build_parser`, ...; the benchmarks build theirs inside `main`, so their
  parser is caught at `parse_args`); example `python -m ...` and `hotagg-ctl` lines must
  parse.

docs/results/ is left out: a dated log records what was run on its date, with the options of
that date. Fast and pure: no network, no root.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import re
import shlex
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAKEFILE = ROOT / "Makefile"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_BYTES = 12_500  # the bound: a README a newcomer reads in five minutes

# hotagg's own entry points: python -m <module> (or a console script) -> its parser's module.
OWN_PACKAGES = ("bench", "controller", "experiment", "hosts", "softswitch")
CONSOLE_SCRIPTS = {"hotagg-ctl": "controller", "hotagg-softswitch": "softswitch"}
# `python -m controller` runs controller.cli.main as soon as it is imported: read the parser
# where it is built.
PARSER_MODULES = {"controller": "controller.cli"}
# Environment variables the docs may set that are neither make's nor hotagg's own.
SYSTEM_ENVIRONMENT = {"PATH", "PYTHONPATH", "PYTHONUNBUFFERED", "TERM"}
PLACEHOLDERS = {"VAR"}  # `make run VAR=value`: any variable
ASSIGNMENT = re.compile(r"^([A-Z][A-Z0-9_]*)=(.*)$", re.S)
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
# A word of a make command line: a flag, VAR=value, a target, or a placeholder.
MAKE_WORD = re.compile(r"-[a-zA-Z]+|[A-Z][A-Z0-9_]*=.*|[a-z][a-z0-9_-]*|\.\.\.|<[^>]*>", re.S)


# --- the Makefile --------------------------------------------------------------------------


@functools.cache
def makefile_text() -> str:
    return MAKEFILE.read_text()


@functools.cache
def make_variables() -> frozenset[str]:
    """Every variable the Makefile assigns or reads."""
    text = makefile_text()
    assigned = re.findall(r"^([A-Z][A-Z0-9_]*)\s*(?:\?=|:=|\+=|=)", text, re.M)
    read = re.findall(r"\$\(([A-Z][A-Z0-9_]*)\)", text)
    given = re.findall(r"\$\(call given,([A-Z][A-Z0-9_]*)\)", text)
    return frozenset(assigned + read + given)


@functools.cache
def make_defaults() -> dict[str, str]:
    """VAR ?= value: the default a user gets without VAR=... ."""
    return {
        m.group(1): m.group(2).strip()
        for m in re.finditer(r"^([A-Z][A-Z0-9_]*)\s*\?=[ \t]*(.*)$", makefile_text(), re.M)
    }


@functools.cache
def make_targets() -> frozenset[str]:
    text = makefile_text()
    heads = re.findall(r"^([a-z][a-z0-9_-]*)\s*:(?!=)", text, re.M)
    phony = " ".join(re.findall(r"^\.PHONY:(.*)$", text, re.M)).split()
    return frozenset(heads + phony)


# --- the parsers ---------------------------------------------------------------------------


class _Caught(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__()
        self.parser = parser


def parser_built_by(main: Callable[[list[str]], object]) -> argparse.ArgumentParser:
    """The parser a `main(argv)` builds, caught when it parses (nothing after that runs)."""

    def catch(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        raise _Caught(self)

    with mock.patch.object(argparse.ArgumentParser, "parse_args", catch):
        try:
            main([])
        except _Caught as caught:
            return caught.parser
    raise AssertionError(f"{main.__module__}.main never parsed its arguments")


@functools.cache
def parser_of(module: str) -> argparse.ArgumentParser | None:
    """The parser of `python -m <module>`, or None when hotagg has no such entry point."""
    if module.split(".")[0] not in OWN_PACKAGES:
        return None
    try:
        mod = importlib.import_module(PARSER_MODULES.get(module, module))
        if hasattr(mod, "__path__"):  # a package runs its __main__
            mod = importlib.import_module(f"{module}.__main__")
    except ModuleNotFoundError:
        return None
    if hasattr(mod, "build_parser"):
        return mod.build_parser()
    if hasattr(mod, "main"):
        return parser_built_by(mod.main)
    return None


def subparsers(parser: argparse.ArgumentParser) -> Iterator[argparse._SubParsersAction]:
    return (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def all_options(parser: argparse.ArgumentParser) -> set[str]:
    """Every --option of a parser and of its subcommands, at any depth."""
    found = {s for a in parser._actions for s in a.option_strings if s.startswith("--")}
    for action in subparsers(parser):
        for sub in action.choices.values():
            found |= all_options(sub)
    return found


def options_along(parser: argparse.ArgumentParser, argv: list[str]) -> set[str]:
    """The options valid for argv's subcommand: its own and those of every level above it
    (hotagg-ctl's global options are accepted after the noun and verb too)."""
    found = {s for a in parser._actions for s in a.option_strings if s.startswith("--")}
    for action in subparsers(parser):
        for i, word in enumerate(argv):
            if word in action.choices:
                return found | options_along(action.choices[word], argv[i + 1 :])
    return found


@functools.cache
def every_option() -> frozenset[str]:
    """The options of all of hotagg's entry points: what a bare `--flag` in prose may be."""
    modules = ["experiment", "controller", "hosts", "hosts.ps", "hosts.worker", "softswitch"]
    modules += [
        f"bench.{p.stem}" if p.stem != "__main__" else "bench"
        for p in sorted((ROOT / "bench").glob("*.py"))
        if p.stem != "__init__"
    ]
    found: set[str] = set()
    for module in modules:
        if (parser := parser_of(module)) is not None:
            found |= all_options(parser)
    return frozenset(found)


# --- the docs ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """One command line the docs show, split into words."""

    doc: str
    text: str
    words: tuple[str, ...]
    fenced: bool  # from a code block (an example to run), not an inline span


def split_words(text: str) -> list[str]:
    try:
        return shlex.split(text, comments=False)
    except ValueError:  # an unbalanced quote in prose: words are still words
        return text.split()


def fenced_lines(markdown: str) -> Iterator[str]:
    """The lines of ``` blocks, continuations joined, comments removed."""
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", markdown, re.M | re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"(^|\s)#.*$", "", line).strip()
            if line:
                yield line


def inline_spans(markdown: str) -> Iterator[str]:
    prose = re.sub(r"^```.*?^```", "", markdown, flags=re.M | re.S)
    for span in re.findall(r"`([^`]+)`", prose):
        yield " ".join(span.split())


def commands(doc: Path) -> Iterator[Command]:
    text = doc.read_text()
    name = str(doc.relative_to(ROOT))
    for line in fenced_lines(text):
        yield Command(name, line, tuple(split_words(line)), True)
    for span in inline_spans(text):
        yield Command(name, span, tuple(split_words(span)), False)


def program(words: tuple[str, ...]) -> tuple[list[str], str | None, list[str]]:
    """(environment assignments, what runs, its arguments): "make", a module for
    `python -m module`, a console script's module, or None for anything else."""
    rest = list(words)
    env = []
    while rest and (rest[0] == "sudo" or ASSIGNMENT.match(rest[0])):
        word = rest.pop(0)
        if word != "sudo":
            env.append(word)
    if not rest:
        return env, None, []
    head = rest[0]
    if head == "make":
        if not all(MAKE_WORD.fullmatch(w) for w in rest[1:]):
            return env, None, rest  # prose or output that starts with "make", not a command
        return env, "make", rest[1:]
    if Path(head).name in CONSOLE_SCRIPTS:
        return env, CONSOLE_SCRIPTS[Path(head).name], rest[1:]
    if re.fullmatch(r"python3?", Path(head).name) and rest[1:2] == ["-m"] and len(rest) > 2:
        return env, rest[2], rest[3:]
    return env, None, rest


def all_commands() -> list[Command]:
    return [c for doc in DOCS for c in commands(doc)]


def ids(cmds: list[Command]) -> list[str]:
    return [f"{c.doc}: {c.text[:60]}" for c in cmds]


# --- what the docs name exists --------------------------------------------------------------


def named_make_variables() -> Iterator[tuple[Command, str]]:
    """VAR=value in make lines and alone in a span (`BW=auto`); not environment variables."""
    for cmd in all_commands():
        env, prog, args = program(cmd.words)
        if prog == "make":
            names = [ASSIGNMENT.match(w).group(1) for w in [*env, *args] if ASSIGNMENT.match(w)]
        elif prog is None and not args:  # only assignments: `KEEP=1`, `BW=`
            names = [ASSIGNMENT.match(w).group(1) for w in env]
        else:
            continue
        for name in names:
            if name in SYSTEM_ENVIRONMENT | PLACEHOLDERS or name.startswith("HOTAGG_"):
                continue  # not a make variable
            yield cmd, name


def knob_tables() -> Iterator[tuple[str, list[str], list[list[str]]]]:
    """Markdown tables whose first column is `variable`: (doc, header, rows)."""
    for doc in DOCS:
        lines = doc.read_text().splitlines()
        for i, line in enumerate(lines[:-1]):
            if not line.startswith("|") or not re.match(r"^\|[-:| ]+\|$", lines[i + 1]):
                continue
            header = [c.strip() for c in line.strip("|").split("|")]
            if header[0] != "variable":
                continue
            rows = []
            for row in lines[i + 2 :]:
                if not row.startswith("|"):
                    break
                rows.append([c.strip() for c in row.strip("|").split("|")])
            yield str(doc.relative_to(ROOT)), header, rows


def test_every_make_variable_named_exists() -> None:
    unknown = {
        f"{cmd.doc}: {name} (in `{cmd.text[:70]}`)"
        for cmd, name in named_make_variables()
        if name not in make_variables()
    }
    for doc, _header, rows in knob_tables():
        for row in rows:
            for name in re.findall(r"`([A-Z][A-Z0-9_]*)`", row[0]):
                if name not in make_variables():
                    unknown.add(f"{doc}: {name} (a knob table's row)")
    assert not unknown, "make variables the Makefile does not have:\n" + "\n".join(sorted(unknown))


def test_documented_defaults_are_the_makefiles() -> None:
    """A knob table's `default` cell, when it is one literal value, is the Makefile's."""
    wrong = []
    for doc, header, rows in knob_tables():
        if "default" not in header:
            continue
        col = header.index("default")
        for row in rows:
            name = re.fullmatch(r"`([A-Z][A-Z0-9_]*)`", row[0])
            value = re.fullmatch(r"`([^`]*)`", row[col])
            if not (name and value and name.group(1) in make_defaults()):
                continue  # not one literal value of a variable the Makefile defaults
            if value.group(1) != make_defaults()[name.group(1)]:
                wrong.append(
                    f"{doc}: {name.group(1)} documented {value.group(1)!r}, "
                    f"Makefile {make_defaults()[name.group(1)]!r}"
                )
    assert not wrong, "\n".join(wrong)


def test_every_make_target_named_exists() -> None:
    unknown = set()
    for cmd in all_commands():
        _env, prog, args = program(cmd.words)
        if prog != "make":
            continue
        for word in args:
            if not re.fullmatch(r"[a-z][a-z0-9_-]*", word):
                continue  # a flag, VAR=value or a placeholder
            if word not in make_targets():
                unknown.add(f"{cmd.doc}: make {word} (in `{cmd.text[:70]}`)")
    assert not unknown, "make targets the Makefile does not have:\n" + "\n".join(sorted(unknown))


def test_every_environment_variable_named_is_read() -> None:
    """HOTAGG_* variables the docs set are read somewhere in the code."""
    sources = "\n".join(
        p.read_text()
        for p in ROOT.rglob("*.py")
        if ".venv" not in p.parts and p.name != "test_docs.py"
    )
    named = {
        (cmd.doc, ASSIGNMENT.match(w).group(1))
        for cmd in all_commands()
        for w in cmd.words
        if ASSIGNMENT.match(w) and w.startswith("HOTAGG_")
    }
    unread = sorted(f"{doc}: {name}" for doc, name in named if name not in sources)
    assert not unread, "environment variables nothing reads:\n" + "\n".join(unread)


def test_every_option_named_exists() -> None:
    """A `--flag` given to one of hotagg's commands is an option of that command (at its
    subcommand); a bare `--flag` in prose is an option of some hotagg entry point. Other
    programs' command lines (p4c, pytest, p4runtime-shell ...) are not ours to check."""
    unknown = set()
    for cmd in all_commands():
        _env, prog, args = program(cmd.words)
        if prog == "make" or not cmd.words:
            continue
        if prog is None:
            if not cmd.words[0].startswith("--"):
                continue  # prose, output, or another program
            valid, where, flags = every_option(), "any hotagg command", FLAG.findall(cmd.text)
        elif (parser := parser_of(prog)) is not None:
            flags = [w.split("=", 1)[0] for w in args if FLAG.fullmatch(w.split("=", 1)[0])]
            valid, where = options_along(parser, args), f"python -m {prog}"
        else:
            continue
        for flag in flags:
            if flag not in valid:
                unknown.add(f"{cmd.doc}: {flag} is not an option of {where} (`{cmd.text[:70]}`)")
    assert not unknown, "\n".join(sorted(unknown))


# --- the example commands run -------------------------------------------------------------


def examples() -> list[Command]:
    """Command lines of code blocks that hotagg runs (make, python -m ..., hotagg-ctl),
    without placeholders (`...`, `<id>`)."""
    found = []
    for cmd in all_commands():
        if not cmd.fenced or "..." in cmd.text or re.search(r"<[a-z-]+>", cmd.text):
            continue
        _env, prog, _args = program(cmd.words)
        if prog == "make" or (prog and parser_of(prog) is not None):
            found.append(cmd)
    return found


def test_the_readme_has_examples_to_check() -> None:
    readme = [c for c in examples() if c.doc == "README.md"]
    assert any(program(c.words)[1] == "make" for c in readme), "README: no make example found"


@pytest.mark.parametrize("cmd", examples(), ids=ids(examples()))
def test_example_command_parses(cmd: Command) -> None:
    env, prog, args = program(cmd.words)
    if prog == "make":
        # Without the caller's MAKEFLAGS: `make test` passes its own command-line variables
        # down, and they would count as given here.
        clean = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS")}
        clean.pop("MAKELEVEL", None)
        done = subprocess.run(
            ["make", "-n", "-C", str(ROOT), *args],
            env={**clean, **dict(w.split("=", 1) for w in env)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, f"`{cmd.text}` ({cmd.doc}): make -n says\n{done.stderr}"
        return
    parser = parser_of(prog)
    assert parser is not None
    try:
        parser.parse_args(args)
    except SystemExit as e:
        pytest.fail(f"`{cmd.text}` ({cmd.doc}) does not parse (exit {e.code})")


# --- the README stays a README ------------------------------------------------------------


def test_readme_stays_short() -> None:
    size = len((ROOT / "README.md").read_bytes())
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes; detail belongs in docs/"


def test_local_links_resolve() -> None:
    """Every relative link and image of the README and docs/ points at a file that exists."""
    broken = []
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = (doc.parent / target.split("#", 1)[0]).resolve()
            if not path.exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
    assert not broken, "links to nothing:\n" + "\n".join(broken)
