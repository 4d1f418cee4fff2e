"""The iteration model under SYNC=ssp:S and async (experiment/model.py worker_timelines):
each worker's own timeline over shared links, paced by the PS's DONE_ACKs, with the switch
answering and summing only what docs/design.md section 8 lets it. No network: the real runs
are in docs/results/2026-12-03-sync-model.md."""

from __future__ import annotations

import numpy as np
import pytest

from experiment.model import (
    SHAPER_BURST_BYTES,
    START_DRAWS,
    START_SPREAD_MS,
    Prediction,
    _FifoLinks,
    link_ms,
    predict,
    predict_iterations,
    start_offsets,
    worker_timelines,
)
from tests.test_model import FixedKeys

WORKERS, ITERATIONS, MBPS = 4, 12, 1.0
KEYS = list(range(200))  # 25 full packets per exchange: well beyond the shaper's burst
HOT = set(range(40))


def prediction() -> Prediction:
    return predict(FixedKeys(KEYS), WORKERS, ITERATIONS, MBPS, HOT)


def compute(ms: float, straggler: float = 1.0) -> np.ndarray:
    """Every worker computes `ms` per iteration, worker 0 `straggler` times as long."""
    table = np.full((WORKERS, ITERATIONS), ms)
    table[0] *= straggler
    return table


def _run_until(links: _FifoLinks, until: float) -> list[tuple[float, int]]:
    """Serve `links` event by event up to `until`: (when, exchange) of each that ended."""
    ended = []
    while (due := links.next_end()) <= until:
        ended += [(due, e) for e in links.advance(due)]
    links.advance(until)
    return ended


def test_a_link_serves_what_reached_it_first_first() -> None:
    """Two senders' exchanges sent together reach the shared link interleaved, each at its
    own link's pace, and end together; a small one sent later waits behind the bytes
    queued before it (a FIFO, as htb's default leaf queue), not only its share of them."""
    rates = {"a-s": 8.0, "c-s": 8.0, "d-s": 8.0, "s-b": 8.0}  # 1000 bytes per ms
    links = _FifoLinks(rates)
    big = SHAPER_BURST_BYTES + 2000.0  # a burst, then 2 ms at its own link's rate
    assert links.start(1, {"a-s": big, "s-b": big}, "a") == []
    assert links.start(2, {"c-s": big, "s-b": big}, "c") == []
    assert _run_until(links, 3.0) == []
    # s-b: one burst went at once, the rest of both at 1000 bytes per ms
    together = (2 * big - SHAPER_BURST_BYTES) / 1000.0
    backlog_at_3 = 2 * big - SHAPER_BURST_BYTES - 3.0 * 1000.0
    assert links.start(3, {"d-s": 62.0, "s-b": 62.0}, "d") == []
    ended = _run_until(links, 10.0)
    assert [e for _, e in ended] == [1, 2, 3]
    assert ended[0][0] == pytest.approx(together) and ended[1][0] == pytest.approx(together)
    assert ended[2][0] == pytest.approx(3.0 + (backlog_at_3 + 62.0) / 1000.0)
    assert links.next_end() == float("inf")


def test_a_small_exchange_on_idle_links_goes_in_their_burst() -> None:
    """A DONE-sized exchange on links that idled ends at once (the shapers' tokens)."""
    links = _FifoLinks({"a-s": 2.0, "s-b": 2.0})
    assert links.start(1, {"a-s": 62.0, "s-b": 62.0}, "a") == [1]
    assert not links.busy()


def test_equal_workers_started_together_stay_in_phase() -> None:
    """Under async, workers with the same bytes and compute started at once stay in step:
    their pulls and pushes overlap on the PS link, and a worker whose exchanges end first
    finds its DONE queued behind the others' pushes (a FIFO), so from the second iteration
    on all take the same time until the last and none gets away (as measured, server-only in
    docs/results/2026-12-03-sync-model.md). Started a quarter of an iteration apart, the
    same workers stay apart, their exchanges no longer queue behind each other's, and
    each iteration is shorter: both states hold, and the start decides."""
    p, c = prediction(), compute(80.0)
    together = worker_timelines(p, "server", c, None)
    # (the last iteration ends as the others leave the link)
    assert np.ptp(together.durations[:, 1:-1], axis=0).max() < 0.01  # ms
    pull_ms = link_ms(p.phased["server"].pull[0][0]["s1-h5"], MBPS)
    ends = np.cumsum(together.durations, axis=1)
    assert np.ptp(ends, axis=0).max() < pull_ms  # their pulls overlap, every iteration
    period = float(np.median(together.durations))
    quarter = [w * period / WORKERS for w in range(WORKERS)]
    apart = worker_timelines(p, "server", c, None, quarter)
    ends = np.cumsum(apart.durations, axis=1) + np.array(quarter)[:, None]
    assert np.diff(np.sort(ends[:, -1])).min() > pull_ms
    assert np.median(apart.durations) < 0.9 * period


def test_the_model_pools_seeded_start_offsets() -> None:
    """ssp and async: the model's iterations are those of START_DRAWS seeded sets of start
    offsets, the same for every call; BSP starts every iteration at its barrier."""
    p, c = prediction(), compute(80.0)
    first = predict_iterations(p, c, "async")
    assert first.times["server"].size == START_DRAWS * WORKERS * ITERATIONS
    assert predict_iterations(p, c, "async").as_dict() == first.as_dict()
    offsets = start_offsets(WORKERS)
    assert len(offsets) == START_DRAWS and len({tuple(o) for o in offsets}) == START_DRAWS
    assert all(0.0 <= x < START_SPREAD_MS for o in offsets for x in o)


def test_ssp0_is_bsp() -> None:
    """ssp:0 is BSP's code path, number for number."""
    p, c = prediction(), compute(80.0, straggler=3.0)
    assert predict_iterations(p, c, "ssp:0").as_dict() == predict_iterations(p, c).as_dict()


@pytest.mark.parametrize("straggler", [1.0, 3.0])
def test_the_worker_timelines_with_no_slack_agree_with_bsp(straggler: float) -> None:
    """The per-worker simulation with S = 0 is the BSP barrier: its mean iteration lies
    within a few percent of iteration_ms's (the simulation puts DONE, COLLECT and DONE_ACK
    in order, where iteration_ms sends them at once)."""
    p, c = prediction(), compute(80.0, straggler)
    bsp = predict_iterations(p, c).as_dict()
    for mode in ("server", "offload"):
        run = worker_timelines(p, mode, c, 0)
        assert run.durations.mean() == pytest.approx(bsp[mode]["mean_ms"], rel=0.03)
        # in lockstep every worker's iteration ends at the same DONE_ACK release
        assert np.ptp(run.durations, axis=0).max() < 0.05 * bsp[mode]["mean_ms"]


def test_async_without_compute_runs_at_the_links_pace() -> None:
    """No compute and no straggler: server-only's workers share the PS link, so each
    iteration takes about the link's bytes of one iteration over its rate (the bound).
    Offload's workers run ahead of what the PS applied, so their pulls miss the cache and
    go to the PS: between offload's BSP bound and server-only's."""
    p = prediction()
    model = predict_iterations(p, compute(0.0), "async").as_dict()
    burst = link_ms(SHAPER_BURST_BYTES, MBPS)
    server = model["server"]["mean_ms"]
    assert p.server.bound_ms - burst <= server <= 1.05 * p.server.bound_ms
    assert p.offload.bound_ms - burst <= model["offload"]["mean_ms"] <= server


def test_a_straggler_does_not_slow_the_fast_workers_under_async() -> None:
    """Under async the fast workers do not wait for worker 0: their median iteration stays
    where it is without the straggler, and the p50 over every worker's iterations (what
    the run reports) is theirs; under BSP the straggler's compute sets every iteration."""
    p = prediction()
    even = worker_timelines(p, "server", compute(80.0), None)
    slow = worker_timelines(p, "server", compute(80.0, straggler=3.0), None)
    fast_median = float(np.median(slow.durations[1:]))
    assert fast_median <= 1.02 * float(np.median(even.durations[1:]))
    model = predict_iterations(p, compute(80.0, straggler=3.0), "async").as_dict()
    bsp = predict_iterations(p, compute(80.0, straggler=3.0)).as_dict()
    assert model["server"]["p50_ms"] == pytest.approx(fast_median, rel=0.05)
    assert bsp["server"]["p50_ms"] >= 3 * 80.0
    assert model["server"]["p50_ms"] < 0.8 * bsp["server"]["p50_ms"]


def test_fewer_pushes_are_summed_the_further_workers_run_ahead() -> None:
    """The two-copy rule: ssp:1 never refuses (a worker pushes t only once t - 2 is read),
    so the switch sums what it sums in BSP. With S >= 2 and async, a fast worker's push
    two or more iterations ahead of what the PS read is refused (SLOT_BUSY) and its hot
    entries go to the PS: none without a straggler, and the more the slower it is (the
    fast workers reach that lag sooner and stay there)."""
    p = prediction()
    every_hot = len(HOT) / len(KEYS)

    def summed(sync: str, straggler: float) -> float:
        share = predict_iterations(p, compute(200.0, straggler), sync).as_dict()["switch_summed"]
        assert share is not None
        return share

    for straggler in (1.0, 3.0):
        assert summed("bsp", straggler) == summed("ssp:1", straggler) == pytest.approx(every_hot)
    for sync in ("ssp:2", "ssp:4", "async"):
        shares = [summed(sync, straggler) for straggler in (1.0, 1.5, 2.0, 3.0)]
        assert shares[0] == pytest.approx(every_hot)
        assert all(a > b for a, b in zip(shares, shares[1:]))
    # a larger S lets the fast workers further ahead, never back under the rule
    assert summed("ssp:2", 3.0) >= summed("ssp:4", 3.0) >= summed("async", 3.0)


def test_staleness_grows_with_the_slack() -> None:
    """What a pull lacks ((t - 1) - A) is 0 in lockstep, at most S in ssp:S, and larger
    still in async with a straggler (how much larger depends on how far the fast workers,
    which share the PS link, outrun it in the run's iterations)."""
    p, c = prediction(), compute(80.0, straggler=3.0)
    stale = {b: worker_timelines(p, "server", c, b).staleness_mean for b in (0, 1, 2, None)}
    assert stale[0] == 0.0
    assert stale[1] is not None and stale[2] is not None and stale[None] is not None
    assert 0.0 < stale[1] <= 1.0 and stale[1] < stale[2] <= 2.0 and stale[2] < stale[None]


def test_the_report_names_each_modes_model() -> None:
    """The terminal table and report.md name the model of the run's SYNC mode, not BSP's."""
    from experiment.report import compute_line

    p, c = prediction(), compute(80.0, straggler=3.0)
    for sync, name in (("bsp", "model with compute:"), ("ssp:2", "ssp:2 model:"),
                       ("async", "async model:")):  # fmt: skip
        line = compute_line({"model": p.as_dict(c, sync)})
        assert line is not None and line.startswith(name)
    # without COMPUTE, ssp and async still have their own model; BSP only the bound
    assert "iteration" in p.as_dict(None, "async")
    assert "iteration" not in p.as_dict(None, "bsp")
