"""What a rate source reports to the loop: updates per key since its previous read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass
class Observation:
    """Updates per key counted since the previous read."""

    counts: dict[int, float]
    iteration: int | None = None  # the last iteration the counts reach, when known
    iterations: int | None = None  # iterations the counts span, when known
    complete: bool = False  # every key's updates are counted (the oracle can be computed)
    # PSFrequencySource(collected=True): the hot keys' `collected` counts (iterations whose
    # switch sum the PS collected) behind the estimates in `counts`, and the workers
    presence: dict[int, float] | None = None
    workers: int = 1
    # set by OnlineController: keys in the hot set all through the counts, and keys that
    # entered or left it while they were counted (the last step's changes)
    hot: frozenset[int] = frozenset()
    moved: frozenset[int] = frozenset()


class RateSource(Protocol):
    def read(self) -> Observation: ...


def presence_rate(share: np.ndarray, workers: float) -> np.ndarray:
    """Updates per iteration implied by the share of iterations a hot key was collected in
    (updates_from_presence's inversion, per iteration)."""
    return workers * (1.0 - (1.0 - np.clip(share, 0.0, 1.0)) ** (1.0 / workers))


def updates_from_presence(collected: np.ndarray, span: int, workers: int) -> np.ndarray:
    """Worker updates implied by a hot key's `collected` count: the PS collects a key's sum
    once per iteration in which at least one of `workers` pushed it, so over `span`
    iterations the share P = collected/span estimates 1 - (1 - q)^workers, q being a
    worker's chance to draw the key (workers draw independently from one distribution), and
    the updates are span * workers * q. A key collected every iteration (P = 1) gets the
    most it could have, `workers` per iteration: such a key is never the weakest member."""
    return max(span, 1) * presence_rate(collected / max(span, 1), workers)
