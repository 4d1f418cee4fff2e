"""Watching the processes a run starts: a switch, a PS shard or a worker that dies ends the
run (ProcessDied) within WATCH_INTERVAL, named with its pid, how it ended and its log's tail;
and the workers' start together and progress.
"""

from __future__ import annotations

import contextlib
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from experiment.config import ExperimentError
from topologies.switches import log_tail

DIED_LOG_LINES = 8
WATCH_INTERVAL = 0.5  # seconds between checks of the run's processes
START_TIMEOUT = 60.0  # seconds for every worker to say 'ready'


def exit_description(returncode: int) -> str:
    """'exited with code 3', 'was killed by SIGKILL' (Popen's negative return codes)."""
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}"


@dataclass
class Watched:
    """A process the runner started and watches: a switch, a PS shard or a worker.
    `may_finish`: exiting with 0 is how it ends its part (an agent), not a failure."""

    label: str
    proc: subprocess.Popen
    log: Path
    may_finish: bool = False

    @property
    def pid(self) -> int:
        """Its pid; on its server for a process started on another one (topologies/remote.py's
        RemoteProcess: the process group hotagg started there)."""
        return getattr(self.proc, "remote_pid", None) or self.proc.pid

    def failed(self) -> int | None:
        """Its return code if it has exited in a way that ends the run, else None."""
        rc = self.proc.poll()
        if rc is None or (rc == 0 and self.may_finish):
            return None
        return rc


class ProcessDied(ExperimentError):
    """A process the run started (a switch, a PS shard, a worker) exited before its phase
    was over. The first line of the message names it, its pid and how it ended; the lines
    after it are the tail of its log."""

    def __init__(self, when: str, watched: Watched, returncode: int) -> None:
        self.label, self.pid, self.returncode = watched.label, watched.pid, returncode
        # A process on another server (a RemoteProcess) is named with it, and a log it keeps
        # there (a switch's) is read there.
        server = getattr(watched.proc, "server", None)
        where = f" on {server}" if server is not None else ""
        self.what = (
            f"{when}: {watched.label} (pid {watched.pid}) {exit_description(returncode)}{where}"
        )
        remote_log = getattr(watched.proc, "remote_log", None)
        log = remote_log or watched.log
        tail = remote_log.tail(DIED_LOG_LINES) if remote_log else log_tail(log, DIED_LOG_LINES)
        lines = "\n".join(f"  | {line}" for line in tail.splitlines())
        super().__init__(f"{self.what}; the run stopped. Last lines of {log}:\n{lines}")


def raise_first_death(when: str, watched: Sequence[Watched]) -> None:
    """Raise ProcessDied for the first of `watched` that has died."""
    for w in watched:
        rc = w.failed()
        if rc is not None:
            raise ProcessDied(when, w, rc)


# `check(when)`: raises ProcessDied if one of the run's processes has died.
Check = Callable[[str], None]


def settle_then_check(proc: subprocess.Popen, check: Check, when: str) -> None:
    """An agent's output ended early: give its exit a moment to arrive (a process killed on
    another server ends its ssh a little later), so that a death is reported as one
    (ProcessDied, exit code 4) rather than as an agent that did not start."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(WATCH_INTERVAL)
    check(when)


def _err_tail(err: Path, lines: int = 5) -> str:
    return " | ".join(err.read_text().strip().splitlines()[-lines:])


def start_together(
    phase: str, workers: Sequence[tuple[str, subprocess.Popen, Path]], check: Check
) -> None:
    """Wait until every worker (label, process, its stderr file) is set up ('ready'), then
    let them all go at once: Python start-up takes tens of ms per process, and workers
    started one after another would otherwise put that skew into iteration 1 (and so into
    the p99)."""
    deadline = time.monotonic() + START_TIMEOUT
    for label, proc, err in workers:
        assert proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        ready: list = []
        while not ready and time.monotonic() < deadline:
            ready = sel.select(timeout=min(WATCH_INTERVAL, deadline - time.monotonic()))
            if not ready:
                check(f"{phase}: starting the workers")
        sel.close()
        line = proc.stdout.readline() if ready else ""
        if line.strip() != "ready":
            settle_then_check(proc, check, f"{phase}: starting the workers")
            raise ExperimentError(
                f"{label} did not start ({line.strip() or 'no output'}): {_err_tail(err)}"
            )
    for label, proc, err in workers:
        assert proc.stdin is not None
        try:
            proc.stdin.write("go\n")
            proc.stdin.flush()
            proc.stdin.close()
        except OSError as e:  # it died after 'ready'
            raise ExperimentError(
                f"{label} exited before it could start ({e}): {_err_tail(err)}"
            ) from None


def follow(phase: str, workers: Sequence[subprocess.Popen], iterations: int, check: Check) -> None:
    """Show progress as the slowest worker's iteration; returns when all workers exit.
    Raises ProcessDied within WATCH_INTERVAL of a switch, PS or worker dying."""
    done = {id(p): 0 for p in workers}
    sel = selectors.DefaultSelector()
    for p in workers:
        assert p.stdout is not None
        sel.register(p.stdout, selectors.EVENT_READ, p)
    open_streams = len(workers)
    tty = sys.stdout.isatty()

    def show(n: int) -> None:
        bar = "#" * (20 * n // iterations)
        end = "\r" if tty and n < iterations else "\n"
        print(f"hotagg: {phase:8s} [{bar:20s}] iteration {n}/{iterations}", end=end, flush=True)

    # The start is shown at once: by the first look at their output the workers may
    # be past iteration 0 already.
    shown = slowest = 0
    show(0)
    while open_streams:
        check(f"{phase} phase at iteration {slowest}/{iterations}")
        for key, _ in sel.select(timeout=WATCH_INTERVAL):
            line = key.fileobj.readline()  # type: ignore[union-attr]
            if not line:
                sel.unregister(key.fileobj)
                open_streams -= 1
            elif line.startswith("progress "):
                done[id(key.data)] = int(line.split()[1].split("/")[0])
        slowest = min(done.values())
        if slowest != shown and (tty or slowest == iterations or slowest % 5 == 0):
            show(slowest)
            shown = slowest


def wait_all(
    phase: str, procs: Sequence[tuple[str, subprocess.Popen]], timeout: float, check: Check
) -> None:
    """After the last iteration: wait for every agent to exit (the PS shards end after the
    last barrier), while a switch can still die; ExperimentError names one that does not."""
    end = time.monotonic() + timeout
    while any(p.poll() is None for _, p in procs) and time.monotonic() < end:
        check(f"{phase}: after the last iteration")
        time.sleep(0.05)
    check(f"{phase}: at the end")
    for label, proc in procs:
        if proc.poll() is None:
            raise ExperimentError(f"{phase}: {label} did not exit within {timeout:.0f} s")


def stop_all(procs: Sequence[tuple[str, subprocess.Popen]]) -> None:
    """Terminate whatever is still running (a failed phase's agents), then kill it."""
    for _, proc in procs:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
