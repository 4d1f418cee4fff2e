"""Drift: the popular head of a generated workload moves while it runs (`--drift
every=K,fraction=F[,head=H]`, DRIFT=; the workloads whose class says `drifts`: zipf, lr).

The popularity ranks keep their Zipf probabilities, but which key holds a rank moves.
Iterations 1..K are epoch 0 (the undrifted stream); at the start of each later epoch, F*H
(rounded) of the H head ranks swap their key with a key of the tail, round robin over the
head in a seeded order, so each head key stays about K/F iterations and the head of epoch
e+1 shares a fraction 1-F of the head of epoch e. The tail key promoted is drawn by a seeded
bijection of the tail, and the head key it displaces takes its tail rank, so every epoch's
rank -> key map is a permutation (see `Drift`). The map is a function of (seed, epoch) alone,
computed in closed form (no history is replayed), so every worker and a reference run agree
at any iteration. `fraction=0`, or no `--drift`, is the undrifted stream byte for byte.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hosts.workloads.seeded import DRIFT_STREAM, WorkloadError, seeded_rng

DEFAULT_DRIFT_HEAD = 256  # the hot-set budget of `make run` (HOT_SLOTS)


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
        rng = seeded_rng(seed, DRIFT_STREAM)
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


def drift_field(drift: DriftSpec | None) -> dict[str, str]:
    """describe()'s drift entry, absent without drift (so undrifted summaries are unchanged)."""
    return {"drift": str(drift)} if drift else {}
