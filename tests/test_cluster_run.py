"""`python -m experiment run --servers ...` end to end (issue #32 step 5), against the second
"server" of tests/cluster_server.py (an sshd in a network namespace, sharing this machine's
filesystem): a leafspine:2:2 with the rack of the PS here and the other rack (its leaf and
two workers) on the server, joined over VXLAN, on both targets. The run is exact, the remote
workers' files come back into the run's folder (they wrote them in the server's own staging
directory), and a remote worker or switch SIGKILLed on the server ends the run with exit
code 4, leaving nothing behind on either side. The
tests skip with the reason without root, openssh-server, sudo or (BMv2) simple_switch_grpc.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from experiment.schema import load_summary
from experiment.staging import STAGING_ROOT
from tests.cluster_server import NetnsServer, netns_server_for
from tests.test_e2e import SMALL, missing_prerequisites
from topologies.cluster import Server, ssh_command
from topologies.network import DEFAULT_STATE_DIR
from topologies.switches import REPO_ROOT, bmv2_missing

REMOTE_WORKERS = ("w1", "w2")  # leafspine:2:2: h3 and h4 on s2, the server's rack
PHASES = ("warmup", "server", "offload")


@pytest.fixture(scope="module")
def netns_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetnsServer]:
    if why := missing_prerequisites():
        pytest.skip(why)
    yield from netns_server_for(tmp_path_factory.mktemp("run-server"))


def run_argv(server: NetnsServer, runs: Path, tag: str, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "experiment", "run", *SMALL, "--topo", "leafspine:2:2",
        "--runs-dir", str(runs), "--grpc-base-port", "0", "--intf-prefix", tag,
        "--servers", server.address, *extra,
    ]  # fmt: skip


def server_devices(server: NetnsServer) -> list[str]:
    """The server's interfaces in its root namespace but its own veth and lo."""
    out = subprocess.run(["ip", "-n", server.netns, "-br", "link"], capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    return [line.split()[0] for line in out.splitlines()
            if not line.startswith(("lo", f"{server.tag}s"))]  # fmt: skip


def processes_of(run_id: str) -> list[str]:
    """Command lines of live processes that name the run (its staging directory or marks)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if run_id in cmdline and "pytest" not in cmdline:
                found.append(f"{entry.name}: {cmdline[:200]}")
    return found


def check_args(*argv: str) -> None:
    """`python -m experiment run argv`'s options checked as make run checks them."""
    from experiment.__main__ import build_parser
    from experiment.options import check, config_of

    check(config_of(build_parser().parse_args(["run", *argv])))


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            ["--servers", "10.0.0.2", "--jobs", "2"],
            "SERVERS=10.0.0.2: JOBS=2 is not taken: one job",
        ),
        (["--servers", "10.0.0.2", "--switch-restarts", "1"], "SWITCH_RESTARTS=1 is not taken"),
        (["--place", "h3@10.0.0.2"], "PLACE=h3@10.0.0.2 puts nodes on SERVERS=: give SERVERS="),
        (
            ["--servers", "10.0.0.2,10.0.0.2"],
            "SERVERS=10.0.0.2,10.0.0.2: server 10.0.0.2 is listed",
        ),
        (["--servers", "10.0.0.2", "--place", "h2@10.0.0.2"], "h2 (the parameter server h2"),
        (["--servers", "10.0.0.2", "--place", "s1@10.0.0.2"], "s1 (the parameter server h2 or"),
        (["--servers", "10.0.0.2", "--place", "h9@10.0.0.2"], "has no host or switch 'h9'"),
    ],
)
def test_what_a_run_over_servers_cannot_take_is_refused_in_one_line(
    argv: list[str], says: str
) -> None:
    from experiment.config import PreflightError

    with pytest.raises(PreflightError) as e:
        # JOBS=2 builds its own star
        check_args(*([] if "--jobs" in argv else ["--topo", "leafspine:2:2"]), *argv)
    assert says in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_an_agents_paths_in_the_run_folder_move_to_its_servers_staging_directory(
    tmp_path: Path,
) -> None:
    from experiment.staging import Staging

    run_dir = tmp_path / "runs" / "r1"
    staging = Staging(run_dir, "r1")
    server = Server("10.0.0.2")
    argv = ["python", "-m", "hosts.worker", "--log", str(run_dir / "warmup" / "w1.csv"),
            "--ps", "10.0.0.1:5000", "--trace", str(tmp_path / "t.csv")]  # fmt: skip
    mapped, paths = staging.map_argv(server, argv)
    assert mapped[4] == str(STAGING_ROOT / "r1" / "10.0.0.2" / "warmup" / "w1.csv")
    assert mapped[:4] + mapped[5:] == argv[:4] + argv[5:]  # the rest as it was
    assert paths == ["warmup/w1.csv"]


@pytest.mark.root
@pytest.mark.parametrize("target", ["embedded", "bmv2"])
def test_a_run_over_two_servers_is_exact_and_its_files_come_back(
    netns_server: NetnsServer, tmp_path: Path, target: str
) -> None:
    if target == "bmv2" and (why := bmv2_missing()):
        pytest.skip(why)
    runs = tmp_path / "runs"
    tag = f"r{target[0]}{os.getpid() % 1000}"
    before = server_devices(netns_server)
    proc = subprocess.run(
        run_argv(netns_server, runs, tag, "--target", target),
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    output = proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.returncode == 0, output
    assert f"on root@{netns_server.address}: s2 h3 h4" in proc.stdout, output
    run_dir = (runs / "latest").resolve()
    summary = load_summary(run_dir / "summary.json")
    assert summary["exact"], summary["params_sha256"]
    for phase in PHASES:
        for worker in REMOTE_WORKERS:
            # written on the server, under its staging directory, and brought back (its
            # stderr came through the ssh: empty when all went well)
            for name in (f"{worker}.csv", f"{worker}.json", f"{worker}.pushes.npz"):
                assert (run_dir / phase / name).stat().st_size > 0, f"{phase}/{name}"
            assert (run_dir / phase / f"{worker}.err").exists()
            assert json.loads((run_dir / phase / f"{worker}.json").read_text())["iterations"]
        assert (run_dir / phase / "params0.npy").exists()
    switch_log = run_dir / "switch-logs" / "s2.log"  # the remote switch's, fetched
    assert switch_log.stat().st_size > 0
    # Nothing of the run is left: the staging directory, processes, the server's devices.
    assert_nothing_left(netns_server, run_dir.name, before)


def remote_pid(netns_server: NetnsServer, label: str, deadline: float) -> tuple[str, int]:
    """(run id, pid on the server) of the process `label` ("agent h3", "switch s2") as the
    run recorded it on the server (topologies/cluster_state.py), read there over ssh."""
    from topologies.cluster_state import SERVERS_DIR

    records = DEFAULT_STATE_DIR / SERVERS_DIR / netns_server.address
    show = f'for f in {shlex.quote(str(records))}/*.json; do cat "$f"; echo; echo ---; done'
    ssh = [*ssh_command(Server(netns_server.address)), shlex.join(["sh", "-c", show])]
    while time.monotonic() < deadline:
        out = subprocess.run(ssh, capture_output=True, text=True, timeout=30).stdout
        for text in out.split("\n---\n"):
            with contextlib.suppress(json.JSONDecodeError):
                record = json.loads(text)
                if (group := (record.get("process_groups") or {}).get(label)) is not None:
                    return record["run_id"], int(group["pid"])
        time.sleep(0.2)
    raise AssertionError(f"no {label} recorded on the server")


@contextlib.contextmanager
def running(argv: list[str]) -> Iterator[subprocess.Popen]:
    """A run in the background (stdout and stderr together), killed if a check fails first."""
    run = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        yield run
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()


def assert_nothing_left(netns_server: NetnsServer, run_id: str, devices: list[str]) -> None:
    from topologies.cluster_state import SERVERS_DIR

    # the run's records: the coordinator's state file and the server's own (shared /tmp here)
    assert not (DEFAULT_STATE_DIR / f"{run_id}.json").exists()
    assert not (DEFAULT_STATE_DIR / SERVERS_DIR / netns_server.address / f"{run_id}.json").exists()
    assert not (STAGING_ROOT / run_id).exists()
    assert processes_of(run_id) == []
    assert server_devices(netns_server) == devices


@pytest.mark.root
@pytest.mark.parametrize(
    ("victim", "label"),
    [("agent h3", "worker 1 on h3"), ("switch s2", "embedded switch s2")],
    ids=["worker", "switch"],
)
def test_a_remote_process_killed_on_its_server_ends_the_run_with_code_4(
    netns_server: NetnsServer, tmp_path: Path, victim: str, label: str
) -> None:
    runs = tmp_path / "runs"
    # A long warm-up: the worker is killed in it, started and waiting for 'go' or under way.
    argv = run_argv(netns_server, runs, f"rk{os.getpid() % 1000}", "--warmup", "300")
    before = server_devices(netns_server)
    with running(argv) as run:
        run_id, pid = remote_pid(netns_server, victim, time.monotonic() + 120)
        if victim.startswith("switch"):  # up before any agent: wait for the phase
            remote_pid(netns_server, "agent h3", time.monotonic() + 120)
        time.sleep(0.5)  # most likely into its iterations (a kill before 'ready' ends so too)
        # The recorded pid is its wrapper's there, which leads its process group: kill the
        # process, its child.
        kill = shlex.join(["pkill", "-KILL", "-P", str(pid)])
        ssh = subprocess.run([*ssh_command(Server(netns_server.address)), kill],
                             capture_output=True, text=True, timeout=30)  # fmt: skip
        assert ssh.returncode == 0, ssh.stderr
        output, _ = run.communicate(timeout=120)
    assert run.returncode == 4, output[-3000:]
    died = f"{label} (pid {pid}) was killed by SIGKILL on root@{netns_server.address}"
    assert died in output, output[-3000:]
    assert_nothing_left(netns_server, run_id, before)


@pytest.mark.root
def test_an_interrupted_run_over_two_servers_cleans_up_both_and_keeps_the_phase_files(
    netns_server: NetnsServer, tmp_path: Path
) -> None:
    """Ctrl-C (SIGINT) in a phase: exit code 130, the remote workers' files of the cut-short
    phase back in the run's folder, nothing of the run left on either side."""
    runs = tmp_path / "runs"
    before = server_devices(netns_server)
    argv = run_argv(netns_server, runs, f"ri{os.getpid() % 1000}", "--warmup", "300")
    with running(argv) as run:
        run_id, _ = remote_pid(netns_server, "agent h3", time.monotonic() + 120)
        time.sleep(1.5)  # into the warm-up's iterations
        run.send_signal(signal.SIGINT)
        output, _ = run.communicate(timeout=120)
    assert run.returncode == 130, output[-3000:]
    warmup = runs / run_id / "warmup"
    for worker in REMOTE_WORKERS:
        assert (warmup / f"{worker}.csv").stat().st_size > 0, output[-3000:]
    assert (runs / run_id / "switch-logs" / "s2.log").exists()
    assert_nothing_left(netns_server, run_id, before)
