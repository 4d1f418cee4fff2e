"""Seeded workloads and the numpy reference computation (hosts/workloads/)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pytest

from contract.constants import VALUE_SCALE, to_fixed
from contract.freqfile import (
    LiveFrequency,
    LiveReader,
    frequency_meta,
    read_frequency,
    top_keys,
    write_frequency,
)
from hosts.stats import params_sha256
from hosts.workloads import (
    Drift,
    DriftSpec,
    LogisticWorkload,
    TraceWorkload,
    WorkloadError,
    ZipfWorkload,
    add_arguments,
    from_args,
    reference_run,
)


def _steps(wl, worker, t, pulled=None):
    keys = wl.pull_keys(worker, t)
    pulled = np.zeros(len(keys), np.int32) if pulled is None else pulled
    return keys, wl.step(worker, t, keys, pulled)


@pytest.mark.parametrize(
    "make",
    [
        lambda seed: ZipfWorkload(5000, 1.1, 50, seed),
        lambda seed: LogisticWorkload(5000, fields=5, batch=16, seed=seed),
    ],
)
def test_seeded_per_worker_streams_independent_of_call_order(make) -> None:
    a, b = make(1), make(1)
    forward = [_steps(a, w, t) for w in range(3) for t in range(1, 4)]
    backward = [_steps(b, w, t) for w in reversed(range(3)) for t in reversed(range(1, 4))]
    for (k1, s1), (k2, s2) in zip(forward, reversed(backward)):
        assert np.array_equal(k1, k2) and np.array_equal(s1.values, s2.values)
    assert not np.array_equal(_steps(a, 0, 1)[0], _steps(a, 1, 1)[0])  # workers differ
    assert not np.array_equal(_steps(a, 0, 1)[0], _steps(a, 0, 2)[0])  # iterations differ
    assert not np.array_equal(_steps(make(2), 0, 1)[0], _steps(a, 0, 1)[0])  # seeds differ
    for k, s in forward:
        assert k.dtype == np.uint64 and s.values.dtype == np.int32
        assert np.all(np.diff(k.astype(np.int64)) > 0) and int(k.max()) < 5000


def test_zipf_skew_concentrates_on_the_hottest_keys() -> None:
    def share_of_top10(skew: float) -> float:
        wl = ZipfWorkload(10_000, skew, 200, seed=3)
        top = set(wl.hottest(10).tolist())
        keys = np.concatenate([wl.pull_keys(w, t) for w in range(4) for t in range(1, 30)])
        return np.isin(keys, list(top)).mean()

    assert share_of_top10(1.4) > 0.15 > 0.01 > share_of_top10(0.0)
    wl = ZipfWorkload(97, 1.0, 10, seed=5)
    assert sorted(wl.rank_to_key(np.arange(97)).tolist()) == list(range(97))  # a bijection
    assert ZipfWorkload(10, 1.0, 4, seed=1).hottest(50).size == 10


def test_zipf_values_are_bounded_fixed_point() -> None:
    wl = ZipfWorkload(1000, 1.1, 100, seed=2, value_range=0.5)
    values = np.concatenate([_steps(wl, w, 1)[1].values for w in range(5)])
    assert np.abs(values).max() <= to_fixed(0.5) and values.std() > to_fixed(0.5) / 4
    with pytest.raises(WorkloadError):
        ZipfWorkload(0)
    with pytest.raises(WorkloadError):
        ZipfWorkload(10, skew=-1)


def test_trace_parsing(tmp_path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(
        "iteration,worker,key,value\n# comment\n\n1,0,5,0.5\n1,0,5,0.25\n1,0,2\n2,1,7,-1\n1,0,9,\n"
    )
    wl = TraceWorkload.from_csv(path, seed=4)
    assert (wl.iterations, wl.workers, wl.key_space) == (2, 2, 10)
    keys, step = _steps(wl, 0, 1)
    assert keys.tolist() == [2, 5, 9]
    assert step.values[1] == to_fixed(0.75)  # repeated key summed
    assert abs(int(step.values[0])) <= to_fixed(0.01)  # drawn from the seeded stream
    assert _steps(wl, 1, 2)[1].values.tolist() == [-VALUE_SCALE]
    assert _steps(wl, 1, 1)[0].size == 0  # no rows: nothing to pull or push
    again = TraceWorkload.from_csv(path, seed=4)
    assert np.array_equal(_steps(again, 0, 1)[1].values, step.values)
    for text in ("1,0\n", "0,0,1\n", "1,0,x\n", "1,0,99\n"):
        path.write_text(text)
        with pytest.raises(WorkloadError):
            TraceWorkload.from_csv(path, key_space=50)
    with pytest.raises(WorkloadError, match="cannot read"):
        TraceWorkload.from_csv(tmp_path / "missing.csv")


def test_logistic_gradients_follow_the_pulled_parameters_and_learn() -> None:
    wl = LogisticWorkload(4096, fields=6, cardinality=300, batch=64, lr=1.0, seed=7)
    keys, at_zero = _steps(wl, 0, 1)
    assert at_zero.loss == pytest.approx(math.log(2))
    shifted = np.full(len(keys), to_fixed(0.5), np.int32)
    moved = wl.step(0, 1, keys, shifted)
    assert moved.loss != at_zero.loss and not np.array_equal(moved.values, at_zero.values)
    with pytest.raises(WorkloadError):
        wl.step(0, 1, keys[1:], shifted[1:])
    ref = reference_run(wl, 3, 25)
    first, last = np.mean(ref.losses[0]), np.mean(ref.losses[-5:])
    assert last < first - 0.05


def test_reference_run_of_independent_workload_is_the_plain_sum() -> None:
    wl = ZipfWorkload(300, 1.1, 20, seed=9)
    expected = np.zeros(300, np.int64)
    for t in range(1, 4):
        for w in range(2):
            keys, step = _steps(wl, w, t)
            expected[keys.astype(np.intp)] -= step.values
    ref = reference_run(wl, 2, 3)
    assert np.array_equal(ref.params, expected)
    assert ref.losses == [[None, None]] * 3


def test_cli_arguments_build_each_workload(tmp_path) -> None:
    p = argparse.ArgumentParser()
    add_arguments(p)
    assert isinstance(from_args(p.parse_args(["--keys", "100"])), ZipfWorkload)
    lr = from_args(p.parse_args(["--workload", "lr", "--keys", "100", "--batch", "4"]))
    assert isinstance(lr, LogisticWorkload) and lr.batch == 4
    with pytest.raises(WorkloadError):
        from_args(p.parse_args(["--workload", "trace"]))
    (tmp_path / "t.csv").write_text("1,0,3,1.5\n")
    tr = from_args(p.parse_args(["--workload", "trace", "--trace", str(tmp_path / "t.csv")]))
    assert tr.describe()["iterations"] == 1


def test_frequency_file_round_trip(tmp_path) -> None:
    cold = np.array([0, 5, 0, 2, 7, 0])
    collected = np.array([0, 2, 0, 0, 0, 1])
    write_frequency(tmp_path / "f.csv", cold, collected, {"job": 1, "shard": "0/1"})
    f = read_frequency(tmp_path / "f.csv")
    assert f.keys.tolist() == [1, 4, 3, 5] and f.updates.tolist() == [7, 7, 2, 1]
    assert f.meta["updates"] == "17" and f.meta["collected"] == "3" and f.meta["job"] == "1"
    write_frequency(tmp_path / "g.csv", np.array([0, 0, 0, 0, 0, 9]), np.zeros(6, int), {})
    assert top_keys([tmp_path / "f.csv", tmp_path / "g.csv"], 3) == [5, 1, 4]
    write_frequency(tmp_path / "empty.csv", np.zeros(3, int), np.zeros(3, int), {})
    assert read_frequency(tmp_path / "empty.csv").keys.size == 0
    assert params_sha256(np.arange(3)) == params_sha256(np.arange(3, dtype=">i8"))


def test_the_binary_frequency_file_holds_what_the_csv_holds(tmp_path) -> None:
    rng = np.random.default_rng(5)
    cold, collected = rng.integers(0, 4, 500), rng.integers(0, 3, 500)
    meta = {"job": 2, "shard": "1/2", "workers": 4, "iterations": 30}
    for name in ("f.csv", "f.npz"):
        write_frequency(tmp_path / name, cold, collected, meta)
    text, binary = read_frequency(tmp_path / "f.csv"), read_frequency(tmp_path / "f.npz")
    assert text.meta == binary.meta and binary.meta["iterations"] == "30"
    for f in (text, binary):
        as_dict = {
            k: (c, h) for k, c, h in zip(*(a.tolist() for a in (f.keys, f.cold, f.collected)))
        }
        want = {k: (int(cold[k]), int(collected[k])) for k in np.flatnonzero(cold + collected)}
        assert as_dict == want and (f.updates == f.cold + f.collected).all()
    assert top_keys([tmp_path / "f.csv"], 20) == top_keys([tmp_path / "f.npz"], 20)
    for name in ("f.csv", "f.npz"):
        assert frequency_meta(tmp_path / name) == text.meta
        assert frequency_meta(tmp_path / ("missing" + name[1:])) is None


def test_a_live_file_is_the_counters_and_reads_as_the_written_files_do(tmp_path) -> None:
    rng = np.random.default_rng(5)
    cold, collected = rng.integers(0, 4, 500), rng.integers(0, 3, 500)
    meta = {"job": 2, "shard": "1/2", "workers": 4}
    write_frequency(tmp_path / "f.npz", cold, collected, {**meta, "iterations": 30})
    live = LiveFrequency(tmp_path / "f.live", 500, meta)
    assert frequency_meta(tmp_path / "f.live") == {**meta_text(meta), "iterations": "0"}
    assert read_frequency(tmp_path / "f.live").keys.size == 0
    live.begin(30)
    live.cold += cold
    live.collected += collected
    live.done(30)
    got, want = read_frequency(tmp_path / "f.live"), read_frequency(tmp_path / "f.npz")
    assert got.meta == want.meta
    for column in ("keys", "updates", "cold", "collected"):
        assert getattr(got, column).tolist() == getattr(want, column).tolist()
    assert top_keys([tmp_path / "f.live"], 20) == top_keys([tmp_path / "f.npz"], 20)
    assert frequency_meta(tmp_path / "f.live") == {**meta_text(meta), "iterations": "30"}
    assert frequency_meta(tmp_path / "missing.live") is None


def meta_text(meta: dict) -> dict[str, str]:
    return {k: str(v) for k, v in meta.items()}


def half_added(path: Path, monkeypatch: pytest.MonkeyPatch) -> LiveFrequency:
    """A .live file with iteration 2 half added, which the PS finishes while a reader waits
    (key 3: 5 then 6, key 4: 1)."""
    import contract.freqfile

    live = LiveFrequency(path, 10, {"workers": 1})
    live.cold[3] = 5
    live.done(1)
    live.begin(2)
    live.cold[3] = 6

    def ps_finishes(seconds: float) -> None:
        live.cold[4] = 1
        live.done(2)

    monkeypatch.setattr(contract.freqfile.time, "sleep", ps_finishes)
    return live


def test_a_live_read_never_mixes_in_an_iteration_being_added(tmp_path, monkeypatch) -> None:
    import contract.freqfile

    path = tmp_path / "f.live"
    live = half_added(path, monkeypatch)
    freq = read_frequency(path)
    assert freq.meta["iterations"] == "2" and freq.cold.tolist() == [6, 1]
    waits: list[float] = []
    monkeypatch.setattr(contract.freqfile.time, "sleep", waits.append)
    live.begin(3)  # and never done (a PS killed half way): the reader takes its last copy
    freq = read_frequency(path)
    assert freq.meta["iterations"] == "2" and len(waits) == contract.freqfile.LIVE_READ_TRIES


def test_a_live_reader_gives_the_counts_since_its_last_read(tmp_path) -> None:
    rng = np.random.default_rng(6)
    path = tmp_path / "f.live"
    live = LiveFrequency(path, 300, {"workers": 4})
    reader = LiveReader(path)
    seen = np.zeros((2, 300), np.int64)
    for t in range(1, 6):
        live.begin(t)
        for column in (live.cold, live.collected):  # a few keys, some counted twice
            np.add.at(column, rng.integers(0, 300, 40), 1)
        live.done(t)
        meta, previous, keys, counts = reader.since()
        assert meta == {"workers": "4", "iterations": str(t)} and previous == t - 1
        now = np.stack([live.cold, live.collected])
        want = np.flatnonzero((now != seen).any(axis=0))
        assert keys.tolist() == want.tolist()
        assert counts.tolist() == (now - seen)[:, want].tolist()
        seen = now.copy()
    assert reader.since()[2].size == 0  # nothing added since

    live = LiveFrequency(path, 50, {"workers": 2})  # a new run's file at the same path
    live.begin(1)
    live.cold[7] = 3
    live.done(1)
    meta, previous, keys, counts = reader.since()
    assert meta["workers"] == "2" and previous == 0  # counted from zero again
    assert keys.tolist() == [7] and counts.tolist() == [[3], [0]]


def test_a_live_reader_never_mixes_in_an_iteration_being_added(tmp_path, monkeypatch) -> None:
    half_added(tmp_path / "f.live", monkeypatch)
    meta, previous, keys, counts = LiveReader(tmp_path / "f.live").since()
    assert meta["iterations"] == "2" and previous == 0
    assert keys.tolist() == [3, 4] and counts[0].tolist() == [6, 1]


def test_a_file_that_is_not_live_is_refused(tmp_path) -> None:
    (tmp_path / "zeros.live").write_bytes(bytes(5000))
    (tmp_path / "short.live").write_bytes(b"hotaggL1")
    for name in ("zeros.live", "short.live"):
        with pytest.raises(ValueError, match="not a hotagg live frequency file"):
            read_frequency(tmp_path / name)
        with pytest.raises(ValueError, match="not a hotagg live frequency file"):
            frequency_meta(tmp_path / name)
    LiveFrequency(tmp_path / "cut.live", 1000, {})
    with open(tmp_path / "cut.live", "r+b") as f:
        f.truncate(8000)
    with pytest.raises(ValueError, match="cut short"):
        read_frequency(tmp_path / "cut.live")
    with pytest.raises(ValueError, match="cut short"):
        LiveReader(tmp_path / "cut.live").since()
    with pytest.raises(ValueError, match="not a hotagg live frequency file"):
        LiveReader(tmp_path / "zeros.live").since()


# --- drift ---


def _replay_swaps(drift: Drift, iteration: int) -> np.ndarray:
    """The rank permutation of `iteration` by replaying every swap in order (what Drift
    computes in closed form): perm[rank] = the original rank whose key sits there."""
    perm = np.arange(drift.n)
    h, tl = drift.head, drift.tail
    for j in range(drift.events(iteration)):
        p = int(drift._order[j % h])
        r = h + (drift._a * (j % tl) + drift._b) % tl
        perm[p], perm[r] = perm[r], perm[p]
    return perm


@pytest.mark.parametrize(("n", "spec"), [(7, (1, 0.5, 5)), (50, (3, 0.25, 8)), (40, (2, 1.0, 4))])
def test_drift_closed_form_equals_replaying_the_swaps(n, spec) -> None:
    # small spaces, so the events wrap round the tail many times
    drift = Drift(DriftSpec(*spec), n, seed=3)
    for t in range(1, 60):
        got = drift.ranks(np.arange(n), t)
        assert np.array_equal(got, _replay_swaps(drift, t)), t
        assert sorted(got.tolist()) == list(range(n))  # a permutation: no key twice


def test_drift_moves_the_head_by_the_fraction_every_k_iterations() -> None:
    k, f, b = 5, 0.2, 100
    wl = ZipfWorkload(20_000, 1.1, 400, seed=4, drift=DriftSpec(k, f, head=b))
    heads = [set(wl.hottest(b, t).tolist()) for t in range(1, 4 * k + 2)]
    for t in range(1, 3 * k):
        overlap = len(heads[t - 1] & heads[t - 1 + k]) / b
        assert overlap == pytest.approx(1 - f, abs=0.011), t  # exactly round(F*B) swapped
        if t % k:  # within an epoch nothing moves
            assert heads[t - 1] == heads[t]
    assert len(heads[0] & heads[-1]) / b < 1 - 3 * f + 0.05  # it keeps moving

    # and the sampled stream follows: the top-B of counts of epoch e vs epoch e+1
    def counted_top(epoch: int) -> set[int]:
        keys = np.concatenate(
            [wl.pull_keys(w, t) for w in range(8) for t in range(epoch * k + 1, epoch * k + k + 1)]
        )
        u, c = np.unique(keys, return_counts=True)
        return set(u[np.argsort(-c, kind="stable")][:20].tolist())

    top0, top1 = counted_top(0), counted_top(1)
    assert top0 <= heads[0] and top1 <= heads[k]  # the 20 most drawn are head keys
    assert top0 != top1


def test_drift_fraction_zero_is_todays_stream_byte_for_byte() -> None:
    plain = ZipfWorkload(5000, 1.1, 64, seed=7)
    still = ZipfWorkload(5000, 1.1, 64, seed=7, drift=DriftSpec(3, 0.0))
    moving = ZipfWorkload(5000, 1.1, 64, seed=7, drift=DriftSpec(3, 0.5, head=32))
    lr = LogisticWorkload(4096, fields=4, cardinality=300, batch=16, seed=5)
    lr_still = LogisticWorkload(
        4096, fields=4, cardinality=300, batch=16, seed=5, drift=DriftSpec(2, 0.0)
    )
    lr_moving = LogisticWorkload(
        4096, fields=4, cardinality=300, batch=16, seed=5, drift=DriftSpec(2, 0.5, head=20)
    )
    for w in range(3):
        for t in (1, 2, 3, 4, 9, 1000):
            k0, s0 = _steps(plain, w, t)
            k1, s1 = _steps(still, w, t)
            assert k0.tobytes() == k1.tobytes() and s0.values.tobytes() == s1.values.tobytes()
            a, b = _steps(lr, w, t), _steps(lr_still, w, t)
            assert (
                a[0].tobytes() == b[0].tobytes() and a[1].values.tobytes() == b[1].values.tobytes()
            )
            if t <= 2:  # epoch 0 is undrifted too
                assert np.array_equal(_steps(lr_moving, w, t)[0], a[0])
    assert np.array_equal(moving.pull_keys(0, 3), plain.pull_keys(0, 3))  # epoch 0
    assert not np.array_equal(moving.pull_keys(0, 1000), plain.pull_keys(0, 1000))
    assert not np.array_equal(lr_moving.pull_keys(0, 1000), lr.pull_keys(0, 1000))
    assert "drift" not in still.describe() or still.describe()["drift"].startswith("every=3")
    assert "drift" not in plain.describe()


def test_drifting_workloads_are_deterministic_per_seed_worker_iteration() -> None:
    spec = DriftSpec(4, 0.3, head=64)
    for make in (
        lambda seed: ZipfWorkload(3000, 1.2, 80, seed, drift=spec),
        lambda seed: LogisticWorkload(
            3000, fields=5, cardinality=400, batch=24, seed=seed, drift=spec
        ),
    ):
        a, b = make(1), make(1)
        order = [(w, t) for w in range(3) for t in (1, 5, 9, 13, 400)]
        first = {wt: _steps(a, *wt) for wt in order}
        for wt in reversed(order):  # another object, another call order: the same bytes
            k, s = _steps(b, *wt)
            assert k.tobytes() == first[wt][0].tobytes()
            assert s.values.tobytes() == first[wt][1].values.tobytes()
        assert not np.array_equal(_steps(make(2), 0, 13)[0], first[(0, 13)][0])
    wl = LogisticWorkload(3000, fields=5, cardinality=400, batch=24, seed=1, drift=spec)
    assert np.array_equal(reference_run(wl, 2, 9).params, reference_run(wl, 2, 9).params)
    ref = reference_run(wl, 2, 30)  # still learns while the features drift
    assert np.mean(ref.losses[-5:]) < np.mean(ref.losses[0])


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("every=0,fraction=0.1", "every=0 must be an integer >= 1"),
        ("every=5,fraction=1.5", "must be in [0, 1]"),
        ("every=5,fraction=nan", "must be in [0, 1]"),
        ("every=5", "fraction missing"),
        ("fraction=0.1", "every missing"),
        ("every=5,fraction=0.1,speed=2", "unknown field 'speed'"),
        ("every=5,every=6,fraction=0.1", "every given twice"),
        ("every=x,fraction=0.1", "invalid literal"),
        ("every=5,fraction=0.1,head=0", "head=0 must be an integer >= 1"),
        ("5:0.1", "expected every=K,fraction=F"),
    ],
)
def test_drift_option_errors_are_clear(text, needle) -> None:
    with pytest.raises(WorkloadError) as err:
        DriftSpec.parse(text)
    assert needle in str(err.value)


def test_drift_option_through_the_cli() -> None:
    p = argparse.ArgumentParser()
    add_arguments(p)
    wl = from_args(p.parse_args(["--keys", "1000", "--drift", "every=10, fraction=0.25,head=50"]))
    assert wl.drift == DriftSpec(10, 0.25, 50) and wl.describe()["drift"] == (
        "every=10,fraction=0.25,head=50"
    )
    assert DriftSpec.parse("none") is None and DriftSpec.parse(None) is None
    lr = from_args(
        p.parse_args(["--workload", "lr", "--keys", "100", "--drift", "every=2,fraction=1"])
    )
    assert lr.drift.head == 256  # default head; cardinality 1000 > 256
    with pytest.raises(WorkloadError, match="smaller than the 100 ranks"):
        from_args(p.parse_args(["--keys", "100", "--drift", "every=2,fraction=0.5,head=100"]))
    with pytest.raises(WorkloadError, match="not --workload trace"):
        from_args(
            p.parse_args(["--workload", "trace", "--trace", "x", "--drift", "every=1,fraction=1"])
        )
