"""The zipf workload: Zipf draws over the key space, each pushed with a random value."""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from contract.constants import to_fixed
from hosts.workloads.base import Step, Workload, WorkloadName, register
from hosts.workloads.drift import Drift, DriftSpec, drift_field
from hosts.workloads.seeded import (
    KEYS_STREAM,
    MAPPING_STREAM,
    VALUES_STREAM,
    WorkloadError,
    seeded_rng,
    zipf_cdf,
)


@register
class ZipfWorkload(Workload):
    """Each worker draws `keys_per_iter` keys per iteration from Zipf(skew) over the key space
    (duplicates merged) and pushes a uniform random value in +-value_range for each. Rank r is
    mapped to key (a*r + b) mod key_space, a seeded bijection, so hot keys spread over shards.
    With `drift`, the ranks are permuted per epoch first (drift.py)."""

    name = WorkloadName.ZIPF
    about = "Zipf draws"
    drifts = True

    def __init__(
        self,
        key_space: int,
        skew: float = 1.1,
        keys_per_iter: int = 64,
        seed: int = 1,
        value_range: float = 0.01,
        drift: DriftSpec | None = None,
    ) -> None:
        if keys_per_iter <= 0:
            raise WorkloadError(f"keys per iteration must be > 0, got {keys_per_iter}")
        self.key_space, self.skew, self.keys_per_iter = key_space, skew, keys_per_iter
        self.seed, self.value_range = seed, value_range
        self.vmax = to_fixed(value_range)
        self._cdf = zipf_cdf(key_space, skew)
        rng = seeded_rng(seed, MAPPING_STREAM)
        self._a = 1
        while key_space > 1:
            self._a = int(rng.integers(1, key_space))
            if math.gcd(self._a, key_space) == 1:
                break
        self._b = int(rng.integers(0, key_space))
        self.drift = drift
        self._drift = Drift(drift, key_space, seed) if drift and drift.fraction else None

    @classmethod
    def from_args(cls, args: argparse.Namespace, drift: DriftSpec | None) -> ZipfWorkload:
        return cls(args.keys, args.skew, args.keys_per_iter, args.seed, args.value_range, drift)

    @classmethod
    def config_words(
        cls, config: Mapping[str, Any], defaults: Mapping[str, Any]
    ) -> tuple[str, str]:
        skew = f"skew {config['skew']:g}"
        detail = f"{skew}, {config['keys']} keys"
        if config["keys_per_iter"] != defaults["keys_per_iter"]:  # not make run's
            detail += f", {config['keys_per_iter']} draws per worker and iteration"
        return f"{cls.name} workload ({detail})", f"{cls.name} {skew}"

    def rank_to_key(self, ranks: np.ndarray) -> np.ndarray:
        ranks = np.asarray(ranks, dtype=np.uint64)
        return (ranks * np.uint64(self._a) + np.uint64(self._b)) % np.uint64(self.key_space)

    def _keys_at(self, ranks: np.ndarray, iteration: int) -> np.ndarray:
        if self._drift is not None:
            ranks = self._drift.ranks(ranks, iteration)
        return self.rank_to_key(ranks)

    def hottest(self, n: int, iteration: int = 1) -> np.ndarray:
        """The n most likely keys in `iteration`, hottest first (what a frequency-based
        controller finds; the oracle's choice under drift)."""
        return self._keys_at(np.arange(min(n, self.key_space)), iteration)

    def draw_probability(self, n: int) -> np.ndarray:
        """Per rank 0..n-1, the chance that one worker's iteration pulls (and pushes) the key
        at that rank: `keys_per_iter` draws, duplicates merged. Times the workers, a key's
        expected updates per iteration (drift moves keys between ranks, not probabilities)."""
        p = np.diff(self._cdf[: min(n, self.key_space)], prepend=0.0)
        return -np.expm1(self.keys_per_iter * np.log1p(-np.minimum(p, 1.0)))

    def pull_keys(self, worker: int, iteration: int) -> np.ndarray:
        u = seeded_rng(self.seed, KEYS_STREAM, worker, iteration).random(self.keys_per_iter)
        ranks = np.minimum(np.searchsorted(self._cdf, u, side="right"), self.key_space - 1)
        return np.unique(self._keys_at(ranks, iteration))

    def step(self, worker: int, iteration: int, keys: np.ndarray, pulled: np.ndarray) -> Step:
        rng = seeded_rng(self.seed, VALUES_STREAM, worker, iteration)
        values = rng.integers(-self.vmax, self.vmax, size=len(keys), endpoint=True)
        return Step(keys, values.astype(np.int32))

    def describe(self) -> dict[str, Any]:
        return {
            "workload": "zipf",
            "keys": self.key_space,
            "skew": self.skew,
            "keys_per_iter": self.keys_per_iter,
            "seed": self.seed,
            "value_range": self.value_range,
            **drift_field(self.drift),
        }
