"""Choosing the hot set from update-frequency statistics (pure functions, no switch).

Statistics file, accepted here as:
  - the PS agent's frequency file (contract/freqfile.py: CSV, .npz or .live), read by that
    module's reader; several shards' CSV files concatenated count as one (their keys are
    disjoint); the `updates` column is the count used;
  - or a list written by hand, one `key,updates[,more columns]` per line (comma or whitespace
    separated); keys are uint64 in decimal or 0x-hex, updates non-negative integers; blank
    lines and lines starting with `#` are ignored; an optional header line whose first field
    is `key` names the columns, and its `updates` column is the count used; a key listed
    twice has its counts summed.

A PS only sees the updates that reached it: once a key is hot, its pushes are aggregated in
the switch and vanish from the PS's counts. `combine` adds the switch's hit counts (direct
counters of the hot-key tables) back, so a hot key is not evicted for being hot. Hits count
every lookup hit (pushes, pulls and writebacks), hence the weight.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from contract.constants import KEY_MAX
from contract.freqfile import frequency_meta, read_frequencies
from controller.errors import BadInput


def parse_stats(lines: Iterable[str], source: str = "<stats>") -> dict[int, int]:
    """Parse statistics lines (format above) into {key: updates}."""
    freqs: dict[int, int] = {}
    key_col, count_col = 0, 1
    seen_data = False
    for lineno, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.replace(",", " ").split()
        if not seen_data and fields[0].lower() == "key":
            names = [f.lower() for f in fields]
            if "updates" not in names:
                raise BadInput(f"{source}:{lineno}: header has no 'updates' column: {line!r}")
            key_col, count_col = 0, names.index("updates")
            seen_data = True
            continue
        seen_data = True
        if len(fields) <= max(key_col, count_col):
            raise BadInput(f"{source}:{lineno}: expected 'key,updates', got {line!r}")
        try:
            key = int(fields[key_col], 0)
            count = int(fields[count_col])
        except ValueError:
            raise BadInput(f"{source}:{lineno}: not integers: {line!r}") from None
        if not 0 <= key <= KEY_MAX:
            raise BadInput(f"{source}:{lineno}: key {key} is not a uint64")
        if count < 0:
            raise BadInput(f"{source}:{lineno}: negative update count {count}")
        freqs[key] = freqs.get(key, 0) + count
    return freqs


def load_stats(path: str | Path) -> dict[int, int]:
    """A statistics file (format above) as {key: updates}."""
    try:
        if frequency_meta(path) is None:  # not the PS's file: a list written by hand
            with open(path) as f:
                return parse_stats(f, str(path))
        freqs: dict[int, int] = {}
        for table in read_frequencies(path):
            for key, n in zip(table.keys.tolist(), table.updates.tolist()):
                freqs[key] = freqs.get(key, 0) + n
        return freqs
    except OSError as e:
        raise BadInput(f"cannot read statistics file {path}: {e.strerror}") from None
    except ValueError as e:  # a PS frequency file cut short or not one at all
        raise BadInput(f"statistics file {path}: {e}") from None


def combine(
    freqs: Mapping[int, int], hits: Mapping[int, int], weight: float = 1.0
) -> dict[int, int]:
    """PS update counts plus `weight` times the switch's hit counts, per key."""
    if weight < 0:
        raise BadInput(f"hit weight {weight} is negative")
    out = dict(freqs)
    for key, n in hits.items():
        out[key] = out.get(key, 0) + round(weight * n)
    return out


@dataclass(frozen=True)
class HotSet:
    keys: list[int]  # hottest first
    covered: int  # updates of the chosen keys
    total: int  # updates of all keys
    candidates: int  # keys with at least one update

    @property
    def coverage(self) -> float:
        return self.covered / self.total if self.total else 0.0

    def describe(self) -> str:
        return (
            f"{len(self.keys)} keys cover {100 * self.coverage:.1f}% of updates "
            f"({self.covered} of {self.total}; {self.candidates} keys seen)"
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "keys": self.keys,
            "covered": self.covered,
            "total": self.total,
            "coverage": self.coverage,
            "candidates": self.candidates,
        }


def rank(freqs: Mapping[int, int]) -> list[tuple[int, int]]:
    """(key, updates) with updates > 0, most updated first; ties by key, so it is stable."""
    return sorted(((k, n) for k, n in freqs.items() if n > 0), key=lambda kn: (-kn[1], kn[0]))


def choose(
    freqs: Mapping[int, int],
    budget: int | None = None,
    coverage: float | None = None,
    min_updates: int = 0,
) -> HotSet:
    """The hot set: the most updated keys, at most `budget` of them, stopping as soon as
    they cover `coverage` (a fraction in [0, 1]) of all updates, and taking no key with fewer
    than `min_updates` updates. With only a budget: the keys covering the most updates within
    it; with only a target: the fewest keys reaching it (all keys if it cannot be reached).

    Why a floor: a hot slot is collected every iteration, touched or not, so a key updated
    less than about once per iteration costs the PS more control traffic than it saves."""
    if budget is None and coverage is None:
        raise BadInput("give a slot budget, a coverage target, or both")
    if budget is not None and budget < 0:
        raise BadInput(f"budget {budget} is negative")
    if coverage is not None and not 0.0 <= coverage <= 1.0:
        raise BadInput(f"coverage target {coverage} is not in [0, 1]")
    if min_updates < 0:
        raise BadInput(f"minimum update count {min_updates} is negative")
    ranked = rank(freqs)
    total = sum(n for _, n in ranked)
    keys: list[int] = []
    covered = 0
    for key, n in ranked:
        if budget is not None and len(keys) >= budget:
            break
        if coverage is not None and covered >= coverage * total:
            break
        if n < min_updates:
            break
        keys.append(key)
        covered += n
    return HotSet(keys, covered, total, len(ranked))


@dataclass(frozen=True)
class JobDemand:
    """One job's update counts: `freqs` {key: updates} over `iterations` iterations."""

    freqs: Mapping[int, int]
    iterations: int

    def __post_init__(self) -> None:
        if self.iterations < 1:
            raise BadInput(
                f"a job's counts must span at least one iteration, not {self.iterations}"
            )


# Slots move from one job to another only when the taker's keys are updated more often than
# the giver's by this many standard errors of the warm-up's counts (a count n is read as
# Poisson, variance n): near the split's boundary the jobs' keys have close rates, and
# trading on noise loses to equal shares (docs/results/2026-12-03-first-come-sharing.md).
SPLIT_CONFIDENCE = 2.0


def split_slots(
    demands: Mapping[int, JobDemand],
    slots: int,
    min_rate: float = 1.0,
    confidence: float = SPLIT_CONFIDENCE,
) -> dict[int, HotSet]:
    """Share one switch's `slots` between jobs ({job id: demand}) so that the bytes the jobs'
    PS links save per iteration, summed over the jobs, are the most.

    A hot key updated r times per iteration takes r push entries and r pull entries off its
    PS's link toward the PS, and adds one COLLECT_REPLY entry: a slot saves (2r - 1) entries
    per iteration. Entries cost the same in every job (one protocol), so the marginal saving
    of a job's next slot is its next candidate's rate. The rates are estimates from a
    warm-up, so the split starts from equal shares (`equal_split`), gives the slots a job
    cannot use (fewer candidates than its share) to the highest rates left, then moves m
    slots from job A's least updated keys to job B's next candidates while B's m rates
    exceed A's m, summed, by `confidence` standard errors of that sum: each move gains in
    expectation, and jobs whose rates are alike keep equal shares. `min_rate` is the floor
    `choose` applies (a key updated less than about once an iteration saves less than it
    costs)."""
    if slots < 0:
        raise BadInput(f"slot budget {slots} is negative")
    if min_rate < 0:
        raise BadInput(f"minimum rate {min_rate} is negative")
    if confidence < 0:
        raise BadInput(f"confidence {confidence} is negative")
    if not demands:
        return {}
    ranked = {
        job: [(k, n) for k, n in rank(d.freqs) if n / d.iterations >= min_rate]
        for job, d in demands.items()
    }
    share = slots // len(demands)
    kept = {job: min(share, len(r)) for job, r in ranked.items()}

    def rate(job: int, i: int) -> float:
        return ranked[job][i][1] / demands[job].iterations

    def variance(job: int, i: int) -> float:
        return ranked[job][i][1] / demands[job].iterations ** 2

    # Slots no job's share used: to the highest rates not yet kept.
    spare = slots - sum(kept.values())
    while spare > 0:
        left = [job for job in ranked if kept[job] < len(ranked[job])]
        if not left:
            break
        hottest = max(left, key=lambda job: (rate(job, kept[job]), -job))
        kept[hottest] += 1
        spare -= 1
    # Moves of m slots from one job to another that gain beyond the estimates' noise, the
    # largest gain first: m = 1 trusts a single pair of counts, a larger m their sums.
    while True:
        best: tuple[float, int, int, int] | None = None
        for giver in ranked:
            for taker in ranked:
                if giver == taker:
                    continue
                room = min(kept[giver], len(ranked[taker]) - kept[taker])
                gain = var = 0.0
                for m in range(1, room + 1):
                    gain += rate(taker, kept[taker] + m - 1) - rate(giver, kept[giver] - m)
                    var += variance(taker, kept[taker] + m - 1) + variance(giver, kept[giver] - m)
                    if gain > confidence * math.sqrt(var) and (best is None or gain > best[0]):
                        best = (gain, giver, taker, m)
        if best is None:
            break
        _, giver, taker, m = best
        kept[giver] -= m
        kept[taker] += m
    return {
        job: _hot_set(demands[job].freqs, [k for k, _ in ranked[job][: kept[job]]])
        for job in demands
    }


def equal_split(
    demands: Mapping[int, JobDemand], slots: int, min_rate: float = 1.0
) -> dict[int, HotSet]:
    """The baseline `split_slots` is compared with: each job gets slots // jobs slots and
    fills them as `choose` would alone."""
    if not demands:
        return {}
    share = slots // len(demands)
    return {
        job: choose(demand.freqs, budget=share, min_updates=round(min_rate * demand.iterations))
        for job, demand in demands.items()
    }


def _hot_set(freqs: Mapping[int, int], keys: list[int]) -> HotSet:
    ranked = rank(freqs)
    return HotSet(keys, sum(freqs[k] for k in keys), sum(n for _, n in ranked), len(ranked))
