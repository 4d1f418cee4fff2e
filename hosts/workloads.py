"""Seeded workloads for the agents, and the direct numpy computation they are checked against.

Interface (one object serves all workers; everything is a pure function of the seed, the
worker, the iteration and the pulled parameters, so runs are reproducible and call order does
not matter):

- `pull_keys(worker, t)` -> sorted unique uint64 keys the worker pulls for iteration t;
- `step(worker, t, keys, pulled)` -> `Step(keys, values, loss)`: the entries to push for t,
  computed from `pulled` (int32 fixed-point values aligned with `keys`). The PS applies
  `params[key] -= value`, so a gradient-descent step pushes `lr * gradient` in fixed point.

Trace CSV format (`TraceWorkload`): one row per access, `iteration,worker,key[,value]`.
`iteration` counts from 1, `worker` from 0, `key` is an integer < key space, `value` is a real
number (the contribution, converted to fixed point with contract.constants.to_fixed). Without a
value column (or with an empty value) the value is drawn from the seeded stream of that
(worker, iteration), in row order. A first row whose first field is not a number is a header;
blank lines and lines starting with '#' are skipped. Rows of one (worker, iteration) that
repeat a key are summed.

Drift (`--drift every=K,fraction=F[,head=H]`, zipf and lr): the popularity ranks keep their
Zipf probabilities, but which key holds a rank moves. Iterations 1..K are epoch 0 (the
undrifted stream); at the start of each later epoch, F*H (rounded) of the H head ranks swap
their key with a key of the tail, round robin over the head in a seeded order, so each head
key stays about K/F iterations and the head of epoch e+1 shares a fraction 1-F of the head
of epoch e. The tail key promoted is drawn by a seeded bijection of the tail, and the head
key it displaces takes its tail rank, so every epoch's rank -> key map is a permutation (see
`Drift`). The map is a function of (seed, epoch) alone, computed in closed form (no history
is replayed), so every worker and a reference run agree at any iteration. `fraction=0`, or
no `--drift`, is today's stream byte for byte. lr drifts the value ranks of every field.
"""

from __future__ import annotations

import argparse
import csv
import math
from abc import ABC, abstractmethod
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from contract.codec import saturate_int32
from contract.constants import INT32_MAX, INT32_MIN, VALUE_SCALE, to_fixed
from contract.enums import NameEnum

# Stream ids keep the seeded generators of different purposes independent.
_KEYS, _VALUES, _TRUTH, _EXAMPLES, _MAPPING, _DRIFT = 1, 2, 3, 4, 5, 6
DEFAULT_DRIFT_HEAD = 256  # the hot-set budget of `make run` (HOT_SLOTS)


class WorkloadName(NameEnum):
    """The workloads, by their --workload / WORKLOAD= names."""

    ZIPF = "zipf"
    LR = "lr"
    TRACE = "trace"


class WorkloadError(ValueError):
    """Bad workload parameters or a bad trace file."""


class Step(NamedTuple):
    keys: np.ndarray  # uint64, unique
    values: np.ndarray  # int32 contributions: the PS does params[key] -= value
    loss: float | None = None


def _rng(seed: int, stream: int, *more: int) -> np.random.Generator:
    return np.random.default_rng([seed, stream, *more])


def _zipf_cdf(n: int, skew: float) -> np.ndarray:
    if n <= 0:
        raise WorkloadError(f"key space must be > 0, got {n}")
    if skew < 0:
        raise WorkloadError(f"skew must be >= 0, got {skew}")
    weights = np.arange(1, n + 1, dtype=np.float64) ** -skew
    cdf = np.cumsum(weights)
    return cdf / cdf[-1]


def _fixed(real: np.ndarray) -> np.ndarray:
    """Real contributions -> int32 fixed point (round half to even, clamped)."""
    return np.clip(np.rint(real * VALUE_SCALE), INT32_MIN, INT32_MAX).astype(np.int32)


@dataclass(frozen=True)
class DriftSpec:
    """How the popular head moves: every `every` iterations a `fraction` of the `head` most
    popular ranks get a key from the tail (module doc). Text form: `every=K,fraction=F[,head=H]`."""

    every: int
    fraction: float
    head: int = DEFAULT_DRIFT_HEAD

    def __post_init__(self) -> None:
        if isinstance(self.every, bool) or not isinstance(self.every, int) or self.every < 1:
            raise WorkloadError(f"drift: every={self.every!r} must be an integer >= 1")
        if not (isinstance(self.fraction, (int, float)) and 0.0 <= self.fraction <= 1.0):
            raise WorkloadError(f"drift: fraction={self.fraction!r} must be in [0, 1]")
        if isinstance(self.head, bool) or not isinstance(self.head, int) or self.head < 1:
            raise WorkloadError(f"drift: head={self.head!r} must be an integer >= 1")

    @property
    def swaps_per_epoch(self) -> int:
        """Head ranks that swap with a tail key at each epoch start."""
        return round(self.fraction * self.head)

    @classmethod
    def parse(cls, text: str | None) -> DriftSpec | None:
        """`every=K,fraction=F[,head=H]`; None, '' or 'none' mean no drift."""
        if text is None or text.strip().lower() in ("", "none"):
            return None
        fields: dict[str, str] = {}
        for part in text.split(","):
            name, eq, value = part.partition("=")
            name = name.strip().lower()
            if not eq or not value.strip():
                raise WorkloadError(
                    f"drift {text!r}: expected every=K,fraction=F[,head=H], got {part!r}"
                )
            if name not in ("every", "fraction", "head"):
                raise WorkloadError(
                    f"drift {text!r}: unknown field {name!r} (every, fraction, head)"
                )
            if name in fields:
                raise WorkloadError(f"drift {text!r}: {name} given twice")
            fields[name] = value.strip()
        missing = [f for f in ("every", "fraction") if f not in fields]
        if missing:
            raise WorkloadError(
                f"drift {text!r}: {' and '.join(missing)} missing (every=K,fraction=F[,head=H])"
            )
        try:
            every, head = int(fields["every"]), int(fields.get("head", DEFAULT_DRIFT_HEAD))
            fraction = float(fields["fraction"])
        except ValueError as exc:
            raise WorkloadError(f"drift {text!r}: {exc}") from None
        if math.isnan(fraction):
            raise WorkloadError(f"drift {text!r}: fraction must be in [0, 1]")
        return cls(every, fraction, head)

    def __str__(self) -> str:
        return f"every={self.every},fraction={self.fraction:g},head={self.head}"


class Drift:
    """The rank permutation of each epoch for ranks 0..n-1 (module doc).

    Events j = 0, 1, 2 ... happen in order, m = round(fraction * head) per epoch (event j at
    the start of epoch j // m + 1); event j swaps the key at head rank P(j) = order[j mod
    head] with the key at tail rank R(j) = head + tail_map(j mod tail). After E events, the
    key at a rank is the original key of the rank it traces back to: a head rank's latest
    event j < E brought it what tail rank R(j) held just before j, and a tail rank's latest
    event brought it what head rank P(j) held just before j. Each step back lowers j by at
    least head or tail ranks, so a lookup costs about 2E/n steps, vectorised over the draws."""

    def __init__(self, spec: DriftSpec, n: int, seed: int) -> None:
        if spec.head >= n:
            raise WorkloadError(
                f"drift: head={spec.head} must be smaller than the {n} ranks it drifts over"
            )
        self.spec, self.n, self.head, self.tail = spec, n, spec.head, n - spec.head
        self.per_epoch = spec.swaps_per_epoch
        rng = _rng(seed, _DRIFT)
        self._order = rng.permutation(self.head).astype(np.int64)  # head rank of event j % head
        self._order_inv = np.argsort(self._order).astype(np.int64)
        self._a = 1
        while self.tail > 1:
            self._a = int(rng.integers(1, self.tail))
            if math.gcd(self._a, self.tail) == 1:
                break
        self._b = int(rng.integers(0, self.tail))
        self._a_inv = pow(self._a, -1, self.tail) if self.tail > 1 else 0

    def events(self, iteration: int) -> int:
        """Swaps done by the start of `iteration` (epoch (iteration - 1) // every)."""
        return max(0, (iteration - 1) // self.spec.every) * self.per_epoch

    def ranks(self, ranks: np.ndarray, iteration: int) -> np.ndarray:
        """The original rank whose key sits at each of `ranks` in `iteration`."""
        shape = np.shape(ranks)
        r = np.asarray(ranks, dtype=np.int64).ravel().copy()
        e = np.full(r.shape, self.events(iteration), dtype=np.int64)
        h, tl = self.head, self.tail
        todo = np.flatnonzero(e > 0)
        while todo.size:
            rr, ee = r[todo], e[todo]
            in_head = rr < h
            # the position of the rank in its own event sequence (period head or tail)
            pos = np.where(
                in_head,
                self._order_inv[np.where(in_head, rr, 0)],
                (self._a_inv * (rr - h - self._b)) % tl,
            )
            period = np.where(in_head, h, tl)
            moved = ee > pos
            j = pos + period * ((ee - 1 - pos) // period)  # its latest event before ee
            src = np.where(in_head, h + (self._a * (j % tl) + self._b) % tl, self._order[j % h])
            r[todo] = np.where(moved, src, rr)
            e[todo] = np.where(moved, j, 0)
            todo = todo[moved]
        return r.reshape(shape)


class Workload(ABC):
    key_space: int

    @abstractmethod
    def pull_keys(self, worker: int, iteration: int) -> np.ndarray: ...

    @abstractmethod
    def step(self, worker: int, iteration: int, keys: np.ndarray, pulled: np.ndarray) -> Step: ...

    @abstractmethod
    def describe(self) -> dict: ...


class ZipfWorkload(Workload):
    """Each worker draws `keys_per_iter` keys per iteration from Zipf(skew) over the key space
    (duplicates merged) and pushes a uniform random value in +-value_range for each. Rank r is
    mapped to key (a*r + b) mod key_space, a seeded bijection, so hot keys spread over shards.
    With `drift`, the ranks are permuted per epoch first (module doc)."""

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
        self._cdf = _zipf_cdf(key_space, skew)
        rng = _rng(seed, _MAPPING)
        self._a = 1
        while key_space > 1:
            self._a = int(rng.integers(1, key_space))
            if math.gcd(self._a, key_space) == 1:
                break
        self._b = int(rng.integers(0, key_space))
        self.drift = drift
        self._drift = Drift(drift, key_space, seed) if drift and drift.fraction else None

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
        u = _rng(self.seed, _KEYS, worker, iteration).random(self.keys_per_iter)
        ranks = np.minimum(np.searchsorted(self._cdf, u, side="right"), self.key_space - 1)
        return np.unique(self._keys_at(ranks, iteration))

    def step(self, worker: int, iteration: int, keys: np.ndarray, pulled: np.ndarray) -> Step:
        rng = _rng(self.seed, _VALUES, worker, iteration)
        values = rng.integers(-self.vmax, self.vmax, size=len(keys), endpoint=True)
        return Step(keys, values.astype(np.int32))

    def describe(self) -> dict:
        return {
            "workload": "zipf",
            "keys": self.key_space,
            "skew": self.skew,
            "keys_per_iter": self.keys_per_iter,
            "seed": self.seed,
            "value_range": self.value_range,
            **_drift_field(self.drift),
        }


class TraceWorkload(Workload):
    """Replays a CSV trace (format in the module doc)."""

    def __init__(
        self,
        rows: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]],
        key_space: int,
        seed: int = 1,
        source: str = "",
    ) -> None:
        self._rows, self.key_space, self.seed, self.source = rows, key_space, seed, source
        self.iterations = max((t for _, t in rows), default=0)
        self.workers = max((w + 1 for w, _ in rows), default=0)

    @classmethod
    def from_csv(
        cls,
        path: str | Path,
        key_space: int | None = None,
        seed: int = 1,
        value_range: float = 0.01,
    ) -> TraceWorkload:
        vmax = to_fixed(value_range)
        groups: dict[tuple[int, int], list[tuple[int, float | None]]] = defaultdict(list)
        try:
            with open(path, newline="") as f:
                for lineno, row in enumerate(csv.reader(f), 1):
                    if not row or not row[0].strip() or row[0].lstrip().startswith("#"):
                        continue
                    if lineno == 1 and not row[0].strip().isdigit():
                        continue  # header
                    if len(row) not in (3, 4):
                        raise WorkloadError(
                            f"{path}:{lineno}: expected iteration,worker,key[,value]"
                        )
                    try:
                        t, w, k = int(row[0]), int(row[1]), int(row[2])
                        v = float(row[3]) if len(row) == 4 and row[3].strip() else None
                    except ValueError as exc:
                        raise WorkloadError(f"{path}:{lineno}: {exc}") from None
                    if t < 1 or w < 0 or k < 0 or (key_space is not None and k >= key_space):
                        raise WorkloadError(
                            f"{path}:{lineno}: iteration >= 1, worker >= 0, "
                            f"0 <= key < key space ({key_space}) required"
                        )
                    groups[(w, t)].append((k, v))
        except OSError as exc:
            raise WorkloadError(f"cannot read trace {path}: {exc.strerror}") from None
        space = key_space or 1 + max((k for g in groups.values() for k, _ in g), default=0)
        rows = {}
        for (w, t), items in groups.items():
            draws = _rng(seed, _VALUES, w, t).integers(-vmax, vmax, size=len(items), endpoint=True)
            sums: dict[int, int] = defaultdict(int)
            for (k, v), d in zip(items, draws):
                sums[k] += int(d) if v is None else to_fixed(v)
            keys = np.array(sorted(sums), dtype=np.uint64)
            vals = np.array([sums[int(k)] for k in keys], dtype=np.int64)
            if vals.size and (vals.min() < INT32_MIN or vals.max() > INT32_MAX):
                raise WorkloadError(
                    f"{path}: summed values of worker {w} iteration {t} overflow int32"
                )
            rows[(w, t)] = (keys, vals.astype(np.int32))
        return cls(rows, space, seed, str(path))

    def pull_keys(self, worker: int, iteration: int) -> np.ndarray:
        return self._rows.get((worker, iteration), (np.zeros(0, np.uint64),))[0]

    def step(self, worker: int, iteration: int, keys: np.ndarray, pulled: np.ndarray) -> Step:
        k, v = self._rows.get((worker, iteration), (np.zeros(0, np.uint64), np.zeros(0, np.int32)))
        return Step(k, v)

    def describe(self) -> dict:
        return {
            "workload": "trace",
            "trace": self.source,
            "keys": self.key_space,
            "seed": self.seed,
            "iterations": self.iterations,
            "workers": self.workers,
        }


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer: a fixed, well-spread hash for feature ids (uint64 wraps on purpose)."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


class LogisticWorkload(Workload):
    """Logistic regression on a generated click log with hashed feature ids.

    Each example has `fields` categorical features (value ranks drawn from Zipf(skew) over
    `cardinality`) plus a bias feature; feature (f, v) has key mix64(seed, f, v) mod key_space.
    Labels come from a hidden true model. Each worker takes a minibatch of `batch` examples per
    iteration from its own stream, pulls the keys in it, and pushes lr * gradient, computed from
    the pulled (fixed-point) weights; `loss` is the minibatch log loss before the update.
    With `drift`, the value ranks of every field are permuted per epoch (module doc): which
    feature values are popular moves, the hidden model stays.
    """

    def __init__(
        self,
        key_space: int = 1 << 16,
        fields: int = 8,
        cardinality: int = 1000,
        skew: float = 1.1,
        batch: int = 64,
        lr: float = 0.5,
        seed: int = 1,
        drift: DriftSpec | None = None,
    ) -> None:
        if min(fields, cardinality, batch) <= 0 or lr <= 0:
            raise WorkloadError("fields, cardinality, batch and lr must be > 0")
        if fields >= 1 << 16 or cardinality >= 1 << 24:
            raise WorkloadError("fields must be < 65536 and cardinality < 2^24")
        self.key_space, self.fields, self.cardinality = key_space, fields, cardinality
        self.skew, self.batch, self.lr, self.seed = skew, batch, lr, seed
        self._cdf = _zipf_cdf(cardinality, skew)
        self._truth = _rng(seed, _TRUTH).normal(0.0, 1.0, size=(fields, cardinality))
        f = np.arange(fields + 1, dtype=np.uint64)[:, None]
        v = np.arange(cardinality, dtype=np.uint64)[None, :]
        ids = (np.uint64(seed & 0xFFFFFFFF) << np.uint64(40)) | (f << np.uint64(24)) | v
        self._feature_key = _mix64(ids) % np.uint64(key_space)  # (fields + 1, cardinality)
        self._cache: tuple[tuple[int, int], np.ndarray, np.ndarray] | None = None
        self.drift = drift
        self._drift = Drift(drift, cardinality, seed) if drift and drift.fraction else None

    def _examples(self, worker: int, iteration: int) -> tuple[np.ndarray, np.ndarray]:
        cached = self._cache  # one read: worker threads may share this object
        if cached is not None and cached[0] == (worker, iteration):
            return cached[1], cached[2]
        rng = _rng(self.seed, _EXAMPLES, worker, iteration)
        ranks = np.searchsorted(self._cdf, rng.random((self.batch, self.fields)), side="right")
        ranks = np.minimum(ranks, self.cardinality - 1)
        if self._drift is not None:
            ranks = self._drift.ranks(ranks, iteration)
        logit = self._truth[np.arange(self.fields), ranks].sum(axis=1) - 1.0
        labels = (rng.random(self.batch) < 1.0 / (1.0 + np.exp(-logit))).astype(np.float64)
        keys = np.empty((self.batch, self.fields + 1), dtype=np.uint64)
        keys[:, : self.fields] = self._feature_key[np.arange(self.fields), ranks]
        keys[:, self.fields] = self._feature_key[self.fields, 0]  # bias
        self._cache = ((worker, iteration), keys, labels)
        return keys, labels

    def pull_keys(self, worker: int, iteration: int) -> np.ndarray:
        return np.unique(self._examples(worker, iteration)[0])

    def step(self, worker: int, iteration: int, keys: np.ndarray, pulled: np.ndarray) -> Step:
        feats, labels = self._examples(worker, iteration)
        uniq, inv = np.unique(feats.ravel(), return_inverse=True)
        if not np.array_equal(uniq, keys):
            raise WorkloadError("step() needs the keys pull_keys() returned, in that order")
        inv = inv.reshape(feats.shape)
        z = (np.asarray(pulled, dtype=np.float64) / VALUE_SCALE)[inv].sum(axis=1)
        p = 1.0 / (1.0 + np.exp(-z))
        loss = float(np.mean(np.logaddexp(0.0, z) - labels * z))
        g_example = np.repeat((p - labels) / self.batch, feats.shape[1])
        grad = np.bincount(inv.ravel(), weights=g_example, minlength=len(uniq))
        return Step(uniq, _fixed(self.lr * grad), loss)

    def describe(self) -> dict:
        return {
            "workload": "lr",
            "keys": self.key_space,
            "fields": self.fields,
            "cardinality": self.cardinality,
            "skew": self.skew,
            "batch": self.batch,
            "lr": self.lr,
            "seed": self.seed,
            **_drift_field(self.drift),
        }


def _drift_field(drift: DriftSpec | None) -> dict:
    """describe()'s drift entry, absent without drift (so undrifted summaries are unchanged)."""
    return {"drift": str(drift)} if drift else {}


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

    def pull_keys(self, worker: int, iteration: int) -> np.ndarray:
        return self.inner.pull_keys(worker, iteration + self.offset)

    def step(self, worker: int, iteration: int, keys: np.ndarray, pulled: np.ndarray) -> Step:
        return self.inner.step(worker, iteration + self.offset, keys, pulled)

    def describe(self) -> dict:
        return {**self.inner.describe(), "stream_offset": self.offset}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("workload")
    g.add_argument(
        "--workload",
        choices=tuple(WorkloadName),
        default=WorkloadName.ZIPF,
        help="zipf draws, a logistic regression's sparse features (lr), or a trace file",
    )
    g.add_argument("--keys", type=int, default=100_000, help="key space (parameters)")
    g.add_argument("--seed", type=int, default=1, help="seed of the workload's draws")
    g.add_argument("--skew", type=float, default=1.1, help="Zipf exponent (zipf, lr)")
    g.add_argument("--keys-per-iter", type=int, default=64, help="zipf: draws per worker/iter")
    g.add_argument("--value-range", type=float, default=0.01, help="zipf/trace: max |value|")
    g.add_argument("--trace", help="trace: CSV iteration,worker,key[,value]")
    g.add_argument("--fields", type=int, default=8, help="lr: features per example")
    g.add_argument("--cardinality", type=int, default=1000, help="lr: values per feature")
    g.add_argument("--batch", type=int, default=64, help="lr: examples per worker/iter")
    g.add_argument("--lr", type=float, default=0.5, help="lr: learning rate")
    g.add_argument(
        "--drift",
        metavar="every=K,fraction=F[,head=H]",
        help="zipf, lr: every K iterations a fraction F of the H most popular ranks (default "
        f"{DEFAULT_DRIFT_HEAD}) take keys from the tail (default: none)",
    )
    g.add_argument(
        "--stream-offset",
        type=int,
        default=0,
        help="read iteration t of the stream as t + offset (a warm-up that does not see "
        "the measured iterations)",
    )


def from_args(args: argparse.Namespace) -> Workload:
    workload = _from_args(args)
    offset = getattr(args, "stream_offset", 0)
    return StreamOffset(workload, offset) if offset else workload


def _from_args(args: argparse.Namespace) -> Workload:
    drift = DriftSpec.parse(getattr(args, "drift", None))
    if args.workload == WorkloadName.ZIPF:
        return ZipfWorkload(
            args.keys, args.skew, args.keys_per_iter, args.seed, args.value_range, drift
        )
    if args.workload == WorkloadName.TRACE:
        if not args.trace:
            raise WorkloadError("--workload trace needs --trace FILE")
        if drift is not None:
            raise WorkloadError("--drift goes with zipf or lr, not a trace (it replays as is)")
        return TraceWorkload.from_csv(args.trace, args.keys, args.seed, args.value_range)
    return LogisticWorkload(
        args.keys, args.fields, args.cardinality, args.skew, args.batch, args.lr, args.seed, drift
    )
