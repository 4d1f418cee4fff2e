"""Hot-set selection from update statistics (controller/hotset.py): pure, no switch."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from contract.constants import KEY_MAX
from contract.freqfile import write_frequency
from controller.errors import BadInput
from controller.hotset import choose, combine, load_stats, parse_stats, rank


def test_parse_plain_csv_with_comments_blank_lines_and_hex_keys() -> None:
    text = "# written by hand\n\n1,10\n0x10, 5\n  7 3\n1,2\n"
    assert parse_stats(text.splitlines()) == {1: 12, 16: 5, 7: 3}


def test_parse_uses_the_updates_column_named_by_the_header() -> None:
    lines = ["# hotagg-freq v1 job=1", "key,cold,updates,collected", "42,60,80,20", "9,1,1,0"]
    assert parse_stats(lines) == {42: 80, 9: 1}


def test_load_reads_the_ps_agents_frequency_files(tmp_path) -> None:
    cold = np.zeros(10, dtype=np.int64)
    collected = np.zeros(10, dtype=np.int64)
    cold[[3, 7]] = [5, 40]
    collected[[7, 9]] = [20, 2]
    for name in ("freq.csv", "freq.npz"):
        write_frequency(tmp_path / name, cold, collected, {"job": 1})
        assert load_stats(tmp_path / name) == {3: 5, 7: 60, 9: 2}
    # several shards' CSV files concatenated (disjoint keys) count as one
    other = np.zeros(12, dtype=np.int64)
    other[[2, 11]] = [4, 1]
    write_frequency(tmp_path / "freq1.csv", other, np.zeros(12, np.int64), {"job": 1})
    both = tmp_path / "both.csv"
    both.write_text((tmp_path / "freq.csv").read_text() + (tmp_path / "freq1.csv").read_text())
    assert load_stats(both) == {3: 5, 7: 60, 9: 2, 2: 4, 11: 1}


def test_load_refuses_a_ps_frequency_file_cut_short(tmp_path) -> None:
    cold = np.arange(6, dtype=np.int64)
    write_frequency(tmp_path / "freq.csv", cold, np.zeros(6, np.int64), {"job": 1})
    text = (tmp_path / "freq.csv").read_text()
    (tmp_path / "cut.csv").write_text(text.split("\n", 1)[0] + "\n")  # no header row
    with pytest.raises(BadInput, match=r"cut\.csv: expected the header"):
        load_stats(tmp_path / "cut.csv")


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("abc,1", "not integers"),
        ("1,-4", "negative"),
        (f"{KEY_MAX + 1},1", "not a uint64"),
        ("1", "expected 'key,updates'"),
        ("1,2.5", "not integers"),
    ],
)
def test_parse_rejects_bad_lines_naming_file_and_line(line: str, needle: str) -> None:
    with pytest.raises(BadInput, match=needle) as exc:
        parse_stats(["# ok", "1,1", line], "f.csv")
    assert "f.csv:3" in str(exc.value)


def test_load_missing_file_is_bad_input(tmp_path) -> None:
    with pytest.raises(BadInput, match="cannot read"):
        load_stats(tmp_path / "nope.csv")


def test_rank_orders_by_count_then_key_and_drops_zero_counts() -> None:
    assert rank({5: 3, 1: 3, 9: 10, 4: 0}) == [(9, 10), (1, 3), (5, 3)]


def test_budget_takes_the_most_updated_keys_and_reports_coverage() -> None:
    freqs = {k: 100 - k for k in range(100)}  # key 0 is the hottest
    hs = choose(freqs, budget=10)
    assert hs.keys == list(range(10))
    assert hs.covered == sum(100 - k for k in range(10))
    assert hs.total == sum(freqs.values())
    assert hs.describe().startswith(f"10 keys cover {100 * hs.covered / hs.total:.1f}% of updates")


def test_budget_is_optimal_against_brute_force() -> None:
    rng = random.Random(7)
    for _ in range(50):
        freqs = {k: rng.randint(0, 20) for k in rng.sample(range(1000), 8)}
        budget = rng.randint(0, 8)
        best = max(
            (sum(freqs[k] for k in sub) for sub in itertools.combinations(freqs, budget)),
            default=0,
        )
        assert choose(freqs, budget=budget).covered == best


def test_coverage_takes_the_fewest_keys_that_reach_the_target() -> None:
    freqs = {1: 50, 2: 30, 3: 15, 4: 5}
    assert choose(freqs, coverage=0.5).keys == [1]
    assert choose(freqs, coverage=0.8).keys == [1, 2]
    assert choose(freqs, coverage=0.81).keys == [1, 2, 3]
    assert choose(freqs, coverage=1.0).keys == [1, 2, 3, 4]
    assert choose(freqs, coverage=0.0).keys == []


def test_coverage_is_minimal_against_brute_force() -> None:
    rng = random.Random(11)
    for _ in range(50):
        freqs = {k: rng.randint(1, 30) for k in range(7)}
        target = rng.random()
        total = sum(freqs.values())
        fewest = min(
            n
            for n in range(len(freqs) + 1)
            for sub in itertools.combinations(freqs, n)
            if sum(freqs[k] for k in sub) >= target * total
        )
        hs = choose(freqs, coverage=target)
        assert len(hs.keys) == fewest
        assert hs.coverage >= target


def test_budget_caps_a_coverage_target() -> None:
    freqs = {k: 1 for k in range(100)}
    hs = choose(freqs, budget=10, coverage=0.9)
    assert len(hs.keys) == 10
    assert hs.coverage == pytest.approx(0.1)


def test_empty_statistics_give_an_empty_set() -> None:
    hs = choose({}, budget=5)
    assert hs.keys == [] and hs.coverage == 0.0 and "0 keys cover 0.0%" in hs.describe()


def test_min_updates_leaves_rarely_updated_keys_on_the_ps() -> None:
    freqs = {1: 50, 2: 10, 3: 5, 4: 4, 5: 1}
    assert choose(freqs, budget=10, min_updates=5).keys == [1, 2, 3]
    assert choose(freqs, budget=2, min_updates=5).keys == [1, 2]  # the budget still caps
    assert choose(freqs, budget=10, min_updates=51).keys == []
    assert choose(freqs, budget=10).keys == [1, 2, 3, 4, 5]  # no floor by default


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"budget": -1}, {"coverage": 1.5}, {"coverage": -0.1}, {"budget": 3, "min_updates": -1}],
)
def test_choose_rejects_bad_parameters(kwargs: dict) -> None:
    with pytest.raises(BadInput):
        choose({1: 1}, **kwargs)


def test_combine_adds_weighted_switch_hits_so_hot_keys_stay_hot() -> None:
    # Key 1 is hot: its pushes were aggregated in the switch, so the PS saw few of them.
    ps = {1: 2, 2: 40, 3: 30}
    hits = {1: 400}
    assert choose(ps, budget=1).keys == [2]
    assert choose(combine(ps, hits), budget=1).keys == [1]
    assert combine(ps, hits, weight=0.25) == {1: 102, 2: 40, 3: 30}
    with pytest.raises(BadInput):
        combine(ps, hits, weight=-1)
