"""The loop: one step reads a source, updates the estimator, lets the policy choose and applies
the changes to the target; `OnlineController.run` repeats it every interval."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from controller.errors import BadInput
from controller.online.estimators import Estimator
from controller.online.observation import RateSource
from controller.online.policy import Changes, Hysteresis


@dataclass
class StepReport:
    step: int
    iteration: int | None
    added: list[int]
    removed: list[int]
    hot: int  # keys hot after the step
    covered: float  # updates of the interval on the hot set it ran with
    total: float
    oracle: float | None  # updates of the interval's best `budget` keys (complete counts)
    seconds: float = 0.0  # the whole step, from reading the counts to the Write's reply
    # when the step began (time.time(), as the agents' logs) and how long its Write took:
    # with the workers' logs they place the Write within the iterations
    started: float | None = None
    write_seconds: float = 0.0

    @property
    def coverage(self) -> float:
        return self.covered / self.total if self.total else 0.0

    @property
    def oracle_coverage(self) -> float | None:
        if self.oracle is None:
            return None
        return self.oracle / self.total if self.total else 0.0

    def line(self) -> str:
        when = f"iteration {self.iteration}" if self.iteration is not None else f"step {self.step}"
        text = (
            f"{when}: +{len(self.added)} -{len(self.removed)} keys, "
            f"coverage {100 * self.coverage:.1f}%"
        )
        if self.oracle_coverage is not None:
            text += f" (oracle {100 * self.oracle_coverage:.1f}%)"
        return text

    def as_dict(self) -> dict[str, object]:
        return {
            "step": self.step,
            "iteration": self.iteration,
            "added": self.added,
            "removed": self.removed,
            "hot": self.hot,
            "coverage": self.coverage,
            "oracle": self.oracle_coverage,
            "updates": self.total,
            "seconds": self.seconds,
            "started": self.started,
            "write_seconds": self.write_seconds,
        }


def coverage_of(counts: Mapping[int, float], keys: Iterable[int]) -> float:
    return sum(counts.get(k, 0.0) for k in set(keys))


def oracle_of(counts: Mapping[int, float], budget: int) -> float:
    """Updates of the `budget` most updated keys of these counts."""
    return sum(sorted(counts.values(), reverse=True)[:budget])


class HotSetTarget(Protocol):
    """Where the hot set lives: the switch (`SwitchTarget`) or a fake in unit tests."""

    def current(self) -> set[int]: ...

    def apply(self, changes: Changes) -> None: ...


@dataclass
class OnlineController:
    """One step: read, estimate, choose, apply, report. `run` repeats it every interval."""

    target: HotSetTarget
    source: RateSource
    estimator: Estimator
    policy: Hysteresis
    log: Callable[[str], None] | None = None
    steps: int = 0
    history: list[StepReport] = field(default_factory=list)
    # the last step's changes: those keys moved while the next step's counts were made
    _moved: frozenset[int] = frozenset()

    def step(self) -> StepReport:
        started, start = time.time(), time.perf_counter()
        current = self.target.current()
        obs = self.source.read()
        if obs.presence is not None:
            obs = replace(obs, hot=frozenset(current), moved=self._moved)
        self.estimator.update(obs)
        est = self.estimator
        candidates = est.keys_at_least(self.policy.min_rate)  # the rest could not enter
        changes = self.policy.choose(current, est.rate, candidates, est.stderr)
        before_write = time.perf_counter()
        self.target.apply(changes)
        write_seconds = time.perf_counter() - before_write
        # the report's figures after the Write: the sooner it lands, the more of the
        # next iteration's pushes the new set takes
        covered, total = coverage_of(obs.counts, current), sum(obs.counts.values())
        oracle = oracle_of(obs.counts, self.policy.budget) if obs.complete else None
        moved = frozenset(changes.add) | frozenset(changes.remove)
        # an observation that spanned no iteration is held and counted with the next one,
        # which then spans this step's moves too
        self._moved = self._moved | moved if obs.iterations == 0 else moved
        self.steps += 1
        hot = len(current) - len(changes.remove) + len(changes.add)
        report = StepReport(
            self.steps,
            obs.iteration,
            changes.add,
            changes.remove,
            hot,
            covered,
            total,
            oracle,
            time.perf_counter() - start,
            started,
            write_seconds,
        )
        self.history.append(report)
        if self.log is not None:
            self.log(report.line())
        return report

    def run(
        self,
        interval: float,
        steps: int | None = None,
        stop: threading.Event | None = None,
    ) -> list[StepReport]:
        """Step every `interval` seconds (the first after one interval), `steps` times or
        until `stop` is set."""
        if not interval > 0 or math.isinf(interval):
            raise BadInput(f"interval {interval} must be a positive number of seconds")
        stop = stop or threading.Event()
        done: list[StepReport] = []
        next_at = time.monotonic() + interval
        while steps is None or len(done) < steps:
            if stop.wait(max(0.0, next_at - time.monotonic())):
                break
            next_at += interval
            done.append(self.step())
        return done
