"""bench/move_cost.py: iterations classed by the moves, differences per class, pairs checked."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from bench import move_cost
from hosts.ps_log import LOG_COLUMNS as PS_LOG
from hosts.worker import LOG_COLUMNS as WORKER_LOG

COLUMNS = list(WORKER_LOG)  # the agents' own log formats
PS_COLUMNS = list(PS_LOG)


def fake_run(
    root: Path,
    name: str,
    mode: str,
    slow: dict[int, float],
    ps_pulls: dict[int, int],
    steps: list[dict] | None = None,
    writebacks: tuple[int, ...] = (),
) -> Path:
    """A run of 6 iterations of 10 ms, 2 workers; iteration t takes slow[t] ms more in its
    barrier, and ps_pulls[t] of its pulls went to the PS."""
    run = root / name
    (run / "offload").mkdir(parents=True)
    cfg = {"workers": 2, "seed": 4, "drift": None, "hotset": mode, "run_id": name, "bw": 5.0}
    (run / "config.json").write_text(json.dumps(cfg))
    for w in range(2):
        with open(run / "offload" / f"w{w}.csv", "w", newline="") as f:
            out = csv.DictWriter(f, COLUMNS)
            out.writeheader()
            t0 = 0.0
            for t in range(1, 7):
                end = t0 + 0.010 + slow.get(t, 0.0) / 1e3
                row = {c: "" for c in COLUMNS} | {"iteration": t}
                out.writerow(row | {"kind": "iteration", "sent": t0, "reply": end})
                to_ps = w < ps_pulls.get(t, 0)
                out.writerow(
                    row
                    | {"kind": "pull", "reply": t0 + 0.002, "from_switch": "0" if to_ps else "1"}
                )
                out.writerow(
                    row
                    | {"kind": "push", "sent": t0 + 0.004, "reply": t0 + 0.006, "from_switch": "1"}
                )
                t0 = end
    with open(run / "offload" / "ps0.csv", "w", newline="") as f:
        out = csv.DictWriter(f, PS_COLUMNS)
        out.writeheader()
        for t in writebacks:  # sent in t's barrier, tagged t + 1
            out.writerow({c: "" for c in PS_COLUMNS} | {"op": "WRITEBACK", "iteration": t + 1})
        # one the PS gave up on: logged without an iteration (hosts/switch_channel.py)
        out.writerow({c: "" for c in PS_COLUMNS} | {"op": "WRITEBACK", "result": "unanswered"})
    if steps is not None:
        (run / "offload" / "hotset.json").write_text(json.dumps({"steps": steps}))
    return run


def test_the_cost_of_a_move_lands_in_the_two_iterations_after_its_step(tmp_path) -> None:
    steps = [
        {"iteration": 2, "added": [7], "removed": [9]},  # lands in 3, in force from 4
        {"iteration": 4, "added": [], "removed": []},  # moved nothing: 5 stays quiet
    ]
    static = fake_run(tmp_path, "s", "static", {}, {})
    dynamic = fake_run(
        tmp_path, "d", "dynamic", {3: 2.0, 4: 1.0, 6: -0.5}, {3: 1, 4: 2}, steps, writebacks=(3,)
    )
    got = move_cost.compare([(static, dynamic)])
    by = got["by_class"]
    assert [by[c]["iterations"] for c in move_cost.CLASSES] == [1, 1, 4]
    assert by["landing"]["iteration_ms_diff_mean"] == pytest.approx(2.0)
    assert by["landing"]["barrier_ms_diff_mean"] == pytest.approx(2.0)
    assert by["landing"]["pulls_ms_diff_mean"] == pytest.approx(0.0)
    assert by["landing"]["writebacks_diff_mean"] == 1
    assert by["after"]["iteration_ms_diff_mean"] == pytest.approx(1.0)
    assert by["after"]["ps_pulls_diff_mean"] == 2
    assert by["quiet"]["iteration_ms_diff_mean"] == pytest.approx(-0.5 / 4)
    # each class's share of the mean difference per iteration: they add up to it
    share = got["iteration_ms_diff_per_iteration"]
    assert sum(share.values()) == pytest.approx((2.0 + 1.0 - 0.5) / 6, abs=2e-3)


def test_runs_that_differ_in_more_than_the_mode_are_refused(tmp_path) -> None:
    static = fake_run(tmp_path, "s", "static", {}, {})
    dynamic = fake_run(tmp_path, "d", "dynamic", {}, {}, [])
    cfg = json.loads((dynamic / "config.json").read_text()) | {"seed": 5}
    (dynamic / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(move_cost.PairError, match="seed"):
        move_cost.compare([(static, dynamic)])
    assert move_cost.main([str(static), str(dynamic)]) == 2
    # what each run measured for itself may differ (the warm-up's round trip)
    cfg |= {"seed": 4, "initial_rto_ms": 61.5}
    (dynamic / "config.json").write_text(json.dumps(cfg))
    assert move_cost.compare([(static, dynamic)])["runs"][0]["seed"] == 4
    with pytest.raises(move_cost.PairError, match="static run"):
        move_cost.compare([(dynamic, static)])
    no_steps = fake_run(tmp_path, "n", "dynamic", {}, {})
    with pytest.raises(move_cost.PairError, match=r"hotset\.json"):
        move_cost.compare([(static, no_steps)])
