"""bench/write_landing.py: where a step's Write lands in the iteration after the one it read."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from bench import write_landing
from hosts.worker import LOG_COLUMNS

T0, LENGTH = 100.0, 0.010  # iteration t runs [T0 + (t-1) * LENGTH, T0 + t * LENGTH)


def start_of(t: int) -> float:
    return T0 + (t - 1) * LENGTH


def fake_run(root: Path, steps: list[dict]) -> Path:
    """2 workers, 6 iterations of 10 ms; each worker's pushes are sent from 0.4 of them."""
    run = root / "run"
    (run / "offload").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"workers": 2, "hotset": "dynamic"}))
    columns = list(LOG_COLUMNS)
    for w in range(2):
        with open(run / "offload" / f"w{w}.csv", "w", newline="") as f:
            out = csv.DictWriter(f, columns)
            out.writeheader()
            for t in range(1, 7):
                row = {c: "" for c in columns} | {"iteration": t}
                begin = start_of(t)
                out.writerow(row | {"kind": "iteration", "sent": begin, "reply": begin + LENGTH})
                sent = begin + (0.4 + 0.1 * w) * LENGTH
                out.writerow(row | {"kind": "push", "sent": sent, "reply": sent + 0.001})
    (run / "offload" / "hotset.json").write_text(json.dumps({"steps": steps}))
    return run


def step(t: int, started_at: float, seconds: float, moved: bool = True) -> dict:
    """A step that read t and began `started_at` of an iteration into t+1."""
    return {
        "iteration": t,
        "added": [1] if moved else [],
        "removed": [2] if moved else [],
        "started": start_of(t + 1) + started_at * LENGTH,
        "seconds": seconds,
        "write_seconds": seconds / 4,
    }


def test_each_write_is_placed_in_the_iteration_after_the_one_its_step_read(tmp_path) -> None:
    steps = [
        step(2, 0.1, 0.002),  # lands at 0.3 of iteration 3: before its first push (0.4)
        step(3, 0.1, 0.006),  # lands at 0.7 of 4: after its pushes, before its end
        step(4, 0.1, 0.012),  # lands at 1.3 of 5: in 6
        step(5, 0.0, 0.001, moved=False),  # moved nothing: not counted
    ]
    got = write_landing.landing(fake_run(tmp_path, steps))
    assert got["steps"] == 3
    assert got["start"]["median"] == pytest.approx(0.1)
    assert got["landed"]["median"] == pytest.approx(0.7)
    assert got["before_pushes"] == pytest.approx(1 / 3, abs=1e-3)
    assert got["before_end"] == pytest.approx(2 / 3, abs=1e-3)
    assert got["step_ms"] == pytest.approx(6.0) and got["write_ms"] == pytest.approx(1.5)


def test_a_run_without_step_times_is_refused_with_its_name(tmp_path, capsys) -> None:
    run = fake_run(tmp_path, [{"iteration": 2, "added": [1], "removed": [2], "seconds": 0.01}])
    assert write_landing.main([str(run)]) == 2
    assert "no start times" in capsys.readouterr().err
    (run / "offload" / "hotset.json").unlink()
    assert write_landing.main([str(run)]) == 2
    assert "not a HOTSET=dynamic run" in capsys.readouterr().err
