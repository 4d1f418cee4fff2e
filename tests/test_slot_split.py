"""Sharing one switch's slots between jobs (controller/hotset.py split_slots): pure."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from controller.errors import BadInput
from controller.hotset import JobDemand, choose, equal_split, rank, split_slots


def zipf_counts(skew: float, keys: int, draws: int, seed: int) -> dict[int, int]:
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, keys + 1) ** skew
    drawn = rng.choice(keys, size=draws, p=p / p.sum())
    values, counts = np.unique(drawn, return_counts=True)
    return {int(k) + 1000 * seed: int(n) for k, n in zip(values, counts)}


def saved_entries(demands: dict[int, JobDemand], hot: dict) -> float:
    """Entries per iteration the chosen keys take off the PS links (2r - 1 per slot)."""
    return sum(
        2 * demands[j].freqs[k] / demands[j].iterations - 1 for j in hot for k in hot[j].keys
    )


def best_by_enumeration(demands: dict[int, JobDemand], slots: int, min_rate: float) -> float:
    """Every way to give each job its top-k keys within the budget."""
    tops = {
        j: [k for k, n in rank(d.freqs) if n / d.iterations >= min_rate] for j, d in demands.items()
    }
    best = 0.0
    for ks in itertools.product(*(range(len(t) + 1) for t in tops.values())):
        if sum(ks) > slots:
            continue
        best = max(
            best,
            sum(
                2 * demands[j].freqs[key] / demands[j].iterations - 1
                for (j, top), k in zip(tops.items(), ks)
                for key in top[:k]
            ),
        )
    return best


@pytest.mark.parametrize("seed", range(6))
def test_the_split_saves_what_the_best_allocation_saves(seed: int) -> None:
    rng = random.Random(seed)
    demands = {
        j: JobDemand(zipf_counts(rng.uniform(0.8, 1.6), 60, rng.randint(200, 800), seed * 7 + j), 5)
        for j in (1, 2, 3)
    }
    slots = rng.randint(3, 25)
    # trusting the counts fully (no confidence margin), the split is the optimum on them
    split = split_slots(demands, slots, confidence=0.0)
    assert sum(len(h.keys) for h in split.values()) <= slots
    assert saved_entries(demands, split) == pytest.approx(best_by_enumeration(demands, slots, 1.0))
    # with the margin, it lies between equal halves and that optimum
    careful = split_slots(demands, slots)
    assert sum(len(h.keys) for h in careful.values()) <= slots
    assert (
        saved_entries(demands, equal_split(demands, slots)) - 1e-9
        <= saved_entries(demands, careful)
        <= saved_entries(demands, split) + 1e-9
    )


@pytest.mark.parametrize("seed", range(4))
def test_jobs_alike_keep_equal_shares_where_the_counts_differ_only_by_noise(seed: int) -> None:
    # two samples of one distribution: any difference between their marginal keys is noise
    demands = {
        1: JobDemand(zipf_counts(1.2, 5000, 40000, seed), 5),
        2: JobDemand(zipf_counts(1.2, 5000, 40000, seed + 100), 5),
    }
    careful = split_slots(demands, 64)
    assert [len(careful[j].keys) for j in (1, 2)] == [32, 32]
    # trusting the counts fully moves slots on that noise
    trusting = split_slots(demands, 64, confidence=0.0)
    assert [len(trusting[j].keys) for j in (1, 2)] != [32, 32]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(
    ("skews", "draws"), [((1.0, 1.6), (20000, 20000)), ((1.2, 1.2), (10000, 30000))]
)
def test_jobs_that_differ_get_unequal_shares_that_save_more(seed: int, skews, draws) -> None:
    # different skews, or one job with three times the workers (three times the updates)
    demands = {
        j: JobDemand(zipf_counts(skews[j - 1], 5000, draws[j - 1], seed + 100 * j), 5)
        for j in (1, 2)
    }
    split = split_slots(demands, 128)
    halves = equal_split(demands, 128)
    assert saved_entries(demands, split) > saved_entries(demands, halves)
    # at 64 keys each, the flatter job's next keys are updated more often than the steeper
    # job's last ones; the job with more workers updates each of its keys more often
    assert len(split[1 if skews[0] != skews[1] else 2].keys) > 64


def test_one_job_gets_what_choose_gives_it_alone() -> None:
    freqs = zipf_counts(1.2, 2000, 5000, 3)
    split = split_slots({7: JobDemand(freqs, 5)}, 64)
    assert split[7].keys == choose(freqs, budget=64, min_updates=5).keys
    assert split[7].coverage == choose(freqs, budget=64, min_updates=5).coverage


def test_keys_under_the_floor_take_no_slot_even_with_slots_left() -> None:
    demands = {1: JobDemand({1: 50, 2: 4}, 5), 2: JobDemand({3: 10, 4: 5}, 5)}
    split = split_slots(demands, 100)
    assert split[1].keys == [1] and split[2].keys == [3, 4]


def test_each_jobs_keys_come_hottest_first_and_stay_its_own() -> None:
    demands = {1: JobDemand({1: 9, 2: 30}, 3), 2: JobDemand({1: 60, 5: 12}, 3)}
    split = split_slots(demands, 3)
    assert split[2].keys == [1, 5] and split[1].keys == [2]


@pytest.mark.parametrize(
    ("slots", "min_rate", "iterations"), [(-1, 1.0, 5), (4, -0.5, 5), (4, 1.0, 0)]
)
def test_bad_budgets_rates_and_spans_are_refused(
    slots: int, min_rate: float, iterations: int
) -> None:
    with pytest.raises(BadInput):
        split_slots({1: JobDemand({1: 5}, iterations)}, slots, min_rate)
    with pytest.raises(BadInput, match="confidence"):
        split_slots({1: JobDemand({1: 5}, 5)}, 4, confidence=-1.0)
