"""The Makefile: what make sweep honours and refuses, WORKERS' default, make clean and
make clean-results, and make help listing every target and variable. Real make
invocations, with -n or before anything runs (no root, no network)."""

from __future__ import annotations

import itertools
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from experiment import sweep

REPO = Path(__file__).resolve().parent.parent
MAKEFILE = REPO / "Makefile"

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def make(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """`make` for real, the install step taken as done (-o)."""
    return subprocess.run(
        ["make", "-s", "-C", str(cwd), "-o", f"{REPO}/.venv/.hotagg-installed", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def recipe(target: str) -> str:
    """A target's recipe as written in the Makefile (its lines up to the next blank line)."""
    text = MAKEFILE.read_text()
    m = re.search(rf"^{re.escape(target)}:[^\n]*\n((?:\t[^\n]*\n)+)", text, re.M)
    assert m, target
    return m.group(1)


def variables_used(text: str) -> set[str]:
    """The upper-case make variables a piece of Makefile reads: $(NAME), and the names
    given to the `given` function."""
    names = set(re.findall(r"\$\(([A-Z][A-Z0-9_]*)\)", text))
    names |= set(re.findall(r"\$\(call given,([A-Z][A-Z0-9_]*)\)", text))
    return names


# make run's variables: the ones its recipe reads (BMV2_BINARY reaches it by the environment)
RUN_VARIABLES = (variables_used(recipe("run")) - {"PY"}) | {"BMV2_BINARY"}
SWEEP_REFUSES = {"SEED", "TOPO", "PS", "KEEP", "SERVERS", "PLACE"}
# A value each variable can take, and the argument the sweep must then pass on
SWEEP_HONOURS = {
    "WORKERS": ("4,8", "--workers '4,8'"),
    "SKEW": ("1.2", "--skew '1.2'"),
    "HOT_SLOTS": ("64,128", "--hot-slots '64,128'"),
    "LOSS": ("0.01", "--loss '0.01'"),
    "BW": ("3", "--bw '3'"),
    "SEEDS": ("1,2,3", "--seeds '1,2,3'"),
    "SHARDS": ("1,2", "--shards '1,2'"),
    "LEAVES": ("2,4", "--leaves '2,4'"),
    "HOSTS_PER_LEAF": ("2,4", "--hosts-per-leaf '2,4'"),
    "AGGREGATE": ("ps-leaf,leaves", "--aggregate 'ps-leaf,leaves'"),
    "JOBS": ("1,2", "--jobs '1,2'"),
    "SPLIT": ("equal", "--split 'equal'"),
    "ITERATIONS": ("12", "--iterations '12'"),
    "TARGET": ("bmv2", "--target 'bmv2'"),
    "KEYS": ("5000", "--keys '5000'"),
    "WORKLOAD": ("lr", "--workload 'lr'"),
    "TRACE": ("t.csv", "--workload trace --trace 't.csv'"),
    "WORKLOAD_ARGS": ("--batch 32", "--workload-args='--batch 32'"),
    "HOTSET": ("dynamic", "--hotset 'dynamic'"),
    "HOTSET_SOURCE": ("switch", "--hotset-source 'switch'"),
    "DRIFT": ("every=5,fraction=0.3", "--drift 'every=5,fraction=0.3'"),
    # the grid's lists of values that hold commas: `;` separates them
    "COMPUTE": ("0;normal:20ms,5ms", "--compute '0;normal:20ms,5ms'"),
    "STRAGGLERS": ("1:3;1:3,p=0.1:3", "--stragglers '1:3;1:3,p=0.1:3'"),
    "SYNC": ("bsp,ssp:2,async", "--sync 'bsp,ssp:2,async'"),
    "REAL_BW": ("10G", "--real-bw '10G'"),
    "SWITCH_RESTARTS": ("1", "--switch-restarts '1'"),
    "GRPC_PORT": ("6000", "--grpc-base-port '6000'"),
    "PREFIX": ("sw", "--intf-prefix 'sw'"),
}


def test_every_make_run_variable_is_honoured_or_refused_by_make_sweep() -> None:
    assert RUN_VARIABLES - {"BMV2_BINARY"} <= set(SWEEP_HONOURS) | SWEEP_REFUSES, (
        "a make run variable make sweep neither passes on nor refuses: "
        f"{RUN_VARIABLES - set(SWEEP_HONOURS) - SWEEP_REFUSES}"
    )
    assert {"TOPO", "SEED", "WORKERS", "HOTSET"} <= RUN_VARIABLES  # the parse found them


@pytest.mark.parametrize("name", sorted(SWEEP_HONOURS))
def test_make_sweep_passes_each_variable_it_honours(name: str) -> None:
    value, passed = SWEEP_HONOURS[name]
    proc = make("-n", "sweep", f"{name}={value}")
    assert proc.returncode == 0, proc.stderr
    command = " ".join(proc.stdout.replace("\\\n", " ").split())  # the recipe's lines joined
    assert "-m experiment sweep" in command and passed in command, command
    # without it on the command line, the sweep's own default holds
    assert passed not in " ".join(make("-n", "sweep").stdout.split())
    # and the sweep takes what make passes; a run option, it gives every run
    from experiment.__main__ import build_parser
    from experiment.options import MAKE_NAMES

    argv = _first_command(command)
    args = build_parser().parse_args(argv[argv.index("sweep") :])
    if name in {MAKE_NAMES[dest] for dest in sweep.FIXED_RUN_OPTIONS}:
        assert sweep.run_options(args), name
    if name in SWEEP_AXES:  # a list the sweep takes as an axis of its grid, value by value
        assert len(getattr(args, SWEEP_AXES[name])) == value.count(SWEEP_AXES_SEPARATOR[name]) + 1


# make run's variables that make sweep takes as lists, by the sweep's option, and their separator
SWEEP_AXES = {"COMPUTE": "compute", "STRAGGLERS": "stragglers", "SYNC": "sync"}
SWEEP_AXES_SEPARATOR = {"COMPUTE": ";", "STRAGGLERS": ";", "SYNC": ","}


def _first_command(command: str) -> list[str]:
    """The words of a recipe's first shell command: up to its first `;` outside quotes
    (a quoted value, as COMPUTE='0;20ms', may hold one)."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(itertools.takewhile(lambda word: word != ";", lexer))


def test_bmv2_binary_reaches_the_sweeps_runs_through_the_environment() -> None:
    """make exports it: every run of the grid (a child of the sweep) sees it."""
    assert re.search(r"^export BMV2_BINARY$", MAKEFILE.read_text(), re.M)
    proc = make("--eval", "show: ; @echo $$BMV2_BINARY", "show", "BMV2_BINARY=my-switch")
    assert proc.stdout.strip() == "my-switch"


@pytest.mark.parametrize(
    ("given", "instead"),
    [
        ("SEED=3", "use SEEDS=1,2,..."),
        ("TOPO=pod-topo.json", "use make run for a topology file"),
        ("PS=h4", "use make run TOPO=<file> PS=<host>"),
        ("KEEP=1", "use make run KEEP=1"),
    ],
)
def test_make_sweep_refuses_what_it_cannot_honour(given: str, instead: str) -> None:
    """Exit 2 and one line naming the variable and what to use instead, before anything is
    installed or run (also under -n: the refusal is make's own)."""
    for args in (["-n", "sweep", given, "HOTSET=dynamic"], ["sweep", given]):
        proc = make(*args)
        assert proc.returncode == 2 and proc.stdout == ""
        [line] = proc.stderr.strip().splitlines()
        assert f"make sweep: {given} is make run's" in line and instead in line, line


def test_make_sweep_names_every_refused_variable() -> None:
    proc = make("sweep", "SEED=3", "KEEP=1", "SEEDS=1,2")
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert "SEED=3" in line and "(also refused: KEEP)" in line


@pytest.mark.parametrize(
    ("given", "instead"),
    [
        ("SEEDS=1,2", "SEED=N"),
        ("SHARDS=2", "star:N:S"),
        ("LEAVES=2", "use make run TOPO=leafspine:L:H"),
        ("HOSTS_PER_LEAF=4", "use make run TOPO=leafspine:L:H"),
    ],
)
def test_make_run_refuses_the_sweeps_lists(given: str, instead: str) -> None:
    proc = make("-n", "run", given)
    assert proc.returncode == 2 and instead in proc.stderr and given in proc.stderr


def test_make_run_leaves_workers_to_the_topology_unless_given() -> None:
    """WORKERS empty: no --workers, so the run takes every worker host of TOPO (the
    experiment's check, tests/test_experiment_options.py)."""
    command = make("-n", "run", "TOPO=pod-topo.json", "PS=h4").stdout
    assert "--topo 'pod-topo.json'" in command and "--ps 'h4'" in command
    assert "--workers" not in command
    assert "--workers '2'" in make("-n", "run", "WORKERS=2").stdout


def _copy_makefile(tmp_path: Path) -> Path:
    shutil.copy(MAKEFILE, tmp_path / "Makefile")
    for name in ("runs/20250101-x/summary.json", "sweeps/20250101/report.md", "build/x.json"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("{}")
    (tmp_path / "runs" / "latest").symlink_to("20250101-x")
    return tmp_path


def test_make_clean_keeps_the_results(tmp_path: Path) -> None:
    work = _copy_makefile(tmp_path)
    assert make("clean", cwd=work).returncode == 0
    assert not (work / "build").exists()
    assert (work / "runs" / "20250101-x" / "summary.json").exists()
    assert (work / "sweeps" / "20250101" / "report.md").exists()


def test_make_clean_results_says_what_it_deletes_then_deletes_it(tmp_path: Path) -> None:
    work = _copy_makefile(tmp_path)
    proc = make("clean-results", cwd=work)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert re.search(r"deleting runs/ \(.*; entries: 1\)", lines[0]), lines  # not latest
    assert re.search(r"deleting sweeps/ \(.*; entries: 1\)", lines[1]), lines
    assert not (work / "runs").exists() and not (work / "sweeps").exists()
    assert (work / "build").exists()  # results only
    proc = make("clean-results", cwd=work)  # nothing left: says so, and succeeds
    assert proc.returncode == 0 and "no runs/" in proc.stdout


def test_make_help_lists_every_target_and_variable() -> None:
    text = make("help").stdout
    makefile = MAKEFILE.read_text()
    targets = set(re.findall(r"^([a-z][a-z0-9-]*):(?!=)", makefile, re.M)) - {"all"}
    assert {"clean-results", "run", "sweep", "stop", "test"} <= targets
    for target in targets:
        assert re.search(rf"^\s*make {re.escape(target)}\b", text, re.M), target
    phony = set(re.search(r"^\.PHONY:(.*)$", makefile, re.M).group(1).split())
    assert targets <= phony | {"all"}, targets - phony
    # every variable the Makefile reads, but make's own and those it sets itself (= or :=,
    # where a user's value is a ?= default)
    internal = set(re.findall(r"^([A-Za-z0-9_.]+)\s*:?=", makefile, re.M)) | {"MAKECMDGOALS"}
    for name in variables_used(makefile) - internal:
        assert re.search(rf"\b{name}\b", text), name
    for name in ("RUN", "SEEDS", "SHARDS", "LEAVES", "HOSTS_PER_LEAF", "PYTEST_ARGS", "VENV",
                 "WORKERS"):  # fmt: skip
        assert re.search(rf"\b{name}=", text), name


def test_make_help_states_the_sweeps_own_defaults() -> None:
    text = " ".join(make("help").stdout.split())
    for name, value in sweep.DEFAULTS.items():
        assert f"{name.upper()}={value}" in text, name
    iterations = next(a.default for a in _sweep_parser()._actions if a.dest == "iterations")
    assert f"ITERATIONS={iterations}" in text


def _sweep_parser():
    import argparse

    parser = argparse.ArgumentParser()
    sweep.add_arguments(parser)
    return parser
