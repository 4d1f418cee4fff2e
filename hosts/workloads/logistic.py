"""The lr workload: logistic regression on a generated click log, with real gradients."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from contract.constants import VALUE_SCALE
from hosts.workloads.base import Step, Workload, WorkloadName, register
from hosts.workloads.drift import Drift, DriftSpec, drift_field
from hosts.workloads.seeded import (
    EXAMPLES_STREAM,
    TRUTH_STREAM,
    WorkloadError,
    fixed_point,
    seeded_rng,
    zipf_cdf,
)


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer: a fixed, well-spread hash for feature ids (uint64 wraps on purpose)."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


@register
class LogisticWorkload(Workload):
    """Logistic regression on a generated click log with hashed feature ids.

    Each example has `fields` categorical features (value ranks drawn from Zipf(skew) over
    `cardinality`) plus a bias feature; feature (f, v) has key mix64(seed, f, v) mod key_space.
    Labels come from a hidden true model. Each worker takes a minibatch of `batch` examples per
    iteration from its own stream, pulls the keys in it, and pushes lr * gradient, computed from
    the pulled (fixed-point) weights; `loss` is the minibatch log loss before the update.
    With `drift`, the value ranks of every field are permuted per epoch (drift.py): which
    feature values are popular moves, the hidden model stays.
    """

    name = WorkloadName.LR
    about = "a logistic regression's sparse features"
    drifts = True
    pushes_use_pulled = True  # gradients at the pulled weights

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
        self._cdf = zipf_cdf(cardinality, skew)
        self._truth = seeded_rng(seed, TRUTH_STREAM).normal(0.0, 1.0, size=(fields, cardinality))
        f = np.arange(fields + 1, dtype=np.uint64)[:, None]
        v = np.arange(cardinality, dtype=np.uint64)[None, :]
        ids = (np.uint64(seed & 0xFFFFFFFF) << np.uint64(40)) | (f << np.uint64(24)) | v
        self._feature_key = _mix64(ids) % np.uint64(key_space)  # (fields + 1, cardinality)
        self._cache: tuple[tuple[int, int], np.ndarray, np.ndarray] | None = None
        self.drift = drift
        self._drift = Drift(drift, cardinality, seed) if drift and drift.fraction else None

    @classmethod
    def add_arguments(cls, group: argparse._ArgumentGroup) -> None:
        group.add_argument("--fields", type=int, default=8, help="lr: features per example")
        group.add_argument("--cardinality", type=int, default=1000, help="lr: values per feature")
        group.add_argument("--batch", type=int, default=64, help="lr: examples per worker/iter")
        group.add_argument("--lr", type=float, default=0.5, help="lr: learning rate")

    @classmethod
    def from_args(cls, args: argparse.Namespace, drift: DriftSpec | None) -> LogisticWorkload:
        return cls(
            args.keys,
            args.fields,
            args.cardinality,
            args.skew,
            args.batch,
            args.lr,
            args.seed,
            drift,
        )

    def _examples(self, worker: int, iteration: int) -> tuple[np.ndarray, np.ndarray]:
        cached = self._cache  # one read: worker threads may share this object
        if cached is not None and cached[0] == (worker, iteration):
            return cached[1], cached[2]
        rng = seeded_rng(self.seed, EXAMPLES_STREAM, worker, iteration)
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
        return Step(uniq, fixed_point(self.lr * grad), loss)

    def describe(self) -> dict[str, Any]:
        return {
            "workload": "lr",
            "keys": self.key_space,
            "fields": self.fields,
            "cardinality": self.cardinality,
            "skew": self.skew,
            "batch": self.batch,
            "lr": self.lr,
            "seed": self.seed,
            **drift_field(self.drift),
        }
