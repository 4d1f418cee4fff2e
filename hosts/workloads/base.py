"""The Workload class, the registry of workloads by name, and what works on any workload.

Interface (one object serves all workers; everything is a pure function of the seed, the
worker, the iteration and the pulled parameters, so runs are reproducible and call order does
not matter):

- `pull_keys(worker, t)` -> sorted unique uint64 keys the worker pulls for iteration t;
- `step(worker, t, keys, pulled)` -> `Step(keys, values, loss)`: the entries to push for t,
  computed from `pulled` (int32 fixed-point values aligned with `keys`). The PS applies
  `params[key] -= value`, so a gradient-descent step pushes `lr * gradient` in fixed point.

A workload class registered with @register answers to its `name` in --workload and WORKLOAD=:
the workers' options (cli.py), the experiment's options and checks, the model and the
configuration line find it by that name and ask the class the rest (its class attributes
and classmethods below), as switch targets are found (topologies/targets.py).
"""

from __future__ import annotations

import argparse
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, TypeVar

import numpy as np

from contract.codec import saturate_int32
from contract.enums import NameEnum
from hosts.workloads.drift import DriftSpec
from hosts.workloads.seeded import WorkloadError


class WorkloadName(NameEnum):
    """The workloads hotagg ships, by their --workload / WORKLOAD= names. A workload
    registered elsewhere (a test's) is named by its class's plain string."""

    ZIPF = "zipf"
    LR = "lr"
    TRACE = "trace"


class Step(NamedTuple):
    keys: np.ndarray  # uint64, unique
    values: np.ndarray  # int32 contributions: the PS does params[key] -= value
    loss: float | None = None


@dataclass(frozen=True)
class RunOption:
    """An option of `python -m experiment run`, and its make variable, that gives the workers
    one of a workload's own options as it is (TRACE= / --trace for the trace workload).
    Options without one reach the workers through WORKLOAD_ARGS."""

    flag: str  # the experiment's option, the same as the workers' (--trace)
    make: str  # its make variable (TRACE)
    help: str
    metavar: str | None = None
    needed: bool = False  # the workload cannot run without it

    @property
    def dest(self) -> str:
        """Its argparse destination in the experiment's options."""
        return self.flag.lstrip("-").replace("-", "_")


class Workload(ABC):
    """One workload (module doc). A subclass that @register adds sets `name` and builds
    itself in `from_args`; the other class attributes and classmethods have defaults."""

    name: ClassVar[str]  # --workload, WORKLOAD=, and the registry's key
    about: ClassVar[str] = ""  # what --workload's help says it is
    # It takes --drift (DRIFT=): its popular head moves while it runs (drift.py).
    drifts: ClassVar[bool] = False
    # Its stream ends (a trace): the warm-up reads its first iterations and the measured
    # phases the ones after them. A generated stream's warm-up reads far further on instead,
    # so that the measured phases start at its iteration 1.
    finite_stream: ClassVar[bool] = False
    # Its pushes depend on the values it pulled (gradients): under SYNC=ssp:S or async, where
    # pulls may be stale, the two modes push different updates and their final parameters
    # are not comparable.
    pushes_use_pulled: ClassVar[bool] = False
    # The experiment's options (and make variables) for some of its own options.
    run_options: ClassVar[tuple[RunOption, ...]] = ()
    key_space: int

    @classmethod
    def add_arguments(cls, group: argparse._ArgumentGroup) -> None:
        """Its own options for the workers, in its group of their parser. The options every
        workload gets (cli.py: --keys, --seed, --skew, --keys-per-iter, --value-range) are
        there already; an option of the same name is a conflict argparse reports."""
        return  # none by default

    @classmethod
    def from_args(cls, args: argparse.Namespace, drift: DriftSpec | None) -> Workload:
        """It, from the workers' parsed options (cli.py); `drift` is --drift's, None unless
        the class `drifts`. Raises WorkloadError on values it cannot take."""
        raise WorkloadError(f"{cls.__name__} is not built from options (no from_args)")

    @classmethod
    def config_words(
        cls, config: Mapping[str, Any], defaults: Mapping[str, Any]
    ) -> tuple[str, str]:
        """How the configuration line names a run of it: a text and a short one for figure
        titles. `config`: a run's config.json fields, over the run's `defaults`."""
        name, skew = config["workload"], f"skew {config['skew']:g}"
        return f"{name} workload ({skew}, {config['keys']} keys)", f"{name} {skew}"

    def check_run(self, run: Mapping[str, Any]) -> list[str]:
        """What a run of it needs beyond its options, checked before the network is built
        (`run`: config.json's fields: workers, warmup, iterations, ...). Raises WorkloadError
        naming the make variable to change; returns notes for the user."""
        return []

    @abstractmethod
    def pull_keys(self, worker: int, iteration: int) -> np.ndarray: ...

    @abstractmethod
    def step(self, worker: int, iteration: int, keys: np.ndarray, pulled: np.ndarray) -> Step: ...

    @abstractmethod
    def describe(self) -> dict[str, Any]: ...


WORKLOADS: dict[str, type[Workload]] = {}
W = TypeVar("W", bound=type[Workload])


def register(cls: W) -> W:
    """Class decorator: the workload answers to its `name` from now on."""
    if cls.from_args.__func__ is Workload.from_args.__func__:  # type: ignore[attr-defined]
        raise TypeError(f"{cls.__name__}: a registered workload builds itself in from_args")
    if cls.name in WORKLOADS and WORKLOADS[cls.name] is not cls:
        raise ValueError(f"workload {cls.name!r} is registered already ({WORKLOADS[cls.name]})")
    WORKLOADS[cls.name] = cls
    return cls


def workload_names() -> list[str]:
    """The registered workloads' names: the shipped ones first, in WorkloadName's order
    (whatever order their modules were imported in), then the others as registered."""
    shipped = [str(name) for name in WorkloadName if name in WORKLOADS]
    return shipped + [str(name) for name in WORKLOADS if name not in shipped]


def workload_classes() -> list[type[Workload]]:
    """The registered workloads' classes, in workload_names' order."""
    return [WORKLOADS[name] for name in workload_names()]


def workload_class(name: str) -> type[Workload]:
    """The registered workload of this name; WorkloadError listing the names otherwise."""
    try:
        return WORKLOADS[str(name)]
    except KeyError:
        raise WorkloadError(
            f"unknown workload {str(name)!r} (registered: {', '.join(workload_names())})"
        ) from None


def one_of(names: list[str]) -> str:
    """'a', 'a or b', 'a, b or c': for messages that list workloads."""
    return " or ".join(names) if len(names) < 3 else f"{', '.join(names[:-1])} or {names[-1]}"


def drifting_names() -> list[str]:
    """The registered workloads that take --drift."""
    return [cls.name for cls in workload_classes() if cls.drifts]


def workload_help() -> str:
    """--workload's help: each registered workload and what it is."""
    return one_of([f"{c.name} ({c.about})" if c.about else c.name for c in workload_classes()])


class Reference(NamedTuple):
    params: np.ndarray  # int64 over the key space
    losses: list[list[float | None]]  # [iteration - 1][worker]


def reference_run(workload: Workload, n_workers: int, iterations: int) -> Reference:
    """The same BSP training computed directly with numpy: what the PS must end with."""
    params = np.zeros(workload.key_space, dtype=np.int64)
    losses = []
    for t in range(1, iterations + 1):
        delta = np.zeros_like(params)
        row = []
        for w in range(n_workers):
            keys = workload.pull_keys(w, t)
            pulled = saturate_int32(params[keys.astype(np.intp)])
            step = workload.step(w, t, keys, pulled)
            np.add.at(delta, step.keys.astype(np.intp), step.values.astype(np.int64))
            row.append(step.loss)
        params -= delta
        losses.append(row)
    return Reference(params, losses)


class StreamOffset(Workload):
    """The same workload (same key mapping, same data) read `offset` iterations further on:
    a warm-up that profiles the key popularity without seeing the measured iterations."""

    def __init__(self, inner: Workload, offset: int) -> None:
        if offset < 0:
            raise WorkloadError(f"stream offset must be >= 0, got {offset}")
        self.inner, self.offset = inner, offset
        self.key_space = inner.key_space

    def check_run(self, run: Mapping[str, Any]) -> list[str]:
        return self.inner.check_run(run)

    def pull_keys(self, worker: int, iteration: int) -> np.ndarray:
        return self.inner.pull_keys(worker, iteration + self.offset)

    def step(self, worker: int, iteration: int, keys: np.ndarray, pulled: np.ndarray) -> Step:
        return self.inner.step(worker, iteration + self.offset, keys, pulled)

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "stream_offset": self.offset}
