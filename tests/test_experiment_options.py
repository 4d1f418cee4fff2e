"""The experiment's option parsing and its JSON output, in process (no root, no network)."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from contract.constants import MAX_WORKERS
from experiment.__main__ import build_parser
from hosts.stats import dumps_strict


@pytest.mark.parametrize("skew", ["nan", "inf", "-inf", "NaN", "x"])
def test_non_finite_skew_is_refused(skew: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["run", "--skew", skew])
    assert e.value.code == 2
    assert "--skew" in capsys.readouterr().err


def test_finite_skew_and_ps_list_parse() -> None:
    args = build_parser().parse_args(["run", "--skew", "1.3", "--ps", "h4,h5", "--topo", "star:8"])
    assert args.skew == [1.3] and args.ps == ["h4", "h5"] and str(args.topo) == "star:8"


def test_hotset_and_drift_parse_and_default_to_static_without_drift() -> None:
    args = build_parser().parse_args(["run"])
    assert args.hotset == "static" and args.drift is None and args.hotset_every is None
    assert args.hotset_source == "ps"
    assert build_parser().parse_args(["run", "--hotset-source", "switch"]).hotset_source == "switch"
    args = build_parser().parse_args(
        ["run", "--hotset", "dynamic", "--drift", "every=5,fraction=0.3", "--hotset-every", "3"]
    )
    # normalised, as the workers get it: the head is explicit
    assert args.hotset == "dynamic" and args.drift == "every=5,fraction=0.3,head=256"
    assert args.hotset_every == 3
    assert build_parser().parse_args(["run", "--drift", "none"]).drift is None


def test_summary_json_is_strict() -> None:
    text = dumps_strict({"p99": float("nan"), "rows": [1.5, float("inf")], "n": 3})
    assert json.loads(text) == {"p99": None, "rows": [1.5, None], "n": 3}
    assert "NaN" not in text and "Infinity" not in text


# --- every make knob is checked before anything is built, and named --------------------------

REPO = Path(__file__).resolve().parent.parent
# The make variable, and the run's arguments as the Makefile passes them.
BAD_PARSE = [
    ("WORKERS", ["--workers", "0"]),
    ("WORKERS", ["--workers", str(MAX_WORKERS + 1)]),
    ("WORKERS", ["--workers", "four"]),
    ("ITERATIONS", ["--iterations", "0"]),
    ("SKEW", ["--skew", "-1"]),
    ("KEYS", ["--keys", "0"]),
    ("HOT_SLOTS", ["--hot-slots", "0"]),
    ("HOT_SLOTS", ["--hot-slots", "16385"]),
    ("LOSS", ["--loss", "1"]),
    ("LOSS", ["--loss", "nan"]),
    ("SEED", ["--seed", "-1"]),
    ("SEED", ["--seed", str(2**32)]),
    ("SEED", ["--seed", "x"]),
    ("WORKLOAD", ["--workload", "uniform"]),
    ("BW", ["--bw", "0"]),
    ("BW", ["--bw", "5000"]),
    ("BW", ["--bw", "fast"]),
    ("TARGET", ["--target", "tofino"]),
    ("GRPC_PORT", ["--grpc-base-port", "70000"]),
    ("GRPC_PORT", ["--grpc-base-port", "-1"]),
    ("HOTSET", ["--hotset", "sometimes"]),
    ("DRIFT", ["--drift", "every=0,fraction=0.3"]),
    ("DRIFT", ["--drift", "fraction=0.3"]),
    ("DRIFT", ["--drift", "every=5,fraction=1.5"]),
    ("DRIFT", ["--drift", "every=5,fraction=0.3,speed=2"]),
]


@pytest.mark.parametrize(("knob", "argv"), BAD_PARSE, ids=lambda v: " ".join(v) if v else "")
def test_malformed_options_name_their_make_variable(
    knob: str, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["run", *argv])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"{knob} ({argv[0]})" in err and err.startswith("hotagg: error:"), err


def test_workers_up_to_the_switch_limit_parse_and_one_more_is_refused_saying_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert build_parser().parse_args(["run", "--workers", str(MAX_WORKERS)]).workers == [
        MAX_WORKERS
    ]
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["run", "--workers", str(MAX_WORKERS + 1)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"WORKERS (--workers): {MAX_WORKERS + 1} is not in 1..{MAX_WORKERS}" in err, err


def _trace(path: Path, iterations: int) -> Path:
    path.write_text("".join(f"{t},{w},{t * 7 + w}\n" for t in range(iterations) for w in range(2)))
    return path


def bad_checks(tmp_path: Path) -> list[tuple[str, list[str]]]:
    """Options that parse but cannot work here, each with what the message must name."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    _OPEN.append(taken)
    return [
        ("WORKERS=5", ["--workers", "5"]),  # the default star has 4 worker hosts
        ("TOPO=", ["--topo", str(tmp_path / "nosuch.json")]),
        ("TOPO=", ["--topo", "star:0"]),
        ("PS=h99", ["--ps", "h99"]),
        ("WORKLOAD=trace needs TRACE", ["--workload", "trace"]),
        ("TRACE=", ["--workload", "trace", "--trace", str(tmp_path / "nosuch.csv")]),
        ("TRACE=", ["--workload", "trace", "--trace", str(_trace(tmp_path / "t.csv", 3))]),
        ("TRACE= is for WORKLOAD=trace", ["--trace", str(tmp_path / "t.csv")]),
        ("KEYS=", ["--keys", str(10**14)]),
        ("GRPC_PORT=", ["--grpc-base-port", str(taken.getsockname()[1])]),
        (
            "GRPC_PORT=65535",
            ["--topo", "leafspine:2:2", "--workers", "3", "--grpc-base-port", "65535"],
        ),
        ("PREFIX=Bad", ["--intf-prefix", "Bad"]),
        ("PREFIX=muchtoolong", ["--intf-prefix", "muchtoolong"]),
        ("BMV2_BINARY=no-such-switch", ["--target", "bmv2"]),
        (
            "DRIFT=every=5,fraction=0.3,head=256: goes with WORKLOAD=zipf or lr",
            [
                "--workload",
                "trace",
                "--trace",
                str(_good_trace(tmp_path / "t60.csv", 60)),
                "--drift",
                "every=5,fraction=0.3",
            ],
        ),
        (
            "DRIFT=every=5,fraction=0.3,head=500: drift: head=500 must be smaller",
            ["--keys", "500", "--drift", "every=5,fraction=0.3,head=500"],
        ),
    ]


_OPEN: list[socket.socket] = []


def _good_trace(path: Path, iterations: int) -> Path:
    path.write_text("".join(f"{t},0,{t}\n" for t in range(1, iterations + 1)))
    return path


def test_options_that_cannot_work_here_are_refused_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each is refused with exit 2 and a message naming the make variable, before root is
    even asked for and before a run directory (or anything else) exists."""
    from experiment.__main__ import main

    monkeypatch.setenv("BMV2_BINARY", "no-such-switch")
    monkeypatch.setattr("os.geteuid", lambda: 1000)  # the root check comes after the options
    runs = tmp_path / "runs"
    try:
        for named, argv in bad_checks(tmp_path):
            assert main(["run", "--runs-dir", str(runs), *argv]) == 2, argv
            err = capsys.readouterr().err
            assert named in err and "needs root" not in err, (argv, err)
    finally:
        for s in _OPEN:
            s.close()
    assert not runs.exists()
    # Good options get as far as the root check (nothing above refused them by mistake).
    assert main(["run", "--runs-dir", str(runs), "--topo", "star:2", "--workers", "2"]) == 2
    assert "needs root" in capsys.readouterr().err


def _make(*args: str) -> subprocess.CompletedProcess:
    """`make` in this checkout, for real; the install step is taken as done (-o)."""
    venv = REPO / ".venv"
    return subprocess.run(
        ["make", "-s", "-C", str(REPO), "-o", f"{venv}/.hotagg-installed", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("knobs", "named"),
    [
        (["SEED=-1"], "SEED (--seed): -1"),
        (["WORKLOAD=trace"], "WORKLOAD=trace needs TRACE"),
        (["GRPC_PORT=x"], "GRPC_PORT (--grpc-base-port): 'x'"),
        (["PREFIX=UPPER"], "PREFIX=UPPER"),
        (["HOTSET=sometimes"], "HOTSET (--hotset): invalid choice: 'sometimes'"),
        (["HOTSET_SOURCE=pss"], "HOTSET_SOURCE (--hotset-source): invalid choice: 'pss'"),
        (["HOTSET_SOURCE=switch"], "HOTSET=static runs none (add HOTSET=dynamic)"),
        (["SWITCH_RESTARTS=-1"], "SWITCH_RESTARTS (--switch-restarts): -1"),
        (["DRIFT=every=x,fraction=0.3"], "DRIFT (--drift): drift 'every=x,fraction=0.3'"),
        (["KEYS=100", "DRIFT=every=5,fraction=0.3"], "DRIFT=every=5,fraction=0.3,head=256: "),
    ],
)
def test_make_run_refuses_bad_knobs_and_says_the_exit_code(knobs: list[str], named: str) -> None:
    """Through make for real: the option is named, the experiment's exit code (2, usage) is
    on the last line, and make fails (GNU make's own status for a failed recipe is 2)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    proc = _make("run", *knobs)
    assert named in proc.stderr, proc.stderr
    assert "make run: the experiment exited with code 2" in proc.stderr
    assert proc.returncode == 2


def test_exit_codes_are_the_documented_ones() -> None:
    """The codes the manual documents are the ones __main__ returns."""
    readme = (REPO / "docs" / "experiment.md").read_text()
    for code, meaning in [
        (1, "differ"),
        (2, "options"),
        (3, "failed"),
        (4, "died"),
        (130, "interrupted"),
    ]:
        assert re.search(rf"\| `{code}` \|[^\n]*{meaning}", readme), code


# --- WORKERS: empty means every worker host of the topology ---------------------------------

# The shape of the P4 tutorials' exercises/basic/pod-topo/topology.json: four hosts, two
# leaves and two spines, no hotagg roles (PS= names the parameter server).
POD_TOPO = {
    "hosts": {
        f"h{i}": {"ip": f"10.0.{i}.{i}/24", "mac": f"08:00:00:00:0{i}:{i}{i}", "commands": []}
        for i in (1, 2, 3, 4)
    },
    "switches": {f"s{i}": {"runtime_json": f"pod-topo/s{i}-runtime.json"} for i in (1, 2, 3, 4)},
    "links": [
        ["h1", "s1-p1"], ["h2", "s1-p2"], ["s1-p3", "s3-p1"], ["s1-p4", "s4-p2"],
        ["h3", "s2-p1"], ["h4", "s2-p2"], ["s2-p3", "s4-p1"], ["s2-p4", "s3-p2"],
    ],
}  # fmt: skip


def _checked(*argv: str):
    from experiment.options import check, config_of

    cfg = config_of(build_parser().parse_args(["run", *argv]))
    check(cfg)
    return cfg


def test_workers_default_to_every_worker_host_of_the_topology(tmp_path: Path) -> None:
    from topologies.topology import load_topology

    pod = tmp_path / "pod-topo.json"
    pod.write_text(json.dumps(POD_TOPO))
    assert build_parser().parse_args(["run"]).workers is None  # not make run's old 4
    star = REPO / "topologies" / "star.json"
    assert _checked().workers == len(load_topology(star).workers)
    assert _checked("--topo", "star:3").workers == 3
    assert _checked("--topo", "star:9:2").workers == 9
    # make run TOPO=pod-topo.json PS=h4: the other three hosts are the workers
    assert _checked("--topo", str(pod), "--ps", "h4").workers == 3
    assert _checked("--topo", str(pod), "--ps", "h3,h4").workers == 2
    assert _checked("--topo", str(pod), "--ps", "h4", "--workers", "2").workers == 2


def test_more_workers_than_the_topology_has_is_still_an_error(tmp_path: Path) -> None:
    from experiment.config import PreflightError

    pod = tmp_path / "pod-topo.json"
    pod.write_text(json.dumps(POD_TOPO))
    with pytest.raises(PreflightError, match=r"WORKERS=4, but .* has 3 worker hosts .*empty"):
        _checked("--topo", str(pod), "--ps", "h4", "--workers", "4")
