"""What the workloads draw from: seeded generators, one stream per purpose, and the numbers
they share (a Zipf law's CDF, fixed-point conversion).

Every draw is a function of (seed, stream, more...) alone (numpy's SeedSequence of that
list), so a worker, a reference run and the model draw the same numbers in any order.
"""

from __future__ import annotations

import numpy as np

from contract.constants import INT32_MAX, INT32_MIN, VALUE_SCALE

# Stream ids keep the seeded generators of different purposes independent.
KEYS_STREAM = 1
VALUES_STREAM = 2
TRUTH_STREAM = 3
EXAMPLES_STREAM = 4
MAPPING_STREAM = 5
DRIFT_STREAM = 6


class WorkloadError(ValueError):
    """Bad workload parameters or a bad trace file."""


def seeded_rng(seed: int, stream: int, *more: int) -> np.random.Generator:
    """The generator of `stream` for (seed, *more), e.g. (seed, KEYS_STREAM, worker, t)."""
    return np.random.default_rng([seed, stream, *more])


def zipf_cdf(n: int, skew: float) -> np.ndarray:
    """The CDF of Zipf(skew) over ranks 0..n-1 (rank r has weight (r + 1) ** -skew)."""
    if n <= 0:
        raise WorkloadError(f"key space must be > 0, got {n}")
    if skew < 0:
        raise WorkloadError(f"skew must be >= 0, got {skew}")
    weights = np.arange(1, n + 1, dtype=np.float64) ** -skew
    cdf = np.cumsum(weights)
    return cdf / cdf[-1]


def fixed_point(real: np.ndarray) -> np.ndarray:
    """Real contributions -> int32 fixed point (round half to even, clamped)."""
    return np.clip(np.rint(real * VALUE_SCALE), INT32_MIN, INT32_MAX).astype(np.int32)
