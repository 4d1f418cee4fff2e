"""The conservation check (experiment/conservation.py) on fake run folders: a phase whose
final parameters are its pushes applied once passes, a lost and a doubled update are caught
and named by key, worker and iteration, missing or cut-short files are reported, and a run's
exactness takes the verdict in. Then real agents on 127.0.0.1 (a lossy, duplicating relay)
log each update once however often it was resent, and the check holds."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest

from experiment import conservation
from experiment.conservation import check_phase, exact, main, params_compared, run_verdict
from hosts.ps import ParameterServer
from hosts.ps_config import PSConfig, SyncMode
from hosts.push_log import PushLog, load_pushes, push_log_path
from hosts.stats import save_params
from hosts.worker import Worker, WorkerConfig
from hosts.workloads import LogisticWorkload, ZipfWorkload
from tests.agent_fakes import Relay

KEYS = 50
WORKERS = 2
ITERATIONS = 3


def updates(seed: int = 1) -> dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]:
    """(worker, iteration) -> the keys and int32 values it pushed: random, some keys pushed
    by both workers in one iteration, values of either sign."""
    rng = np.random.default_rng(seed)
    out = {}
    for w in range(WORKERS):
        for t in range(1, ITERATIONS + 1):
            keys = np.sort(rng.choice(KEYS, size=8, replace=False)).astype(np.uint64)
            values = rng.integers(-1000, 1000, size=8).astype(np.int32)
            values[values == 0] = 7  # a zero update moves nothing: the check cannot see it
            out[(w, t)] = (keys, values)
    return out


def write_phase(
    directory: Path,
    pushed: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]],
    params: np.ndarray,
    shards: int = 1,
) -> None:
    """A phase folder as a run leaves it: each worker's push log, each shard's parameters
    (zeros where it does not own the key) and summary."""
    directory.mkdir(parents=True, exist_ok=True)
    for w in range(WORKERS):
        log = PushLog(push_log_path(directory, w), 1, w, ITERATIONS)
        for t in range(1, ITERATIONS + 1):
            log.record(t, *pushed[(w, t)])
        log.close(complete=True)
    owner = np.arange(len(params)) % shards
    for s in range(shards):
        save_params(directory / f"params{s}.npy", np.where(owner == s, params, 0))
        summary = {"shard": s, "shards": shards, "workers": WORKERS}
        (directory / f"ps{s}.json").write_text(json.dumps(summary))


def applied_once(pushed) -> np.ndarray:
    """The PS's arithmetic: from zeros, every update's value subtracted once, in int64."""
    params = np.zeros(KEYS, np.int64)
    for keys, values in pushed.values():
        np.subtract.at(params, keys.astype(np.intp), values.astype(np.int64))
    return params


@pytest.mark.parametrize("shards", [1, 2])
def test_a_phase_with_every_update_applied_once_is_conserved(tmp_path: Path, shards) -> None:
    pushed = updates()
    write_phase(tmp_path / "offload", pushed, applied_once(pushed), shards)
    check = check_phase(tmp_path / "offload")
    assert check.status == "conserved", check.why
    assert check.updates == WORKERS * ITERATIONS * 8 and check.workers == WORKERS
    assert check.differing_keys == 0


def test_a_lost_update_is_caught_and_named(tmp_path: Path) -> None:
    pushed = updates()
    keys, values = pushed[(1, 2)]
    key, value = int(keys[3]), int(values[3])
    params = applied_once(pushed)
    params[key] += value  # worker 1's update of key in iteration 2 never applied
    write_phase(tmp_path / "server", pushed, params)
    check = check_phase(tmp_path / "server")
    assert check.status == "violated" and check.differing_keys == 1
    assert check.lost == 1 and check.doubled == 0
    [diff] = check.differences
    assert diff["key"] == key and diff["actual"] - diff["expected"] == value
    assert (
        diff["reading"]
        == f"an update of {value:+d} lost (applied 0 times): worker 1's of iteration 2"
    )


def test_a_doubled_update_is_caught_and_named(tmp_path: Path) -> None:
    pushed = updates()
    keys, values = pushed[(0, 3)]
    key, value = int(keys[0]), int(values[0])
    params = applied_once(pushed)
    params[key] -= value  # applied a second time (a resend taken as a new update)
    write_phase(tmp_path / "offload", pushed, params)
    check = check_phase(tmp_path / "offload")
    assert check.status == "violated" and check.doubled == 1 and check.lost == 0
    [diff] = check.differences
    assert diff["key"] == key and diff["actual"] - diff["expected"] == -value
    assert diff["reading"] == f"an update of {value:+d} counted twice: worker 0's of iteration 3"


def test_a_difference_no_single_update_explains_and_a_key_nobody_pushed(tmp_path: Path) -> None:
    pushed = updates()
    params = applied_once(pushed)
    touched = {int(k) for keys, _ in pushed.values() for k in keys}
    untouched = min(set(range(KEYS)) - touched)
    params[untouched] = 5
    write_phase(tmp_path / "server", pushed, params)
    check = check_phase(tmp_path / "server")
    assert check.status == "violated" and check.lost == check.doubled == 0
    assert f"no worker pushed key {untouched}" in check.differences[0]["reading"]


def test_a_difference_either_reading_explains_names_both(tmp_path: Path) -> None:
    pushed = updates()
    key = int(pushed[(0, 1)][0][0])
    pushed[(0, 1)][1][0] = 40
    pushed[(1, 1)] = (np.array([key], np.uint64), np.array([-40], np.int32))
    params = applied_once(pushed)
    params[key] += 40  # worker 0's +40 lost, or worker 1's -40 counted twice
    write_phase(tmp_path / "server", pushed, params)
    check = check_phase(tmp_path / "server")
    assert check.status == "violated" and check.lost == check.doubled == 0
    reading = check.differences[0]["reading"]
    assert reading.startswith("either an update of +40 lost (applied 0 times): worker 0's")
    assert reading.endswith("or an update of -40 counted twice: worker 1's of iteration 1")


def test_the_table_line_says_each_modes_verdict(tmp_path: Path) -> None:
    from experiment.report import conservation_line

    pushed = updates()
    write_phase(tmp_path / "server", pushed, applied_once(pushed))
    params = applied_once(pushed)
    key, value = int(pushed[(1, 3)][0][2]), int(pushed[(1, 3)][1][2])
    params[key] += value
    write_phase(tmp_path / "offload", pushed, params)
    phases = {"server": tmp_path / "server", "offload": tmp_path / "offload"}
    summary = {
        "config": {"sync": "ssp:2"},
        "workload": "lr",
        "conservation": run_verdict(phases, {"sync": "ssp:2", "workload": "lr"}, WORKERS, 1),
    }
    line = conservation_line(summary)
    assert line is not None
    assert line.startswith("conservation: server-only 48 updates each applied once; offload ")
    assert "offload VIOLATED: 1 of " in line and f"key {key}: an update of {value:+d} lost" in line
    assert "not compared: under SYNC=ssp:2 lr's pushes depend on the stale values" in line
    assert conservation_line({}) is None  # a summary from before the check


def test_missing_cut_short_or_unfinished_files_are_reported_not_raised(tmp_path: Path) -> None:
    pushed = updates()
    write_phase(tmp_path / "a", pushed, applied_once(pushed))
    push_log_path(tmp_path / "a", 1).unlink()
    check = check_phase(tmp_path / "a")
    assert (
        check.status == "unchecked" and "worker 1's pushes: w1.pushes.npz is missing" in check.why
    )

    write_phase(tmp_path / "b", pushed, applied_once(pushed))
    path = push_log_path(tmp_path / "b", 0)
    path.write_bytes(path.read_bytes()[:200])  # cut short
    check = check_phase(tmp_path / "b")
    assert check.status == "unchecked" and "w0.pushes.npz cannot be read" in check.why

    write_phase(tmp_path / "c", pushed, applied_once(pushed))
    log = PushLog(push_log_path(tmp_path / "c", 0), 1, 0, ITERATIONS)
    log.record(1, *pushed[(0, 1)])
    log.close(complete=False)  # a worker that stopped after iteration 1
    check = check_phase(tmp_path / "c")
    assert check.status == "unchecked" and "holds 1 of 3 iterations" in check.why

    write_phase(tmp_path / "d", pushed, applied_once(pushed))
    (tmp_path / "d" / "params0.npy").unlink()
    check = check_phase(tmp_path / "d")
    assert check.status == "unchecked" and "params0.npy" in check.why

    assert check_phase(tmp_path / "nowhere").status == "unchecked"


def test_an_update_is_logged_once_and_the_log_is_read_back(tmp_path: Path) -> None:
    path = tmp_path / "w0.pushes.npz"
    log = PushLog(path, 3, 0, 2)
    keys = np.array([4, 9], np.uint64)
    log.record(1, keys, np.array([-3, 5], np.int32))
    keys[0] = 11  # the caller's array changes later: the log kept what was pushed
    log.record(2, np.array([7], np.uint64), np.array([2], np.int32))
    log.close(complete=True)
    log.close(complete=False)  # once written, a later close leaves it
    pushes = load_pushes(path)
    assert pushes.complete and pushes.shortfall() is None
    assert pushes.keys.tolist() == [4, 9, 7] and pushes.values.tolist() == [-3, 5, 2]
    assert pushes.entry_iterations.tolist() == [1, 1, 2]
    assert not list(tmp_path.glob("*.tmp"))
    PushLog(None, 3, 0, 2).close(complete=True)  # no path: nothing written
    assert [p.name for p in tmp_path.iterdir()] == ["w0.pushes.npz"]


def test_exactness_compares_parameters_only_where_the_modes_push_the_same_updates(
    tmp_path: Path,
) -> None:
    pushed = updates()
    write_phase(tmp_path / "server", pushed, applied_once(pushed))
    other = updates(seed=2)  # offload pushed other updates (stale pulls), each applied once
    write_phase(tmp_path / "offload", other, applied_once(other))
    phases = {"server": tmp_path / "server", "offload": tmp_path / "offload"}
    lr_async = run_verdict(phases, {"sync": "async", "workload": "lr"}, WORKERS, 1)
    assert not lr_async["params_compared"] and "not expected to be equal" in lr_async["why"]
    assert exact(False, lr_async)  # parameters differ, yet each mode conserved its own
    zipf_async = run_verdict(phases, {"sync": "async", "workload": "zipf"}, WORKERS, 1)
    assert zipf_async["params_compared"] and not exact(False, zipf_async)
    assert params_compared({"sync": "bsp", "workload": "lr"})[0]

    params = applied_once(other)
    params[int(other[(0, 1)][0][0])] += 1
    write_phase(tmp_path / "offload", other, params)
    violated = run_verdict(phases, {"sync": "bsp", "workload": "zipf"}, WORKERS, 1)
    assert not exact(True, violated)  # equal parameters do not excuse a violation
    # not compared, an unchecked phase is not exact: nothing else vouches for it
    push_log_path(tmp_path / "offload", 0).unlink()
    assert not exact(True, run_verdict(phases, {"sync": "ssp:2", "workload": "lr"}, WORKERS, 1))
    summary = {"conservation": violated, "params_sha256": {"server": "a", "offload": "a"}}
    assert "offload: violated" in conservation.not_exact_reason(summary)


def test_the_command_line_checks_every_phase_of_a_run(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    pushed = updates()
    for phase in ("warmup", "server", "offload"):
        write_phase(run / phase, pushed, applied_once(pushed))
    write_phase(run / "offload2" / "job2", pushed, applied_once(pushed))  # several jobs
    assert main([str(run)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out] == [
        "warmup",
        "server",
        "offload",
        "offload2/job2",
    ]
    params = applied_once(pushed)
    key = int(pushed[(0, 1)][0][0])
    params[key] -= int(pushed[(0, 1)][1][0])
    write_phase(run / "server", pushed, params)
    assert main([str(run), "--json"]) == 1
    checks = json.loads(capsys.readouterr().out)
    assert checks["server"]["first_differences"][0]["key"] == key
    assert checks["offload"]["status"] == "conserved"
    write_phase(run / "server", pushed, applied_once(pushed))
    push_log_path(run / "warmup", 1).unlink()
    assert main([str(run)]) == 3
    assert "warmup: unchecked" in capsys.readouterr().out
    assert main([str(tmp_path / "none")]) == 2
    (tmp_path / "empty").mkdir()
    assert main([str(tmp_path / "empty")]) == 2


def _agents(workload, sync: str, tmp_path: Path, relay_seed: int) -> Relay:
    """A PS and WORKERS workers on 127.0.0.1 through a relay that drops and duplicates,
    each worker logging its pushes; the phase's files in `tmp_path`."""
    ps = ParameterServer(
        PSConfig(
            job_id=5,
            n_workers=WORKERS,
            key_space=workload.key_space,
            iterations=4,
            bind=("127.0.0.1", 0),
            rto=0.02,
            linger=0.3,
            deadline=25,
            params_path=str(tmp_path / "params0.npy"),
            summary_path=str(tmp_path / "ps0.json"),
            sync=SyncMode.parse(sync),
        )
    )
    relay = Relay([ps.address], drop=0.1, dup=0.15, delay=0.004, seed=relay_seed)
    relay.start()
    workers = [
        Worker(
            WorkerConfig(
                5,
                w,
                relay.addrs,
                4,
                rto=0.02,
                rto_max=0.1,
                deadline=25,
                pushes_path=str(push_log_path(tmp_path, w)),
            ),
            workload,
        )
        for w in range(WORKERS)
    ]
    errors: list[BaseException] = []

    def body(fn) -> None:
        try:
            fn()
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(a.run,)) for a in (ps, *workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    relay.stop()
    for agent in (ps, *workers):
        agent.close()
    assert not errors, errors
    return relay


@pytest.mark.parametrize(
    ("workload", "sync"),
    [
        (ZipfWorkload(key_space=2000, skew=1.2, keys_per_iter=40, seed=11), "bsp"),
        (LogisticWorkload(key_space=2000, batch=8, seed=3), "async"),
    ],
    ids=["zipf-bsp", "lr-async"],
)
def test_real_agents_under_loss_log_each_update_once_and_conserve(
    tmp_path: Path, workload, sync
) -> None:
    relay = _agents(workload, sync, tmp_path, relay_seed=4)
    assert relay.counters["dropped"] > 5 and relay.counters["duplicated"] > 5
    resent = sum(
        json.loads((tmp_path / "ps0.json").read_text())["counters"].get(c, 0)
        for c in ("dup", "stale")
    )
    assert resent > 0  # the PS saw pushes again, which the logs must not count again
    for w in range(WORKERS):
        pushes = load_pushes(push_log_path(tmp_path, w))
        assert pushes.complete and pushes.iterations.tolist() == [1, 2, 3, 4]
        if sync == "bsp":  # pushes do not depend on the pulls: the workload's steps, once
            for t in range(1, 5):
                keys = workload.pull_keys(w, t)
                step = workload.step(w, t, keys, np.zeros(len(keys), np.int32))
                got = pushes.keys[pushes.entry_iterations == t]
                assert got.tolist() == np.asarray(step.keys, np.uint64).tolist()
    check = check_phase(tmp_path)
    assert check.status == "conserved", check.why
