"""Emulated compute: how long a worker computes its step in each iteration, and stragglers.

A worker sleeps for its compute time between its last PULL_REPLY and its first PUSH
(hosts/worker.py), so compute costs time, not CPU: it does not compete with the emulated
switch and agents for the cores. Every draw is seeded by (seed, worker, iteration) alone, so
both measured modes, the model (experiment/model.py) and a rerun see the same times.

COMPUTE= (a duration takes `us`, `ms` or `s`):

- `20ms`: fixed;
- `normal:20ms,5ms`: normal, mean and standard deviation, a negative draw taken as 0;
- `lognormal:20ms,0.5`: log-normal, median and sigma of its logarithm;
- a `real:` prefix (`real:2us`, `real:normal:2us,0.5us`): in the real time the links stand
  for (REAL_BW=), multiplied by the run's time scale.

STRAGGLERS= (needs COMPUTE), one or both of, comma-separated:

- `N:F`: workers 0..N-1 compute F times longer in every iteration;
- `p=P:F`: in each iteration, each worker computes F times longer with probability P.
"""

from __future__ import annotations

import argparse
import math
import re
from dataclasses import dataclass, replace
from enum import Enum

import numpy as np

# Mixed into every draw's seed so that compute draws are not the workload's draws.
COMPUTE_STREAM = 0xC0DE
REAL_PREFIX = "real:"
_UNITS_MS = {"us": 1e-3, "ms": 1.0, "s": 1e3}
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(us|ms|s)\s*$")


class ComputeError(ValueError):
    """A COMPUTE= or STRAGGLERS= text that cannot be read; the message says how to write it."""


class Distribution(str, Enum):
    FIXED = "fixed"
    NORMAL = "normal"
    LOGNORMAL = "lognormal"


def parse_duration_ms(text: str) -> float:
    """'20ms' -> 20.0, '500us' -> 0.5, '0.1s' -> 100.0: milliseconds, a unit required."""
    m = _DURATION.match(text)
    if m is None:
        raise ComputeError(f"{text!r} is not a duration: write it with a unit, e.g. 20ms, 500us")
    return float(m.group(1)) * _UNITS_MS[m.group(2)]


def format_ms(ms: float) -> str:
    """A duration in the unit that reads best (the inverse of parse_duration_ms)."""
    if ms and ms < 1:
        return f"{ms * 1e3:g}us"
    return f"{ms:g}ms"


@dataclass(frozen=True)
class ComputeSpec:
    """COMPUTE=: a distribution of one iteration's compute time, in milliseconds."""

    distribution: Distribution
    ms: float  # fixed: the time; normal: the mean; lognormal: the median
    spread: float = 0.0  # normal: standard deviation (ms); lognormal: sigma of the log
    real: bool = False  # in real time: the run multiplies it by its time scale (scaled)

    @classmethod
    def parse(cls, text: str) -> ComputeSpec | None:
        """The spec of a COMPUTE= text; None for none ('', '0', 'none')."""
        text = text.strip()
        if text.lower() in ("", "0", "none"):
            return None
        real = text.startswith(REAL_PREFIX)
        body = text[len(REAL_PREFIX) :] if real else text
        name, sep, args = body.partition(":")
        if not sep:
            spec = cls(Distribution.FIXED, parse_duration_ms(body), real=real)
        elif name in (Distribution.NORMAL, Distribution.LOGNORMAL):
            parts = args.split(",")
            if len(parts) != 2:
                raise ComputeError(
                    f"{text!r}: {name} takes two values, e.g. {name}:20ms,"
                    + ("5ms" if name == Distribution.NORMAL else "0.5")
                )
            center = parse_duration_ms(parts[0])
            if name == Distribution.NORMAL:
                spread = parse_duration_ms(parts[1])
            else:
                try:
                    spread = float(parts[1])
                except ValueError:
                    raise ComputeError(
                        f"{text!r}: lognormal's second value is the sigma of the logarithm, "
                        "a plain number (e.g. 0.5)"
                    ) from None
            spec = cls(Distribution(name), center, spread, real)
        else:
            raise ComputeError(
                f"{text!r}: use a duration (20ms), normal:MEAN,STD (normal:20ms,5ms) or "
                "lognormal:MEDIAN,SIGMA (lognormal:20ms,0.5), optionally after real:"
            )
        if not (math.isfinite(spec.ms) and math.isfinite(spec.spread)) or spec.spread < 0:
            raise ComputeError(f"{text!r}: values must be finite and not negative")
        if spec.ms <= 0:
            raise ComputeError(f"{text!r}: the time must be positive (COMPUTE= empty for none)")
        return spec

    def __str__(self) -> str:
        """The normal form, as parse reads it."""
        prefix = REAL_PREFIX if self.real else ""
        if self.distribution == Distribution.FIXED:
            return prefix + format_ms(self.ms)
        spread = (
            format_ms(self.spread)
            if self.distribution == Distribution.NORMAL
            else (f"{self.spread:g}")
        )
        return f"{prefix}{self.distribution.value}:{format_ms(self.ms)},{spread}"

    def scaled(self, time_scale: float | None) -> ComputeSpec:
        """The spec in the emulated time the run's links keep: a real-time one multiplied by
        `time_scale` (emulated seconds per real second); an emulated one as it is."""
        if not self.real:
            return self
        if not time_scale:
            raise ComputeError(f"COMPUTE={self} is in real time: it needs REAL_BW= (a time scale)")
        spread = (
            self.spread * time_scale if self.distribution == Distribution.NORMAL else (self.spread)
        )
        return replace(self, ms=self.ms * time_scale, spread=spread, real=False)

    def mean_ms(self) -> float:
        """The distribution's mean (normal's before negative draws are taken as 0)."""
        if self.distribution == Distribution.LOGNORMAL:
            return self.ms * math.exp(self.spread**2 / 2)
        return self.ms


@dataclass(frozen=True)
class Stragglers:
    """STRAGGLERS=: which workers, or which iterations, compute slower, and by how much."""

    slow_workers: int = 0  # workers 0..slow_workers-1 ...
    worker_factor: float = 1.0  # ... compute this many times longer
    probability: float = 0.0  # each iteration of each worker, with this probability ...
    iteration_factor: float = 1.0  # ... computes this many times longer

    @classmethod
    def parse(cls, text: str) -> Stragglers | None:
        """The stragglers of a STRAGGLERS= text; None for none ('' or 'none')."""
        text = text.strip()
        if text.lower() in ("", "none"):
            return None
        found: dict[str, float] = {}
        for clause in text.split(","):
            what, sep, factor_text = clause.strip().rpartition(":")
            try:
                factor = float(factor_text) if sep else math.nan
            except ValueError:
                factor = math.nan
            if not sep or not math.isfinite(factor):
                raise ComputeError(
                    f"{clause.strip()!r}: write N:F (N workers F times slower, e.g. 1:3) or "
                    "p=P:F (a slow iteration with probability P, e.g. p=0.1:3)"
                )
            if factor < 1:
                raise ComputeError(f"{clause.strip()!r}: a straggler is slower: F must be >= 1")
            key = "p" if what.startswith("p=") else "n"
            if key in found:
                raise ComputeError(f"{text!r}: give each of N:F and p=P:F at most once")
            try:
                value = float(what[2:]) if key == "p" else int(what)
            except ValueError:
                value = math.nan
            if key == "p" and not 0 < value < 1:
                raise ComputeError(f"{clause.strip()!r}: P must be in (0, 1)")
            if key == "n" and not value >= 1:
                raise ComputeError(f"{clause.strip()!r}: N must be a whole number >= 1")
            found[key] = value
            found[key + "_factor"] = factor
        return cls(
            int(found.get("n", 0)),
            found.get("n_factor", 1.0),
            found.get("p", 0.0),
            found.get("p_factor", 1.0),
        )

    def __str__(self) -> str:
        parts = []
        if self.slow_workers:
            parts.append(f"{self.slow_workers}:{self.worker_factor:g}")
        if self.probability:
            parts.append(f"p={self.probability:g}:{self.iteration_factor:g}")
        return ",".join(parts)


@dataclass(frozen=True)
class ComputePlan:
    """The compute time of every worker and iteration: a spec in emulated time, the
    stragglers and the seed."""

    spec: ComputeSpec
    stragglers: Stragglers | None = None
    seed: int = 1

    def __post_init__(self) -> None:
        if self.spec.real:
            raise ComputeError("a plan's spec is in emulated time: scale it first (scaled)")

    def ms(self, worker: int, iteration: int) -> float:
        """Worker `worker`'s compute time in `iteration`, in milliseconds."""
        rng = np.random.default_rng([self.seed, COMPUTE_STREAM, worker, iteration])
        spec = self.spec
        if spec.distribution == Distribution.NORMAL:
            ms = max(0.0, float(rng.normal(spec.ms, spec.spread)))
        elif spec.distribution == Distribution.LOGNORMAL:
            ms = spec.ms * math.exp(spec.spread * float(rng.standard_normal()))
        else:
            ms = spec.ms
        slow = self.stragglers
        if slow is not None:
            if worker < slow.slow_workers:
                ms *= slow.worker_factor
            # drawn whatever the probability, so that P does not shift the other draws
            if float(rng.random()) < slow.probability:
                ms *= slow.iteration_factor
        return ms

    def table(self, workers: int, iterations: int) -> np.ndarray:
        """ms(w, t) for workers 0..workers-1 (rows) and iterations 1..iterations (columns)."""
        return np.array(
            [[self.ms(w, t) for t in range(1, iterations + 1)] for w in range(workers)]
        ).reshape(workers, iterations)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The worker's compute options (hosts/worker.py)."""
    add = parser.add_argument
    add(
        "--compute",
        default="",
        help="compute time per iteration, slept between the pull and the push: 20ms, "
        "normal:20ms,5ms or lognormal:20ms,0.5 (emulated time; empty: none)",
    )
    add(
        "--stragglers",
        default="",
        help="N:F (workers 0..N-1 compute F times longer) and/or p=P:F (a slow iteration "
        "with probability P); needs --compute",
    )


def plan_of(compute: str, stragglers: str, seed: int) -> ComputePlan | None:
    """The worker's plan from its options; ComputeError for text it cannot read."""
    spec = ComputeSpec.parse(compute)
    slow = Stragglers.parse(stragglers)
    if spec is None:
        if slow is not None:
            raise ComputeError(f"--stragglers {slow} slows compute: give --compute too")
        return None
    if spec.real:
        raise ComputeError(f"--compute {spec}: a worker takes emulated time, not real:")
    return ComputePlan(spec, slow, seed)
