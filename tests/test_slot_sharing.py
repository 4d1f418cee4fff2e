"""bench/slot_sharing.py: the invariants of the slot-sharing simulation (bounds, a single
job, conservation of updates) and its JSON."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from bench import slot_sharing
from bench.slot_sharing import SharingConfig, SharingJob, jain

TWO_JOBS = (SharingJob(1.1, 7), SharingJob(1.3, 8))
VARIANTS: list[dict[str, object]] = [
    {"policy": "equal"},
    {"policy": "savings"},
    {"policy": "first-come", "mapping": "hashed", "aligned": True},
    {"policy": "first-come", "mapping": "hashed", "aligned": False},
    {"policy": "first-come", "mapping": "rank", "aligned": True},
]


def _config(**kw: object) -> SharingConfig:
    base = SharingConfig(TWO_JOBS, 64, iterations=8, settle=2, seed=3)
    return replace(base, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(map(str, v.values())))
def test_no_policy_saves_more_than_its_bounds(variant: dict[str, object]) -> None:
    # 64 slots for two jobs whose tables want about 180: the jobs contend.
    run = slot_sharing.simulate(_config(**variant))
    for job in run["jobs"]:
        assert job["saved_gross"] <= job["alone_bound"] + 0.01
        assert job["push_applied"] <= job["push_entries"]
    if run["aligned"]:  # one slot holds one (job, key) per iteration: the pooled bound holds
        assert run["saved_gross"] <= run["oracle"] + 0.01


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(map(str, v.values())))
def test_every_update_is_summed_in_the_switch_or_reaches_the_ps(variant: dict[str, object]) -> None:
    run = slot_sharing.simulate(_config(**variant))
    for job in run["jobs"]:
        assert job["push_applied"] + job["push_to_ps"] == pytest.approx(
            job["push_entries"], abs=0.02
        )
        assert job["pull_served"] + job["pull_to_ps"] == pytest.approx(
            job["pull_entries"], abs=0.02
        )


def test_static_splits_never_refuse_and_first_come_does_under_contention() -> None:
    for policy in ("equal", "savings"):
        run = slot_sharing.simulate(_config(policy=policy))
        assert all(job["push_refused"] == 0 for job in run["jobs"])
    shared = slot_sharing.simulate(_config(policy="first-come", mapping="rank"))
    assert all(job["push_refused"] > 0 for job in shared["jobs"])


@pytest.mark.parametrize("aligned", [True, False])
def test_first_come_with_one_job_is_that_job_alone(aligned: bool) -> None:
    for job in TWO_JOBS:
        one = slot_sharing.simulate(_config(jobs=(job,), policy="first-come", aligned=aligned))
        assert one["jobs"][0]["push_refused"] == 0
        assert one["jobs"] == slot_sharing.alone(_config(jobs=(job,)))


def test_alone_bounds_each_job_under_every_sharing_policy() -> None:
    # Sharing can only take slots away: no job saves more entries than with the switch alone.
    alone = slot_sharing.alone(_config())
    for variant in VARIANTS:
        run = slot_sharing.simulate(_config(**variant))
        for job, solo in zip(run["jobs"], alone):
            assert job["push_applied"] <= solo["push_applied"] + 0.01


def test_jain_index() -> None:
    assert jain([1.3, 1.3]) == pytest.approx(1.0)
    assert jain([1.0, 0.0]) == pytest.approx(0.5)
    assert 0.5 < jain([1.2, 1.4]) < 1.0


def test_bad_configs_are_refused() -> None:
    with pytest.raises(ValueError, match="policy"):
        _config(policy="lottery")
    with pytest.raises(ValueError, match="mapping"):
        _config(mapping="random")
    with pytest.raises(ValueError, match="settle"):
        _config(settle=8)
    with pytest.raises(ValueError, match="need a job"):
        _config(jobs=())


def test_main_writes_every_policy_per_slot_count(tmp_path: Path) -> None:
    out = tmp_path / "sharing.json"
    argv = ["--slots", "32", "--skews", "1.1,1.3", "--seeds", "2", "--iterations", "4"]
    assert slot_sharing.main([*argv, "--out", str(out)]) == 0
    rows = json.loads(out.read_text())
    names = {(r["policy"], r.get("mapping"), r.get("aligned")) for r in rows}
    assert names == {
        ("alone", None, None),
        ("equal", None, True),
        ("savings", None, True),
        *(("first-come", m, a) for m in ("hashed", "rank") for a in (True, False)),
    }
    assert all(len(r["jobs"]) == 2 for r in rows)
