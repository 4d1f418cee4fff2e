"""HOTSET=dynamic's loop driver and the coverage against the oracle (experiment/hotset.py),
in process: real PS frequency files and worker logs written by their own writers, a fake
switch behind the online controller. The real loop on both targets: tests/test_e2e.py."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from contract.freqfile import write_frequency
from controller.online.estimators import RateEstimator
from controller.online.loop import OnlineController
from controller.online.policy import Changes, Hysteresis
from experiment import hotset
from experiment.config import HOTSET_EVERY, ExperimentError, RunConfig
from experiment.report import hot_set_line
from experiment.results import PhaseResult
from hosts.stats import CsvLog
from hosts.worker import LOG_COLUMNS
from hosts.workloads import DriftSpec, LogisticWorkload, ZipfWorkload


class FakeTarget:
    def __init__(self, keys: set[int], fail: bool = False) -> None:
        self.keys, self.fail = set(keys), fail
        self.applied: list[Changes] = []

    def current(self) -> set[int]:
        if self.fail:
            raise RuntimeError("switch unreachable")
        return set(self.keys)

    def apply(self, changes: Changes) -> None:
        self.keys -= set(changes.remove)
        self.keys |= set(changes.add)
        self.applied.append(changes)


class FakeSource:
    """Key 7 becomes popular; key 1 is no longer updated."""

    def __init__(self) -> None:
        self.reads = 0

    def read(self):
        from controller.online.observation import Observation

        self.reads += 1
        return Observation({7: 40.0}, iteration=2 * self.reads, iterations=2, complete=True)


def freq_file(path: Path, iterations: int) -> None:
    cold = np.zeros(16, np.int64)
    cold[3] = iterations
    write_frequency(path, cold, np.zeros(16, np.int64), {"job": 1, "iterations": iterations})


def test_freq_iterations_reads_the_ps_files_header(tmp_path: Path) -> None:
    path = tmp_path / "freq0.csv"
    assert hotset.freq_iterations(path) is None  # not written yet
    freq_file(path, 6)
    assert hotset.freq_iterations(path) == 6
    path.write_text("key,updates\n")  # not a frequency file
    assert hotset.freq_iterations(path) is None


def controller(target: FakeTarget, source: FakeSource) -> OnlineController:
    return OnlineController(target, source, RateEstimator(0.0), Hysteresis(1, min_rate=1.0))


def test_loop_steps_once_per_every_iterations_of_the_slowest_shard(tmp_path: Path) -> None:
    files = [tmp_path / "freq0.csv", tmp_path / "freq1.csv"]
    target, source = FakeTarget({1}), FakeSource()
    loop = hotset.OnlineLoop(controller(target, source), files, every=2).start()
    try:
        freq_file(files[0], 2)
        time.sleep(10 * hotset.POLL_S)
        assert source.reads == 0  # shard 1 has not reached iteration 2
        freq_file(files[1], 2)
        deadline = time.monotonic() + 5
        while source.reads < 1 and time.monotonic() < deadline:
            time.sleep(hotset.POLL_S)
        time.sleep(10 * hotset.POLL_S)
        assert source.reads == 1  # once per rewrite, not once per poll
        freq_file(files[0], 4)
        freq_file(files[1], 4)
        deadline = time.monotonic() + 5
        while source.reads < 2 and time.monotonic() < deadline:
            time.sleep(hotset.POLL_S)
    finally:
        steps = loop.stop()
    assert [s.iteration for s in steps] == [2, 4]
    assert target.keys == {7} and target.applied[0] == Changes([7], [1])
    assert not loop._thread.is_alive()
    assert loop.stop() == steps  # a second stop is harmless


def test_loop_steps_at_multiples_of_every_whatever_iteration_it_first_sees(
    tmp_path: Path,
) -> None:
    """A loop whose first look finds the PS at iteration 3 steps there, then at 4, 6, ...:
    a run steps at the same iterations however late its thread started."""
    files = [tmp_path / "freq0.csv"]
    source = FakeSource()

    def wait_for_reads(n: int) -> None:
        deadline = time.monotonic() + 5
        while source.reads < n and time.monotonic() < deadline:
            time.sleep(hotset.POLL_S)

    freq_file(files[0], 3)
    loop = hotset.OnlineLoop(controller(FakeTarget({1}), source), files, every=2).start()
    try:
        wait_for_reads(1)
        assert source.reads == 1
        freq_file(files[0], 4)
        wait_for_reads(2)
        assert source.reads == 2  # at 4, not 3 + 2
        freq_file(files[0], 5)
        time.sleep(10 * hotset.POLL_S)
        assert source.reads == 2
        freq_file(files[0], 6)
        wait_for_reads(3)
    finally:
        loop.stop()
    assert source.reads == 3


def test_loop_failure_is_the_phases_error_and_the_loop_ends(tmp_path: Path) -> None:
    files = [tmp_path / "freq0.csv"]
    freq_file(files[0], 2)
    loop = hotset.OnlineLoop(controller(FakeTarget({1}, fail=True), FakeSource()), files, 2)
    loop.start()
    deadline = time.monotonic() + 5
    while loop.error is None and time.monotonic() < deadline:
        time.sleep(hotset.POLL_S)
    with pytest.raises(ExperimentError, match="online hot-set loop failed: switch unreachable"):
        loop.stop()
    assert not any(t.name == "hotset-online" for t in threading.enumerate())


@pytest.mark.skipif(sys.platform != "linux", reason="per-thread priority is Linux's")
def test_the_loop_steps_at_the_lowest_cpu_priority_and_leaves_its_process_alone(
    tmp_path: Path,
) -> None:
    niceness: list[int] = []

    class Watched(FakeSource):
        def read(self):
            niceness.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
            return super().read()

    before = os.getpriority(os.PRIO_PROCESS, 0)
    if before >= hotset.LOOP_NICE:
        pytest.skip(f"the tests already run at nice {before}: nothing to lower")
    files = [tmp_path / "freq0.csv"]
    freq_file(files[0], 2)
    loop = hotset.OnlineLoop(controller(FakeTarget({1}), Watched()), files, 2).start()
    deadline = time.monotonic() + 5
    while not niceness and time.monotonic() < deadline:
        time.sleep(hotset.POLL_S)
    loop.stop()
    assert niceness == [hotset.LOOP_NICE]
    assert os.getpriority(os.PRIO_PROCESS, 0) == before  # the runner's thread is untouched


def test_oracle_is_the_best_budget_keys_of_each_iteration() -> None:
    workload = ZipfWorkload(2000, 1.1, 64, seed=4, drift=DriftSpec(2, 0.5, 32))
    got = hotset.oracle_per_iteration(workload, 3, 6, budget=10)
    for t, (best, total) in enumerate(got, 1):
        counts = Counter(k for w in range(3) for k in workload.pull_keys(w, t).tolist())
        assert total == sum(counts.values())
        assert best == sum(n for _, n in counts.most_common(10))
        assert best <= total
    # with room for every key the oracle covers everything
    everything = hotset.oracle_per_iteration(workload, 3, 2, budget=10**6)
    assert all(best == total for best, total in everything)


def test_expected_oracle_is_the_most_likely_keys_of_each_iteration() -> None:
    # The goal's oracle: the budget keys the drifting distribution makes most likely in t,
    # counted on t's draws. It never beats the hindsight oracle (t's own top keys), and on
    # Zipf draws it falls clearly short of it: the hindsight one profits from t's noise.
    workload = ZipfWorkload(20_000, 1.1, 256, seed=7, drift=DriftSpec(3, 0.3, 64))
    got = hotset.expected_oracle_per_iteration(workload, 4, 8, budget=50)
    hindsight = hotset.oracle_per_iteration(workload, 4, 8, budget=50)
    assert got is not None and len(got) == 8
    for t, (n, (best, _)) in enumerate(zip(got, hindsight), 1):
        top = set(workload.hottest(50, t).tolist())
        assert n == sum(len(top & set(workload.pull_keys(w, t).tolist())) for w in range(4))
        assert n <= best
    assert sum(got) < 0.95 * sum(b for b, _ in hindsight)
    lr = LogisticWorkload(1 << 16, 4, 100, batch=8, seed=1)
    assert hotset.expected_oracle_per_iteration(lr, 2, 2, 4) is None  # cannot name them


def worker_log(path: Path, rows: list[tuple[str, int, int, int]]) -> None:
    """rows: (kind, iteration, entries, mask) in the worker's own log format."""
    log = CsvLog(str(path), LOG_COLUMNS)
    for kind, t, n, mask in rows:
        row = {"kind": kind, "iteration": t, "seq": 1, "shard": 0, "entries": n, "hot": 0}
        row |= {"sent": "1.0", "reply": "1.1", "latency_us": "100.0", "mask": mask}
        log.write(tuple(row.get(column, "") for column in LOG_COLUMNS))
    log.close()


def fake_phase(tmp_path: Path, logs: list[list[tuple[str, int, int, int]]]) -> PhaseResult:
    for w, rows in enumerate(logs):
        worker_log(tmp_path / f"w{w}.csv", rows)
    return PhaseResult("offload", tmp_path, 1.0, [], [], {})


def test_achieved_counts_the_switchs_mask_bits_over_pushed_entries(tmp_path: Path) -> None:
    phase = fake_phase(
        tmp_path,
        [
            [("pull", 1, 8, 0xFF), ("push", 1, 8, 0b1011), ("push", 1, 3, 0), ("push", 2, 2, 3)],
            [("push", 1, 4, 0b1111), ("iteration", 1, 12, 0)],
        ],
    )
    assert hotset.achieved_per_iteration(phase, 2) == {1: (7, 15), 2: (2, 2)}


def test_the_loops_pace_defaults_to_its_sources_unless_given() -> None:
    # the switch source reads the switch's counters each step: a library user who picks it
    # gets its pace, not the PS source's
    for source, pace in HOTSET_EVERY.items():
        assert RunConfig(hotset="dynamic", hotset_source=source).hotset_every == pace
        assert RunConfig(hotset_source=source, hotset_every=5).hotset_every == 5
    assert HOTSET_EVERY["ps"] != HOTSET_EVERY["switch"]  # else this test tells nothing


def test_summary_block_and_table_line(tmp_path: Path) -> None:
    cfg = RunConfig(
        workers=2, iterations=2, keys=500, keys_per_iter=8, hotset="dynamic", drift=None
    )
    workload = ZipfWorkload(500, cfg.skew, 8, cfg.seed)
    # each worker pushes its keys of the iteration; the switch summed 2 of them in t=1
    logs = [
        [("push", t, len(workload.pull_keys(w, t)), 0b11 if (w, t) == (0, 1) else 0)
         for t in (1, 2)]
        for w in range(2)
    ]  # fmt: skip
    phase = fake_phase(tmp_path, logs)
    steps = [
        OnlineController(FakeTarget({1}), FakeSource(), RateEstimator(0.0), Hysteresis(1)).step()
    ]
    block = hotset.summarize(cfg, cfg.as_dict(), phase, budget=4, steps=steps)
    assert block["mode"] == "dynamic" and block["budget"] == 4
    assert block["every"] == cfg.hotset_every == HOTSET_EVERY["ps"]
    assert block["summed"] == [2, 0]
    assert block["updates"] == [
        sum(len(workload.pull_keys(w, t)) for w in range(2)) for t in (1, 2)
    ]
    assert block["coverage"][0] == pytest.approx(2 / block["updates"][0], abs=1e-6)
    for c, o in zip(block["coverage"], block["oracle_coverage"]):
        assert 0 <= c <= o <= 1
    assert block["moves"] == [{"step": 1, "iteration": 2, "added": 1, "removed": 1, "hot": 1}]
    assert block["keys_moved"] == 2 and block["reselections"] == 1
    assert block["coverage_ratio"] == pytest.approx(
        block["coverage_mean"] / block["oracle_coverage_mean"], rel=1e-5
    )
    for e, o in zip(block["expected_oracle_coverage"], block["oracle_coverage"]):
        assert 0 <= e <= o <= 1
    assert block["coverage_ratio_expected"] == pytest.approx(
        block["coverage_mean"] / block["expected_oracle_coverage_mean"], rel=1e-5
    )
    line = hot_set_line(block)
    assert "hot set (dynamic)" in line and "2 keys moved (1 in, 1 out) in 1 re-selection" in line
    assert ", expected top-4 " in line
    assert "\n" not in line

    from experiment.plots import coverage

    coverage(tmp_path / "coverage.png", {**block, "drift": "every=1,fraction=0.5,head=4"})
    assert (tmp_path / "coverage.png").stat().st_size > 0
    coverage(tmp_path / "static.png", {**block, "mode": "static", "moves": []})
    assert (tmp_path / "static.png").stat().st_size > 0


def test_recovery_pools_the_iterations_by_their_place_in_the_epoch() -> None:
    # every=4: epochs start at 5, 9, ...; the first epoch (1-4) is left out. Coverage is the
    # expected oracle times a factor that depends only on the place in the epoch, so that
    # factor is what comes out, however the expected oracle varies.
    factor = [0.5, 0.7, 0.9, 1.0]
    expected = [0.2 + 0.01 * (t % 7) for t in range(1, 15)]
    coverage = [e * factor[(t - 1) % 4] for t, e in enumerate(expected, 1)]
    coverage[:4] = [0.0] * 4  # the first epoch's: must not count
    assert hotset.by_epoch_offset(coverage, expected, 4) == pytest.approx(factor)
    assert hotset.by_epoch_offset(coverage[:4], expected[:4], 4) is None  # no later epoch
    # 6 iterations: offsets 0 and 1 seen once after the first epoch, 2 and 3 never
    assert hotset.by_epoch_offset(coverage[:6], expected[:6], 4) == pytest.approx(
        [0.5, 0.7, None, None]
    )


def test_summary_of_a_drifting_run_says_how_the_set_recovers(tmp_path: Path) -> None:
    drift = "every=2,fraction=0.5,head=4"
    cfg = RunConfig(workers=2, iterations=6, keys=500, keys_per_iter=8, drift=drift)
    workload = ZipfWorkload(500, cfg.skew, 8, cfg.seed, drift=DriftSpec.parse(drift))
    logs = [
        [("push", t, len(workload.pull_keys(w, t)), 0b1) for t in range(1, 7)] for w in range(2)
    ]
    block = hotset.summarize(cfg, cfg.as_dict(), fake_phase(tmp_path, logs), budget=4)
    recovery = block["coverage_ratio_by_epoch_offset"]
    assert recovery == pytest.approx(
        hotset.by_epoch_offset(block["coverage"], block["expected_oracle_coverage"], 2)
    )
    assert len(recovery) == 2 and all(0 < r <= 1 for r in recovery)

    from experiment.plots import coverage

    coverage(tmp_path / "coverage.png", block)  # static, with the recovery panel
    assert (tmp_path / "coverage.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
