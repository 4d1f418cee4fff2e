"""hotagg-ctl against the embedded switch's real P4Runtime server, and p4runtime-shell's own
command line against `python -m softswitch` (the issue's end-to-end check)."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from contract.constants import HOT_KEYS_SIZE, MAX_WORKERS
from contract.names import hot_keys_table as table
from contract.names import set_slot_action as set_slot
from controller.cli import main
from controller.client import SwitchClient
from controller.hot_keys import HotKeys
from controller.p4info import P4Info
from tests.test_controller import (  # noqa: F401 (the fixtures are used by name)
    P4INFO_PATH,
    REPO,
    Switch,
    bare_switch_fixture,
    closed_port,
    push_frame,
    switch_fixture,
)

PY = sys.executable


def ctl(capsys: pytest.CaptureFixture, addr: str, *argv: str) -> tuple[int, str, str]:
    rc = main(["--grpc-addr", addr, "--p4info", str(P4INFO_PATH), *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hotagg-ctl: error: "), err
    assert "Traceback" not in err
    return lines[0]


def test_workflow_in_human_and_json_form(capsys, monkeypatch, bare_switch: Switch) -> None:
    s, a = bare_switch, bare_switch.addr
    assert ctl(capsys, a, "pipeline", "push")[0] == 0
    rc, out, _ = ctl(capsys, a, "job", "add", "--job-id", "1", "--slots", "256")
    assert rc == 0 and "slots 0..255" in out
    rc, out, _ = ctl(capsys, a, "hotkeys", "install", "--job-id", "1", "--keys", "7,0x10,9")
    assert rc == 0 and "3 keys added" in out and "entries/s" in out
    assert {e.match: e.params for e in s.hot(6).entries()} == {
        (1, 7): (0,),
        (1, 16): (1,),
        (1, 9): (2,),
    }
    rc, out, _ = ctl(capsys, a, "tenancy", "admit", "--job-id", "1", "--worker-id", "0",
                     "--port", "1", "--addr", "10.0.0.1")  # fmt: skip
    assert rc == 0 and out.strip() == "job 1 worker 0: port 1, 10.0.0.1: admitted"
    s.pipeline.process(1, push_frame(1, [16, 16, 16]))  # worker 0 of job 1, from 10.0.0.1
    rc, out, _ = ctl(capsys, a, "--json", "hotkeys", "list", "--job-id", "1")
    rows = {r["key"]: r for r in json.loads(out)}
    assert rc == 0 and rows[16]["packets"] == 3 and rows[16]["offset"] == 1 and rows[7]["complete"]
    rc, out, _ = ctl(capsys, a, "counters", "show", "--top", "1")
    assert rc == 0 and "lookup2.hits" in out and re.search(r"\b1\s+16\s+3\b", out)
    rc, out, _ = ctl(capsys, a, "--json", "stats", "show")
    assert rc == 0 and json.loads(out)["PUSH"]["packets"] == 1
    assert json.loads(out)["HOT_APPLIED"]["packets"] == 3
    assert ctl(capsys, a, "stats", "clear")[0] == 0
    assert s.pipeline.counters["HotaggIngress.stats"].read(5) == (0, 0)
    rc, out, _ = ctl(capsys, a, "loss", "set", "0.05")
    assert rc == 0 and "rate 3277/65536" in out
    rc, out, _ = ctl(capsys, a, "--json", "loss", "show")
    assert json.loads(out)["rate"] == 3277
    topo = str(REPO / "topologies" / "star.json")
    rc, out, _ = ctl(capsys, a, "forwarding", "install", "--topo", topo, "--switch", "s1")
    assert rc == 0 and "5 inserted" in out
    assert len(s.pipeline.tables["HotaggIngress.ipv4_lpm"]) == 5
    rc, out, _ = ctl(capsys, a, "forwarding", "list")
    assert "10.0.0.5/32 -> port 5 mac 08:00:00:00:00:05" in out
    rc, out, _ = ctl(capsys, a, "--json", "hotkeys", "show", "--keys", "9,7")
    assert [r["key"] for r in json.loads(out)] == [7, 9]
    monkeypatch.setattr(sys, "stdin", io.StringIO("9\n"))
    rc, out, _ = ctl(capsys, a, "hotkeys", "evict", "--job-id", "1", "--keys", "-")
    assert rc == 0 and len(s.hot(0)) == 2
    rc, out, _ = ctl(capsys, a, "job", "remove", "--job-id", "1")
    assert rc == 0 and "2 hot keys evicted, 1 admissions revoked" in out
    assert len(s.pipeline.tables["HotaggIngress.worker_admission"]) == 0
    assert len(s.hot(3)) == 0 and len(s.pipeline.tables["HotaggIngress.jobs"]) == 0
    rc, out, _ = ctl(capsys, a, "--json", "job", "list")
    assert rc == 0 and json.loads(out) == []


def test_service_address_and_chain_next_set_show_and_clear(capsys, switch: Switch) -> None:
    a, t = switch.addr, switch.pipeline.tables
    for noun, name in (("service-address", "service_address"), ("chain-next", "chain_next")):
        rc, out, _ = ctl(capsys, a, noun, "show")
        assert rc == 0 and out.startswith("none: ")
        rc, out, _ = ctl(capsys, a, noun, "set", "10.0.2.254")
        assert rc == 0 and out.strip() == "10.0.2.254"
        assert t["HotaggIngress." + name].default()[1] == (0x0A0002FE,)
        rc, out, _ = ctl(capsys, a, "--json", noun, "show")
        assert rc == 0 and json.loads(out) == {"address": "10.0.2.254"}
        rc, _, err = ctl(capsys, a, noun, "set", "10.0.2")
        assert rc == 5 and "not an IPv4 address" in one_line_error(err)
        assert t["HotaggIngress." + name].default()[1] == (0x0A0002FE,)  # unchanged
        rc, out, _ = ctl(capsys, a, "--json", noun, "clear")
        assert rc == 0 and json.loads(out) == {"address": None}
        assert t["HotaggIngress." + name].default()[1] == (0,)


def test_tenancy_from_a_topology_and_by_hand(capsys, switch: Switch) -> None:
    a, t = switch.addr, switch.pipeline.tables
    topo = str(REPO / "topologies" / "star.json")
    install = ["tenancy", "install", "--topo", topo, "--switch", "s1", "--job-id", "3"]
    rc, out, _ = ctl(capsys, a, *install, "--workers", "2", "--dry-run")
    assert rc == 0 and out.splitlines() == [
        "job 3 ps: port 5, 10.0.0.5",
        "job 3 worker 0: port 1, 10.0.0.1",
        "job 3 worker 1: port 2, 10.0.0.2",
    ] and len(t["HotaggIngress.worker_admission"]) == 0  # fmt: skip
    rc, out, _ = ctl(capsys, a, *install, "--workers", "2")
    assert rc == 0 and "3 admissions (3 inserted, 0 kept, 0 deleted)" in out
    assert {e.match for e in t["HotaggIngress.ps_admission"].entries()} == {(3, 5, 0x0A000005)}
    # PS=h4 as make run takes it: h4 becomes the PS, the others workers in name order.
    rc, out, _ = ctl(capsys, a, "--json", *install, "--ps", "h4", "--replace")
    data = json.loads(out)
    assert rc == 0 and (data["inserted"], data["kept"], data["deleted"]) == (3, 2, 1)
    assert [(x["role"], x["port"]) for x in data["admissions"]] == [
        ("ps", 4), ("worker", 1), ("worker", 2), ("worker", 3), ("worker", 5)
    ]  # fmt: skip
    rc, out, _ = ctl(capsys, a, "tenancy", "list", "--job-id", "3")
    assert rc == 0 and re.search(r"3\s+worker 3\s+5\s+10\.0\.0\.5", out)
    one = ["--job-id", "3", "--ps", "--port", "4", "--addr", "10.0.0.4"]
    rc, out, _ = ctl(capsys, a, "tenancy", "revoke", *one)
    assert rc == 0 and out == "job 3 ps: port 4, 10.0.0.4: revoked\n"
    rc, _, err = ctl(capsys, a, "tenancy", "revoke", *one)
    assert rc == 9 and "is not admitted" in one_line_error(err)
    rc, _, err = ctl(capsys, a, "tenancy", "admit", "--job-id", "3", "--worker-id",
                     str(MAX_WORKERS), "--port", "1", "--addr", "10.0.0.1")  # fmt: skip
    assert rc == 5
    assert f"--worker-id: {MAX_WORKERS} is not in 0..{MAX_WORKERS - 1}" in one_line_error(err)
    rc, _, err = ctl(capsys, a, "tenancy", "admit", "--job-id", "3", "--ps", "--port", "1",
                     "--addr", "10.0.0")  # fmt: skip
    assert rc == 5 and "not an IPv4 address" in one_line_error(err)
    rc, _, err = ctl(capsys, a, *install, "--workers", "9")
    assert rc == 5 and "has 4 worker hosts" in one_line_error(err)
    rc, out, _ = ctl(capsys, a, "tenancy", "clear")
    assert rc == 0 and "all jobs: 4 admissions revoked" in out
    assert ctl(capsys, a, "tenancy", "list")[1].strip() == "no admissions"


def test_hot_set_from_statistics(capsys, tmp_path: Path, switch: Switch) -> None:
    a = switch.addr
    stats = tmp_path / "freq.csv"
    stats.write_text("# test\nkey,updates\n" + "".join(f"{k},{100 - k}\n" for k in range(100)))
    ctl(capsys, a, "job", "add", "--job-id", "1", "--slots", "64")
    rc, out, _ = ctl(capsys, a, "hotkeys", "install", "--job-id", "1", "--stats", str(stats),
                     "--budget", "10", "--dry-run")  # fmt: skip
    assert (
        rc == 0 and "10 keys cover 18.9% of updates (955 of 5050" in out and len(switch.hot(0)) == 0
    )
    # keys 0..5 have 95..100 updates: a floor of 95 takes only those, within the budget
    rc, out, _ = ctl(capsys, a, "hotkeys", "install", "--job-id", "1", "--stats", str(stats),
                     "--budget", "10", "--min-updates", "95", "--dry-run")  # fmt: skip
    assert rc == 0 and out.startswith("6 keys cover") and len(switch.hot(0)) == 0
    rc, _, err = ctl(capsys, a, "hotkeys", "install", "--job-id", "1", "--keys", "1",
                     "--min-updates", "3")  # fmt: skip
    assert rc != 0 and "--min-updates" in err
    rc, out, _ = ctl(capsys, a, "hotkeys", "install", "--job-id", "1", "--stats", str(stats),
                     "--coverage", "0.5")  # fmt: skip
    # sum of 100..101-n >= 2525 first at n = 30
    assert rc == 0 and out.startswith("30 keys cover 50.") and len(switch.hot(0)) == 30
    rc, out, _ = ctl(capsys, a, "--json", "hotkeys", "install", "--job-id", "1", "--stats",
                     str(stats), "--budget", "5", "--replace")  # fmt: skip
    data = json.loads(out)
    assert data["hotset"]["keys"] == [0, 1, 2, 3, 4] and data["evicted"] == 25
    assert {e.match[1] for e in switch.hot(7).entries()} == {0, 1, 2, 3, 4}
    # Key 99 is the coldest in the file, but the switch counted many hits for it.
    ctl(capsys, a, "hotkeys", "install", "--job-id", "1", "--keys", "99")
    ctl(capsys, a, "tenancy", "admit", "--job-id", "1", "--worker-id", "0", "--port", "1",
        "--addr", "10.0.0.1")  # fmt: skip
    for seq in range(1, 201):
        switch.pipeline.process(1, push_frame(1, [99], seq=seq))
    rc, out, _ = ctl(capsys, a, "--json", "hotkeys", "install", "--job-id", "1", "--stats",
                     str(stats), "--budget", "1", "--with-hits", "--dry-run")  # fmt: skip
    assert json.loads(out)["keys"] == [99]


def test_exit_codes(capsys, tmp_path: Path, switch: Switch) -> None:
    a = switch.addr
    bad_stats = tmp_path / "bad.csv"
    bad_stats.write_text("1,2\n3,x\n")
    ctl(capsys, a, "job", "add", "--job-id", "1", "--slots", "2")
    cases = [
        (2, ["job", "add", "--job-id", "1"]),
        (2, ["hotkeys", "install", "--job-id", "1", "--keys", "1", "--stats", "f"]),
        (2, ["frobnicate"]),
        (4, ["hotkeys", "install", "--job-id", "1", "--keys", "1,2,3"]),
        (5, ["hotkeys", "install", "--job-id", "1", "--keys", "1,x"]),
        (5, ["hotkeys", "install", "--job-id", "1", "--keys", "18446744073709551616"]),
        (5, ["hotkeys", "install", "--job-id", "1", "--stats", str(bad_stats)]),
        (5, ["hotkeys", "install", "--job-id", "70000", "--keys", "1"]),
        (5, ["loss", "set", "1.5"]),
        (5, ["loss", "set", "nan"]),
        (5, ["forwarding", "install", "--topo", str(tmp_path / "none.json"), "--switch", "s1"]),
        (6, ["hotkeys", "install", "--job-id", "42", "--keys", "1"]),
        (6, ["job", "remove", "--job-id", "42"]),
        (9, ["job", "add", "--job-id", "1", "--slots", "2"]),
        (9, ["hotkeys", "evict", "--job-id", "1", "--keys", "5"]),
    ]
    for code, argv in cases:
        rc, _, err = ctl(capsys, a, *argv)
        assert rc == code, (argv, err)
        if code != 2:
            one_line_error(err)
    assert "malformed" not in err
    assert len(switch.hot(0)) == 0  # nothing written by the failures


def test_unreachable_switch_exit_code(capsys) -> None:
    rc, _, err = ctl(capsys, f"127.0.0.1:{closed_port()}", "job", "list")
    assert rc == 3 and "unreachable" in one_line_error(err)


def test_no_pipeline_and_wrong_p4info_exit_code(
    capsys, tmp_path: Path, bare_switch: Switch
) -> None:
    rc, _, err = ctl(capsys, bare_switch.addr, "job", "list")
    assert rc == 8 and "no pipeline" in one_line_error(err)
    ctl(capsys, bare_switch.addr, "pipeline", "push")
    other = P4Info.from_file(P4INFO_PATH).message
    other.tables[0].preamble.id += 1
    path = tmp_path / "other.p4info.txtpb"
    path.write_text(str(other))
    rc = main(["--grpc-addr", bare_switch.addr, "--p4info", str(path), "job", "list"])
    assert rc == 8 and "does not fit" in one_line_error(capsys.readouterr().err)


def test_not_primary_exit_code(capsys, switch: Switch) -> None:
    with switch.client((0, 100)):
        rc, _, err = ctl(capsys, switch.addr, "job", "add", "--job-id", "1", "--slots", "8")
        assert rc == 7 and "election-id" in one_line_error(err)
        rc, out, _ = ctl(capsys, switch.addr, "job", "list")  # a backup may read
        assert rc == 0 and out.strip() == "no jobs"
    assert len(switch.pipeline.tables["HotaggIngress.jobs"]) == 0


def test_real_resource_exhausted_exit_code(capsys, switch: Switch) -> None:
    # Another controller filled instance 7, the first one an install writes.
    with switch.client((0, 2)) as c:
        enc = switch.p4info.encoder(table(7), set_slot(7))
        c.write_entries("insert", [enc((9, k), (0,)) for k in range(HOT_KEYS_SIZE)])
    ctl(capsys, switch.addr, "job", "add", "--job-id", "1", "--slots", "8")
    rc, _, err = ctl(capsys, switch.addr, "hotkeys", "install", "--job-id", "1", "--keys", "1")
    assert rc == 4 and "RESOURCE_EXHAUSTED" in one_line_error(err)
    assert len(switch.hot(0)) == 0  # instance 0, written last, never saw the key


def test_console_script_and_module_run_as_processes() -> None:
    addr = f"127.0.0.1:{closed_port()}"
    for argv in ([PY, "-m", "controller"], [str(Path(PY).parent / "hotagg-ctl")]):
        if not Path(argv[-1]).exists() and argv[-1] != "controller":
            continue  # console script not installed in this environment
        p = subprocess.run([*argv, "--grpc-addr", addr, "stats", "show"], capture_output=True,
                           text=True, timeout=60, cwd=REPO)  # fmt: skip
        assert p.returncode == 3 and p.stdout == ""
        one_line_error(p.stderr)


# --- p4runtime-shell's own command line against `python -m softswitch` ---


@pytest.fixture
def softswitch_process() -> Iterator[str]:
    if not P4INFO_PATH.exists():
        pytest.skip(f"{P4INFO_PATH} is missing")
    proc = subprocess.Popen(
        [PY, "-m", "softswitch", "--name", f"clitest{os.getpid()}", "--grpc-addr", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )  # fmt: skip
    try:
        line = proc.stdout.readline()  # the readiness line, or "" if it exited
        m = re.search(r"P4Runtime on ([\d.]+:\d+)", line)
        assert m, f"softswitch did not start: {line!r} {proc.stderr.read() if not line else ''}"
        yield m.group(1)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def p4runtime_shell(addr: str, commands: str, config: str | None = None) -> str:
    """Run `python -m p4runtime_sh` with `commands` on stdin (IPython reads piped lines)."""
    argv = [PY, "-m", "p4runtime_sh", "--grpc-addr", addr, "--device-id", "0",
            "--election-id", "0,1"]  # fmt: skip
    if config:
        argv += ["--config", config]
    env = {**os.environ, "TERM": "dumb"}
    p = subprocess.run(argv, input=commands, capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    return p.stdout


SHELL_INSERT = """
te = table_entry["HotaggIngress.lookup0.hot_keys"](action="HotaggIngress.lookup0.set_slot")
te.match["job_id"] = "1"
te.match["key"] = "0x123456789"
te.action["offset"] = "7"
te.insert()
print("READ", [(e.match["key"].exact.value.hex(), e.action["offset"].value.hex()) for e in table_entry["HotaggIngress.lookup0.hot_keys"].read()])
"""  # noqa: E501

SHELL_DELETE = """
te = table_entry["HotaggIngress.lookup0.hot_keys"]
te.match["job_id"] = "1"
te.match["key"] = "0x123456789"
te.delete()
print("LEFT", len(list(table_entry["HotaggIngress.lookup0.hot_keys"].read())))
"""


def test_p4runtime_shell_inserts_reads_and_deletes(tmp_path: Path, softswitch_process: str) -> None:
    addr = softswitch_process
    device_config = tmp_path / "hotagg.json"  # the embedded target ignores p4_device_config
    device_config.write_text("{}\n")
    out = p4runtime_shell(addr, SHELL_INSERT, f"{P4INFO_PATH},{device_config}")
    assert "READ [('0123456789', '07')]" in out
    p4 = P4Info.from_file(P4INFO_PATH)
    with SwitchClient(addr, 0, (0, 2)) as c:
        [hk] = HotKeys(c, p4).list(all_instances=True)
        assert (hk.job_id, hk.key, hk.offsets[0], hk.offsets[1]) == (1, 0x123456789, 7, None)
    out = p4runtime_shell(addr, SHELL_DELETE)
    assert "LEFT 0" in out
    with SwitchClient(addr, 0, (0, 2)) as c:
        assert HotKeys(c, p4).list(all_instances=True) == []


# --- global options before or after the command ---------------------------------------------


def test_global_options_work_before_and_after_the_command(capsys, switch: Switch) -> None:
    a, p4info = switch.addr, str(P4INFO_PATH)
    assert ctl(capsys, a, "job", "add", "--job-id", "1", "--slots", "8")[0] == 0
    assert ctl(capsys, a, "hotkeys", "install", "--job-id", "1", "--keys", "5,6")[0] == 0
    outputs = []
    for argv in (
        ["--grpc-addr", a, "--p4info", p4info, "--json", "hotkeys", "list"],
        ["hotkeys", "list", "--json", "--grpc-addr", a, "--p4info", p4info],
        ["hotkeys", "--json", "--grpc-addr", a, "list", "--p4info", p4info],
    ):
        assert main(argv) == 0, argv
        outputs.append(json.loads(capsys.readouterr().out))  # --json took effect
    assert outputs[0] == outputs[1] == outputs[2]
    assert sorted(r["key"] for r in outputs[0]) == [5, 6]
    # Given after the verb, an option wins over the same one before the noun; one not
    # given after it keeps the value from before (not the default).
    rc = main(["--grpc-addr", f"127.0.0.1:{closed_port()}", "--p4info", p4info,
               "job", "list", "--grpc-addr", a, "--json"])  # fmt: skip
    assert rc == 0 and json.loads(capsys.readouterr().out)[0]["job_id"] == 1
    rc = main(["--grpc-addr", f"127.0.0.1:{closed_port()}", "--timeout", "2", "job", "list",
               "--json"])  # fmt: skip
    assert rc == 3 and "unreachable" in one_line_error(capsys.readouterr().err)
    # ... and its value is checked there as before the noun (exit 5, one line)
    rc = main(["job", "list", "--grpc-addr", a, "--election-id", "0,0"])
    assert rc == 5 and "not a valid election id" in one_line_error(capsys.readouterr().err)


def test_global_options_after_the_command_keep_the_values_before_it() -> None:
    from controller.cli import build_parser

    parser = build_parser()
    before = parser.parse_args(["--device-id", "3", "--election-id", "1,2", "stats", "show"])
    after = parser.parse_args(["stats", "show", "--device-id", "3", "--election-id", "1,2"])
    mixed = parser.parse_args(["--device-id", "3", "stats", "--election-id", "1,2", "show"])
    for args in (before, after, mixed):
        assert (args.device_id, args.election_id, args.timeout) == (3, (1, 2), 10.0)
    plain = parser.parse_args(["stats", "show"])
    assert (plain.device_id, plain.election_id, plain.json) == (0, (0, 1), False)


def test_confidence_help_says_which_error_model_each_loop_uses(capsys) -> None:
    """hotagg-ctl's loop reads switch hits and cold counts (Poisson); make run's dynamic loop
    reads the PS's presence counts and takes a cold key's as binomial
    (controller/online/estimators.py): the help must not claim one model for both."""
    from controller.online.estimators import ChangeRateEstimator
    from controller.online.observation import Observation
    from controller.online.policy import CONFIDENCE

    assert main(["hotkeys", "auto", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "binomial" in text and "Poisson" in text
    assert f"(default: {CONFIDENCE})" in text
    # the binomial error is the estimator's once the source knows the workers (presence)
    est = ChangeRateEstimator()
    est.update(Observation(counts={1: 4.0}, iterations=1, presence={}, workers=4))
    poisson = ChangeRateEstimator()
    poisson.update(Observation(counts={1: 4.0}, iterations=1))
    assert est.stderr(1) < poisson.stderr(1)
