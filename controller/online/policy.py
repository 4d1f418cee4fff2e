"""The change policy: which keys enter and leave the hot set at a step."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from controller.errors import BadInput

# The policy's defaults, the same for `hotagg-ctl hotkeys auto` and `make run HOTSET=dynamic`
# (tuned with bench/hotset_sim.py; experiment/hotset.py says on what and why).
MARGIN = 0.6  # a candidate needs (1 + MARGIN) times the weakest member's rate
MAX_CHANGES = 32  # keys entering per step
MIN_RATE = 1.0  # updates per iteration a key needs to enter
CONFIDENCE = 2.0  # ... and to beat the weakest member by this many standard errors


@dataclass(frozen=True)
class Changes:
    add: list[int]
    remove: list[int]


@dataclass
class Hysteresis:
    """Which keys enter and leave the hot set, so that keys do not flap:
    - while the set has room (fewer than `budget` keys), the best candidates enter;
    - a full set changes a member only for a candidate whose rate beats the weakest member's
      by the `margin` (rate > (1 + margin) * weakest; the best candidate against the weakest
      member, then the next pair, ...), and with `confidence` z > 0 by z standard errors
      of the difference too (`stderr`, RateEstimator.stderr): a candidate seen in one step
      must beat the member by more than its own noise, a key that has been popular for a
      while by less;
    - at most `max_changes` keys enter per step (each replacement evicts one);
    - no key enters below `min_rate` updates per iteration (a slot is collected every
      iteration: a rarer key costs the PS more than it saves)."""

    budget: int
    margin: float = MARGIN
    max_changes: int = MAX_CHANGES
    min_rate: float = MIN_RATE
    confidence: float = CONFIDENCE

    def __post_init__(self) -> None:
        if self.budget < 0 or self.max_changes < 0:
            raise BadInput("budget and max changes must be >= 0")
        if not self.margin >= 0 or self.min_rate < 0 or not self.confidence >= 0:
            raise BadInput("hysteresis margin, minimum rate and confidence must be >= 0")

    def choose(
        self,
        current: Iterable[int],
        rate: Callable[[int], float],
        seen: Iterable[int],
        stderr: Callable[[int], float] | None = None,
    ) -> Changes:
        members = set(current)
        rates = {k: rate(k) for k in members.union(seen)}  # one call a key: ~1 us each
        rate = rates.__getitem__
        candidates = sorted(
            (k for k in set(seen) - members if rates[k] >= self.min_rate and rates[k] > 0),
            key=lambda k: (-rates[k], k),
        )
        add: list[int] = []
        remove: list[int] = []
        # over budget (the budget shrank): the weakest leave first
        weakest = sorted(members, key=lambda k: (rate(k), k))
        while len(members) - len(remove) > self.budget:
            remove.append(weakest.pop(0))
        room = self.budget - (len(members) - len(remove))
        noise = stderr if self.confidence else None  # no noise test without both
        for key in candidates:
            if len(add) >= self.max_changes:
                break
            if room > 0:
                add.append(key)
                room -= 1
                continue
            if not weakest or rate(key) <= (1.0 + self.margin) * rate(weakest[0]):
                break  # sorted: no later candidate beats the weakest either
            if noise is not None:
                excess = rate(key) - (1.0 + self.margin) * rate(weakest[0])
                if excess <= self.confidence * math.hypot(noise(key), noise(weakest[0])):
                    continue  # within its noise; a steadier, slower candidate may still pass
            remove.append(weakest.pop(0))
            add.append(key)
        return Changes(add, remove)
