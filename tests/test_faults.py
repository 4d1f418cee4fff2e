"""A switch, PS or worker that dies mid-run: the runner says which, within seconds, and
cleans up (experiment/processes.py: Watched, ProcessDied; exit code 4).

The end-to-end tests start a real `python -m experiment run` (Mininet, switch processes,
gRPC, the agents), kill one of its processes at a random point of a random measured phase,
and check the exit code, the message, how fast the run ended, and that nothing of the run is
left: no switch or agent process, no Mininet node shell (their namespaces die with them), no
interface, no state file. HOTAGG_FAULT_SEED replays a draw (the seed is in every message).
"""

from __future__ import annotations

import json
import os
import queue
import random
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from experiment import testbed
from experiment.config import RunConfig
from experiment.procedure import EXIT_PROCESS_DIED
from experiment.processes import ProcessDied, Watched, exit_description
from tests.test_e2e import SMALL
from topologies.network import DEFAULT_STATE_DIR, missing_prerequisites, switch_processes
from topologies.switches import REPO_ROOT, bmv2_missing
from topologies.targets import EmbeddedTarget

ENDS_WITHIN = 15.0  # seconds from the kill to the runner's exit, clean-up included
KILL_WITHIN = 2.0  # the latest kill point, in seconds into the phase
# The end-to-end tests' small run with phases long enough that the kill comes before the
# phase ends, on any machine: at 1 Mbit/s the PS link alone holds this run's iteration to
# 48 ms or more (the PS-link bound, experiment/model.py), so 100 iterations last 4.8 s or
# more. A kill after the end would fail the tests, whose messages name the phase.
# argparse: the last --iterations counts.
ITERATIONS = 100
RUN = [*SMALL, "--iterations", str(ITERATIONS), "--bw", "1"]


# --- unit: no root -----------------------------------------------------------------------


def test_exit_description_names_the_signal() -> None:
    assert exit_description(-9) == "was killed by SIGKILL"
    assert exit_description(-15) == "was killed by SIGTERM"
    assert exit_description(3) == "exited with code 3"


def test_a_dead_process_is_named_with_its_pid_and_log_tail(tmp_path: Path) -> None:
    log = tmp_path / "w0.err"
    log.write_text("".join(f"line {i}\n" for i in range(20)))
    proc = subprocess.Popen(["sleep", "30"])
    watched = Watched("worker 0 on h1", proc, log, may_finish=True)
    assert watched.failed() is None  # running
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert watched.failed() == -signal.SIGKILL
    err = ProcessDied("offload phase at iteration 5/200", watched, -signal.SIGKILL)
    first, *tail = str(err).splitlines()
    assert first.startswith(
        f"offload phase at iteration 5/200: worker 0 on h1 (pid {proc.pid}) was killed by SIGKILL"
    )
    assert tail[-1] == "  | line 19" and len(tail) == 8
    assert (err.label, err.pid, err.returncode) == ("worker 0 on h1", proc.pid, -9)


def test_an_agent_that_finishes_is_not_a_failure_but_a_switch_is(tmp_path: Path) -> None:
    done = subprocess.Popen(["true"])
    done.wait()
    assert Watched("worker 0", done, tmp_path / "x", may_finish=True).failed() is None
    assert Watched("switch s1", done, tmp_path / "x").failed() == 0
    failed = subprocess.Popen(["false"])
    failed.wait()
    assert Watched("worker 0", failed, tmp_path / "x", may_finish=True).failed() == 1


def test_a_p4runtime_failure_from_a_dead_switch_names_the_switch(tmp_path: Path) -> None:
    """Between phases (configuring, reading counters) the death shows as a P4Runtime error;
    the runner reports the switch instead, and passes other errors on unchanged."""
    from controller.errors import SwitchUnreachable

    log = tmp_path / "s1.log"
    log.write_text("s1: ready\n")
    proc = subprocess.Popen(["sleep", "30"])
    switch = SimpleNamespace(process=SimpleNamespace(proc=proc, log_path=log))
    topology = SimpleNamespace(switches={"s1": None}, workers=[], parameter_servers=[])
    exp = testbed.Testbed(RunConfig(), topology, EmbeddedTarget())
    exp.net = SimpleNamespace(switch=lambda name: switch)
    try:
        with pytest.raises(SwitchUnreachable), exp.naming_dead_switches("configuring"):
            raise SwitchUnreachable("switch at 127.0.0.1:1 unreachable")  # alive: as it was
        named = r"^configuring: embedded switch s1 \(pid \d+\) "
        with pytest.raises(ProcessDied, match=named), exp.naming_dead_switches("configuring"):
            proc.kill()
            raise SwitchUnreachable("switch at 127.0.0.1:1 unreachable")
        dead = pytest.raises(ProcessDied, match="was killed by SIGKILL")
        with dead, exp.naming_dead_switches("reading the counters"):
            pass  # known dead before the first RPC
    finally:
        proc.kill()
        proc.wait()


# --- end to end: real runs ---------------------------------------------------------------


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _pids_with(text: str) -> list[int]:
    """Pids of live (non-zombie) processes whose command line contains `text`."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and text in _cmdline(int(entry.name)):
            try:
                state = Path(f"/proc/{entry.name}/stat").read_text().rpartition(")")[2].split()[0]
            except (OSError, IndexError):
                continue
            if state != "Z":
                out.append(int(entry.name))
    return out


def _victim(victim: str, run_dir: Path, phase: str) -> tuple[int, str]:
    """The pid to kill and the label the runner gives it."""
    if victim == "switch":
        pids = switch_processes(run_dir.name)
        assert len(pids) == 1, pids
        return pids[0], "switch s1"
    if victim == "ps":
        (pid,) = _pids_with(f"{run_dir / phase}/ps0.csv")
        return pid, "PS shard 0 on"
    worker = random.randrange(3)
    (pid,) = _pids_with(f"{run_dir / phase}/w{worker}.csv")
    return pid, f"worker {worker} on"


@dataclass
class Killed:
    """What happened to a run whose `victim` was killed at a random point of `phase`."""

    draw: str  # the random choices, with the seed that replays them
    phase: str
    signal: signal.Signals
    pid: int
    label: str
    rc: int
    took: float  # seconds from the kill to the runner's exit
    stdout: str
    stderr: str
    run_dir: Path
    nodes: dict[str, int]  # Mininet node shells of the run
    prefix: str  # the run's interface prefix


def kill_during_run(tmp_path: Path, target: str, victim: str, *extra: str) -> Killed:
    """Start a real `python -m experiment run`, kill the victim (switch, ps, worker) a
    random 0.2-2 s into a random measured phase, and wait for the runner to exit."""
    if why := missing_prerequisites():
        pytest.skip(why)
    if target == "bmv2" and (why := bmv2_missing()):
        pytest.skip(f"BMv2 target: {why}")
    seed = int(os.environ.get("HOTAGG_FAULT_SEED") or random.randrange(1 << 30))
    rng = random.Random(seed)
    phase = rng.choice(["server", "offload"])
    delay = rng.uniform(0.2, KILL_WITHIN)
    sig = rng.choice([signal.SIGKILL, signal.SIGKILL, signal.SIGTERM])
    draw = f"seed {seed}: kill the {victim} {delay:.2f} s into {phase} with {sig.name}"
    random.seed(seed)  # _victim's choice of worker
    prefix = f"f{os.getpid() % 1000}{victim[0]}{target[0]}"
    runs = tmp_path / "runs"
    where = ["--runs-dir", str(runs), "--grpc-base-port", "0", "--intf-prefix", prefix]
    proc = subprocess.Popen(
        [sys.executable, "-m", "experiment", "run", "--target", target, *RUN, *where, *extra],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()
    stderr: list[str] = []
    readers = [
        threading.Thread(target=lambda: [*map(lines.put, proc.stdout), lines.put(None)]),
        threading.Thread(target=lambda: stderr.extend(proc.stderr)),
    ]
    for reader in readers:
        reader.start()
    out: list[str] = []
    try:
        while True:  # until the phase shows its start
            line = lines.get(timeout=300)
            if line is None:
                pytest.fail(f"{draw}: the run ended before {phase}: {''.join(out)[-2000:]}")
            out.append(line)
            if re.match(rf"hotagg: {phase} +\[ +\] iteration 0/", line):
                break
        time.sleep(delay)
        run_dir = (runs / "latest").resolve()
        nodes = json.loads((DEFAULT_STATE_DIR / f"{run_dir.name}.json").read_text())["nodes"]
        pid, label = _victim(victim, run_dir, phase)
        os.kill(pid, sig)
        killed = time.monotonic()
        rc = proc.wait(timeout=300)
        took = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for reader in readers:
            reader.join(10)
    while (line := lines.get()) is not None:
        out.append(line)
    return Killed(
        draw,
        phase,
        sig,
        pid,
        label,
        rc,
        took,
        "".join(out),
        "".join(stderr),
        run_dir,
        nodes,
        prefix,
    )


def assert_nothing_left(run: Killed) -> None:
    assert switch_processes(run.run_dir.name) == []
    assert _pids_with(str(run.run_dir)) == []
    for name, shell in run.nodes.items():
        assert f"mininet:{name}" not in _cmdline(shell), f"{run.draw}: node {name} survived"
    assert not [i for i in os.listdir("/sys/class/net") if i.startswith(run.prefix)]
    assert not (DEFAULT_STATE_DIR / f"{run.run_dir.name}.json").exists()


@pytest.mark.root
@pytest.mark.e2e
@pytest.mark.parametrize("target", ["embedded", "bmv2"])
@pytest.mark.parametrize("victim", ["switch", "ps", "worker"])
def test_a_process_killed_mid_phase_ends_the_run_in_seconds(
    tmp_path: Path, target: str, victim: str
) -> None:
    run = kill_during_run(tmp_path, target, victim)
    draw, err = run.draw, run.stderr
    assert run.rc == EXIT_PROCESS_DIED, f"{draw}: rc {run.rc}\n{run.stdout[-1500:]}\n{err[-1500:]}"
    assert run.took < ENDS_WITHIN, f"{draw}: the run took {run.took:.1f} s to end"
    errors = [line for line in err.splitlines() if line.startswith("hotagg: error:")]
    assert len(errors) == 1, f"{draw}: {err[-2000:]}"
    first = errors[0]
    assert re.match(
        rf"hotagg: error: {run.phase} phase at iteration \d+/{ITERATIONS}: .*{run.label}.* "
        rf"\(pid {run.pid}\) (was killed by SIG(KILL|TERM)|exited with code \d+); the run stopped",
        first,
    ), f"{draw}: {first}"
    if run.signal == signal.SIGKILL:
        assert "was killed by SIGKILL" in first
    assert "  | " in err  # the log tail follows
    assert_nothing_left(run)


@pytest.mark.root
@pytest.mark.e2e
@pytest.mark.parametrize("target", ["embedded", "bmv2"])
def test_a_restarted_switch_reruns_the_phase_and_the_run_stays_exact(
    tmp_path: Path, target: str
) -> None:
    """--switch-restarts 1: the dead switch is started again, configured again, and the
    phase it died in runs again from iteration 1; the run ends exact."""
    run = kill_during_run(tmp_path, target, "switch", "--switch-restarts", "1")
    draw = run.draw
    assert run.rc == 0, f"{draw}: rc {run.rc}\n{run.stdout[-1500:]}\n{run.stderr[-1500:]}"
    assert re.search(
        rf"{run.phase} phase at iteration \d+/{ITERATIONS}: .*switch s1 \(pid {run.pid}\) .*; "
        rf"restarting it and the {run.phase} phase",
        run.stdout,
    ), f"{draw}: {run.stdout[-2000:]}"
    summary = json.loads((run.run_dir / "summary.json").read_text())
    assert summary["exact"] is True, draw
    assert summary["modes"]["offload"]["updates_in_switch"] > 0
    (restart,) = json.loads((run.run_dir / "restarts.json").read_text())
    assert restart["switch"] == "s1" and restart["phase"] == run.phase
    assert restart["pid"] == run.pid
    failed = run.run_dir / restart["failed_attempt"]
    assert (failed / "s1.log").exists() and (run.run_dir / run.phase / "ps0.json").exists()
    assert_nothing_left(run)
