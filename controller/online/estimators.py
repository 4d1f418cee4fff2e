"""Per-key update rates from the sources' observations: `ChangeRateEstimator` (the mean since a
key's rate last changed, the loop's default) and `RateEstimator` (exponential decay)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Protocol

import numpy as np

from controller.errors import BadInput
from controller.online.observation import Observation, presence_rate

# The estimators' defaults, the same for `hotagg-ctl hotkeys auto` and `make run HOTSET=dynamic`
# (tuned with bench/hotset_sim.py; experiment/hotset.py says on what and why).
CHANGE_THRESHOLD = 6.0  # log-likelihood ratio (nats) at which a key's rate has changed
CHANGE_WINDOW = 12  # steps back in which a change can be placed (iterations at make run's pace)
DECAY = 0.5  # weight of the past rate per step (RateEstimator, `--decay`)
FIRST_FULL = True  # a key seen for the first time starts at its count


class _KeyRows:
    """Per-key numpy rows behind a key -> row index, the estimators' table: a step touches
    every known key (thousands), which as a dict loop took ~6 ms of the runner's CPU per
    step, on the cores the agents run on. `_rate` holds each row's rate; a row below
    `forget` is forgotten (unknown to `rate`, `rates` and `keys_at_least`, and a new key when
    seen again) and dropped once such rows are a quarter of the table (`_compact`).
    Subclasses name their other per-row arrays in `_columns`, and their per-row windows in
    `_windows`: arrays of (steps, rows), so that a sum or a scan over a row's steps is a few
    whole-array operations (numpy reduces (rows, steps) along its short axis one row at a
    time, ~10x slower at thousands of rows)."""

    _columns: tuple[str, ...] = ()
    _windows: tuple[str, ...] = ()

    def __init__(self, forget: float) -> None:
        self.forget = forget
        self._row: dict[int, int] = {}
        self._keys: list[int] = []
        self._rate = np.zeros(0)

    @property
    def rates(self) -> dict[int, float]:
        """Every known key's rate (a copy)."""
        live = np.flatnonzero(self._rate >= self.forget)
        return dict(zip([self._keys[i] for i in live], self._rate[live].tolist()))

    def keys_at_least(self, rate: float) -> list[int]:
        """The keys whose rate is at least `rate` (and known)."""
        live = np.flatnonzero(self._rate >= max(rate, self.forget))
        return [self._keys[i] for i in live]

    def _live(self, key: int) -> int | None:
        """The key's row, None if it is not known (or forgotten)."""
        i = self._row.get(key)
        return i if i is not None and self._rate[i] >= self.forget else None

    def rate(self, key: int) -> float:
        i = self._live(key)
        return 0.0 if i is None else float(self._rate[i])

    def _split(
        self, counts: Mapping[int, float]
    ) -> tuple[list[int], list[float], list[int], list[float]]:
        """An observation's counts split into the rows and counts of known keys (forgotten
        ones included), and the keys and counts of new ones."""
        rows, known, new_keys, new_counts = [], [], [], []
        for key, n in counts.items():
            i = self._row.get(key)
            if i is None:
                new_keys.append(key)
                new_counts.append(n)
            else:
                rows.append(i)
                known.append(n)
        return rows, known, new_keys, new_counts

    def _grow(self, keys: list[int]) -> None:
        """New keys indexed at the end of the table, with rows of zeros in `_rate`,
        `_columns` and `_windows`."""
        k, base = len(keys), len(self._keys)
        self._row.update(zip(keys, range(base, base + k)))
        self._keys += keys
        for name in ("_rate", *self._columns):
            setattr(self, name, np.concatenate([getattr(self, name), np.zeros(k)]))
        for name in self._windows:
            steps = getattr(self, name)
            setattr(self, name, np.hstack([steps, np.zeros((steps.shape[0], k))]))

    def _compact(self) -> None:
        """Drop the forgotten rows once they are a quarter of the table (amortized)."""
        dead = self._rate < self.forget
        n_dead = int(dead.sum())
        if not n_dead or n_dead * 4 < len(self._keys):
            return
        keep = np.flatnonzero(~dead)
        self._keys = [self._keys[i] for i in keep]
        for name in ("_rate", *self._columns):
            setattr(self, name, getattr(self, name)[keep])
        for name in self._windows:
            setattr(self, name, getattr(self, name)[:, keep])
        self._row = dict(zip(self._keys, range(len(self._keys))))


class RateEstimator(_KeyRows):
    """Per-key update rate with exponential decay: after each observation,
    rate = decay * rate + (1 - decay) * counted, where `counted` is the interval's count per
    iteration (per step when the source does not know iterations). With `first_full`, a key
    the estimator does not know yet starts at its first count (an EWMA started at its first
    sample rather than at 0), so a key that just became popular can enter the hot set at its
    first sighting instead of after several; the hysteresis margin and the minimum rate keep
    that from admitting one-off noise. Keys whose rate falls below `forget` are dropped, so
    the table stays the size of the recent working set.

    `stderr(key)`: the rate's standard error if a key's updates are Poisson, which they are
    for independent draws: the rate is a weighted sum of interval counts n_j / s_j (weights
    w_j), so its variance is rate * sum(w_j^2 / s_j), the sum kept per key. A key seen once
    has the error of one interval's count; a member watched for many has a small one."""

    _columns = ("_w2",)

    def __init__(
        self, decay: float = DECAY, forget: float = 1e-3, first_full: bool = FIRST_FULL
    ) -> None:
        if not 0.0 <= decay < 1.0:
            raise BadInput(f"decay {decay} must be in [0, 1)")
        super().__init__(forget)
        self.decay, self.first_full = decay, first_full
        self._w2 = np.zeros(0)  # sum of w_j^2 / s_j per key (stderr)

    def update(self, obs: Observation) -> None:
        per = obs.iterations if obs.iterations else 1
        d, fresh = self.decay, 1.0 - self.decay
        self._rate *= d
        self._w2 *= d * d
        self._w2 += fresh * fresh / per  # a zero count is a sample too
        first = 1.0 if self.first_full else fresh
        rows, counts, new_keys, new_counts = self._split(obs.counts)
        if rows:  # each key once per observation: a fancy-index add is exact
            at, n = np.asarray(rows), np.asarray(counts, float) / per
            gone = self._rate[at] < self.forget  # forgotten, not yet dropped: a new key
            self._rate[at] = np.where(gone, first * n, self._rate[at] + fresh * n)
            self._w2[at[gone]] = first * first / per
        if new_keys:
            self._grow(new_keys)
            self._rate[-len(new_keys) :] = first * np.asarray(new_counts, float) / per
            self._w2[-len(new_keys) :] = first * first / per
        self._compact()

    def stderr(self, key: int) -> float:
        """The standard error of rate(key) (0 for a key not known)."""
        i = self._live(key)
        return 0.0 if i is None else math.sqrt(float(self._rate[i] * self._w2[i]))


class Estimator(Protocol):
    """What the loop asks of per-key rates (RateEstimator, ChangeRateEstimator)."""

    def update(self, obs: Observation) -> None: ...

    def rate(self, key: int) -> float: ...

    def stderr(self, key: int) -> float: ...

    def keys_at_least(self, rate: float) -> list[int]: ...


def _short_of_one(share: np.ndarray, trials: np.ndarray) -> np.ndarray:
    """A share of `trials` kept below 1 by half a trial: a share of 1 would claim no error."""
    return np.minimum(share, 1.0 - 0.5 / np.maximum(trials, 1.0))


def _segment_rate(
    n: np.ndarray, s: np.ndarray, c: np.ndarray, h: np.ndarray, workers: float
) -> np.ndarray:
    """A segment's rate, the maximum of its likelihood (_loglik), from its cold steps (n
    updates in s iterations) and its hot steps (c of h iterations collected). One kind of
    steps: n/s, or the presence share inverted; both (a key that moved in or out within the
    segment): Newton's method on the log-likelihood, which is concave in r, started from
    the two parts' rates weighted by their iterations."""
    share = np.divide(c, h, out=np.zeros_like(c), where=h > 0)
    total = s + h
    rate = np.divide(
        n + h * presence_rate(share, workers), total, out=np.zeros_like(n), where=total > 0
    )
    mixed = np.flatnonzero((s > 0) & (h > 0))
    if mixed.size:
        rate[mixed] = _mixed_rate(n[mixed], s[mixed], c[mixed], h[mixed], workers, rate[mixed])
    return rate


def _mixed_rate(
    n: np.ndarray,
    s: np.ndarray,
    c: np.ndarray,
    h: np.ndarray,
    workers: float,
    start: np.ndarray,
    steps: int = 12,
) -> np.ndarray:
    """argmax over 0 < r < workers of n log r - r s + c log P + (h - c) log(1 - P), with
    P = 1 - u^workers, u = 1 - r/workers (Newton; a step goes at most 90% of the way to
    either bound, and r stays within 1e-9 of them, where u and 1 - u^workers are still
    nonzero floats)."""
    w = workers
    lo, hi = 1e-9 * w, w * (1.0 - 1e-9)
    r = np.clip(start, lo, hi)
    for _ in range(steps):
        u = 1.0 - r / w
        uw = u**w
        g = u ** (w - 1.0) / (1.0 - uw)  # d log P / dr
        d1 = n / r - s + c * g - (h - c) / u
        dg = ((w - 1.0) * u ** (w - 2.0) * (1.0 - uw) + w * u ** (2.0 * w - 2.0)) / (
            (1.0 - uw) ** 2
        )
        d2 = -n / (r * r) - c * dg / w - (h - c) / (w * u * u)
        nxt = r - d1 / np.minimum(d2, -1e-12)
        r = np.clip(np.clip(nxt, 0.1 * r, r + 0.9 * (w - r)), lo, hi)
    return r


def _loglik(
    n: np.ndarray, s: np.ndarray, c: np.ndarray, h: np.ndarray, workers: float
) -> np.ndarray:
    """A segment's log-likelihood at its own rate r (_segment_rate): Poisson for the cold
    steps (n log r - r s), Bernoulli for the hot steps' presence (c log P + (h - c) log(1 - P),
    P = 1 - (1 - r / workers)^workers, the chance some worker draws the key), without the
    terms that cancel in a split's ratio (those of each step's own data). Segments without
    hot steps (h = 0, most of them) are Poisson alone, r = n / s: n log(n / s) - n in closed
    form, without _segment_rate's presence terms and Newton steps."""
    ll = np.where(n > 0, n * np.log(np.maximum(n, 1e-300) / np.maximum(s, 1e-300)), 0.0) - n
    hot = h > 0
    if hot.any():
        n, s, c, h = n[hot], s[hot], c[hot], h[hot]
        r = _segment_rate(n, s, c, h, workers)
        p = 1.0 - (1.0 - np.clip(r / workers, 0.0, 1.0)) ** workers
        p = np.clip(p, 1e-12, 1.0 - 1e-12)
        ll[hot] = (
            n * np.log(np.where(n > 0, np.maximum(r, 1e-300), 1.0))
            - r * s
            + np.where(c > 0, c * np.log(p), 0.0)
            + np.where(h > c, (h - c) * np.log(1.0 - p), 0.0)
        )
    return ll


class ChangeRateEstimator(_KeyRows):
    """Per-key update rate as the mean since the key's rate last changed: the counts of its
    current segment over the iterations it spans. Each step adds the step's count (0 for a
    known key not counted) and tests whether the key's rate changed within the last `window`
    steps: for each split point, the log-likelihood ratio of two rates (before, after)
    against one (a GLR change test). When the best split's ratio exceeds `threshold` nats the
    segment restarts there, and the counts before it are forgotten.

    A key in the hot set all through a step (Observation.hot) is counted by its presence:
    the PS collects its switch sum once per iteration in which some worker pushed it
    (Observation.presence). Those steps are Bernoulli samples of P = 1 - (1 - r/workers)^
    workers, and the segment's presence share is inverted once (updates_from_presence).
    Inverting each step's share instead, as the updates PSFrequencySource adds to `counts`
    do, is biased and noisy: a key at 1 update per iteration reads 0, 1.3 or 8 updates in a
    step of 2 iterations (mean 4.3, i.e. 2.1 per iteration), so the change test saw changes
    that were not there and the loop evicted steady keys. A key that entered or left the
    hot set during a step (Observation.moved) counts nothing in it: its updates went partly
    to the switch, partly to the PS. Without presence (other sources) every key's counts
    are updates.

    Why not exponential decay (RateEstimator): a drifting workload changes a key's rate
    abruptly (a key enters the popular head, or leaves it), and between changes the rate is
    steady. Decay must pick one memory for both: short enough to follow a change within a few
    steps, it keeps estimating a steady key from those few steps only, and the noise test
    then holds back the keys near the hot set's boundary. Here a steady key's estimate keeps
    every count since its last change, and a change is seen as soon as the counts show it.
    A key seen for the first time starts at its count (as FIRST_FULL). Keys whose rate falls
    below `forget` are forgotten (a cold key seen once, a key that left the head). An
    observation that spans no iteration (the PS's files have not moved since the last step)
    is held and added to the next: a step is not a sample of zero.

    `stderr(key)`: the cold part's error and the presence part's (the delta method on the
    share, kept below 1 by half a sample), weighted by their iterations. The cold part's is
    binomial when the source says how many workers there are (the PS's files: presence is
    set): a worker pushes a key at most once an iteration, so s iterations' count is
    Binomial(workers * s, r / workers), sqrt(r (1 - r / workers) / s), r kept below
    `workers` by half a sample. Poisson's sqrt(r / s) gave a key that every worker drew in
    its first iteration (4 of 4) the error of a count of 4, though no key outside the head
    draws that: the noise test held such a key back for two more steps. Other sources:
    Poisson."""

    _columns = ("_old_n", "_old_s", "_old_c", "_old_h", "_span", "_se")
    _windows = ("_n", "_s", "_c", "_h")
    # Made by _KeyRows from the names above (set by name, so declared here for the checker).
    _old_n: np.ndarray
    _old_s: np.ndarray
    _old_c: np.ndarray
    _old_h: np.ndarray
    _span: np.ndarray
    _se: np.ndarray
    _n: np.ndarray
    _s: np.ndarray
    _c: np.ndarray
    _h: np.ndarray

    def __init__(
        self,
        threshold: float = CHANGE_THRESHOLD,
        window: int = CHANGE_WINDOW,
        forget: float = 0.125,
    ) -> None:
        if not threshold > 0 or math.isinf(threshold):
            raise BadInput(f"change threshold {threshold} must be a positive number")
        if window < 1:
            raise BadInput(f"change window {window} must be >= 1 step")
        if not forget >= 0:
            raise BadInput(f"forget {forget} must be >= 0")
        super().__init__(forget)
        self.threshold, self.window = threshold, window
        self.changes = 0  # segments restarted (a key's rate seen to change)
        self.workers = 1.0  # behind the presence counts (Observation.workers)
        self._binomial = False  # the cold counts' error: binomial once `workers` is known
        self._held: dict[int, float] = {}
        self._held_presence: dict[int, float] = {}
        # Per row: cold updates and iterations (n, s), hot presence and iterations (c, h), of
        # the segment before the last `window` steps (_old_*) and of each of those steps
        # (_n[j], ...: step j of the window, the newest last). `_span` (each row's
        # iterations), `_rate` and `_se` as of the last update: the policy asks for single
        # keys' rates hundreds of times a step.
        for name in self._columns:
            setattr(self, name, np.zeros(0))
        for name in self._windows:
            setattr(self, name, np.zeros((window, 0)))

    def _totals(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        return (
            self._old_n + self._n.sum(axis=0),
            self._old_s + self._s.sum(axis=0),
            self._old_c + self._c.sum(axis=0),
            self._old_h + self._h.sum(axis=0),
        )

    def _refresh(self, totals: tuple[np.ndarray, ...]) -> None:
        n, s, c, h = totals
        self._rate = _segment_rate(n, s, c, h, self.workers)
        self._span = s + h
        per_iteration_var = self._rate  # Poisson: a count's variance is its mean
        if self._binomial:  # w trials an iteration, each drawing the key with p = r / w
            w = self.workers
            p = _short_of_one(self._rate / w, w * s)
            per_iteration_var = w * p * (1.0 - p)
        var_cold = np.divide(per_iteration_var, s, out=np.zeros_like(s), where=s > 0)
        share = _short_of_one(np.divide(c, h, out=np.zeros_like(c), where=h > 0), h)
        slope = (1.0 - share) ** (1.0 / self.workers - 1.0)  # d rate / d share, per iteration
        var_hot = np.divide(
            slope * slope * share * (1.0 - share), h, out=np.zeros_like(h), where=h > 0
        )
        num = s * s * var_cold + h * h * var_hot
        den = self._span * self._span
        self._se = np.sqrt(np.divide(num, den, out=np.zeros_like(num), where=den > 0))

    def update(self, obs: Observation) -> None:
        counts_in, presence_in = obs.counts, obs.presence or {}
        if self._held or self._held_presence:  # observations that spanned no iteration
            counts_in, presence_in = dict(self._held), dict(self._held_presence)
            for key, n in obs.counts.items():
                counts_in[key] = counts_in.get(key, 0.0) + n
            for key, n in (obs.presence or {}).items():
                presence_in[key] = presence_in.get(key, 0.0) + n
        if obs.iterations == 0:  # the PS's files did not move: no time to count them over
            self._held, self._held_presence = counts_in, presence_in
            return
        self._held, self._held_presence = {}, {}
        per = float(obs.iterations if obs.iterations else 1)
        hot = obs.hot - obs.moved if obs.presence is not None else frozenset()
        if obs.presence is not None:  # the PS's files: they say how many workers push
            self.workers, self._binomial = float(obs.workers), True
        seen = list(dict.fromkeys([*counts_in, *hot]))
        new_keys = [k for k in seen if k not in self._row]
        if new_keys:
            self._grow(new_keys)
        # the oldest step of the window joins the segment's older part; a new step opens
        for name in self._windows:
            w = getattr(self, name)
            getattr(self, "_old" + name)[:] += w[0]
            w[:-1] = w[1:]
            w[-1] = 0.0
        self._s[-1] = per  # a zero count is a sample too
        if seen:
            at = np.asarray([self._row[k] for k in seen], np.intp)
            gone = at[self._rate[at] < self.forget]  # forgotten, not yet dropped: a new key
            for name in self._windows:
                getattr(self, name)[:-1, gone] = 0.0
                getattr(self, "_old" + name)[gone] = 0.0
        if hot:
            at = np.asarray([self._row[k] for k in hot], np.intp)
            self._s[-1, at], self._h[-1, at] = 0.0, per
            present = [k for k in hot if k in presence_in]
            if present:
                self._c[-1, [self._row[k] for k in present]] = [presence_in[k] for k in present]
        # A hot key's step is its presence alone: `counts` holds that presence as updates,
        # and the few entries of it the switch did not sum (a slot conflict) went to the PS
        # in iterations its presence mostly counts already.
        for key, n in counts_in.items():
            if key not in hot:
                self._n[-1, self._row[key]] = n
        if obs.presence is not None and obs.moved:  # part switch, part PS: not a sample
            rows = [self._row[k] for k in obs.moved if k in self._row]
            for name in self._windows:
                getattr(self, name)[-1, rows] = 0.0
        totals = self._totals()
        self._detect_changes(totals)
        self._refresh(totals)
        self._compact()

    def _detect_changes(self, totals: tuple[np.ndarray, ...]) -> None:
        """Restart the segments of the rows whose rate changed, and their `totals` (the
        rows' _totals(), updated in place for _refresh)."""
        if not self._keys:
            return
        window, workers = self.window, self.workers
        rows = self._testable(totals)
        if not rows.size:
            return
        total = [t[rows] for t in totals]
        # Every split at once: after[j] is the last j+1 steps, before[j] the rest of the
        # segment, and one _loglik call takes the whole segment and all 2 * window parts
        # (one call per split cost ~16 ms a step at a window of 12, most of it numpy's
        # per-call overhead in _mixed_rate's Newton steps on a few keys).
        steps = (self._n[:, rows], self._s[:, rows], self._c[:, rows], self._h[:, rows])
        after = [np.cumsum(x[::-1], axis=0) for x in steps]
        before = [t[None, :] - a for t, a in zip(total, after)]
        parts = [np.concatenate([t[None, :], a, b]) for t, a, b in zip(total, after, before)]
        ll = _loglik(parts[0], parts[1], parts[2], parts[3], workers)
        whole, ll_after, ll_before = ll[0], ll[1 : window + 1], ll[window + 1 :]
        ratio = ll_after + ll_before - whole[None, :]
        empty = (before[1] + before[3] <= 0) | (after[1] + after[3] <= 0)
        ratio[empty] = -np.inf
        split = np.argmax(ratio, axis=0)  # the first of equal splits
        best = ratio[split, np.arange(ratio.shape[1])]
        found = np.flatnonzero(best > self.threshold)
        if not found.size:
            return
        changed = rows[found]
        self.changes += int(changed.size)
        keep = np.arange(window)[:, None] >= window - 1 - split[None, found]
        for name, total_of in zip(self._windows, totals):
            w = getattr(self, name)
            w[:, changed] = np.where(keep, w[:, changed], 0.0)
            getattr(self, "_old" + name)[changed] = 0.0
            total_of[changed] = w[:, changed].sum(axis=0)

    def _testable(self, totals: tuple[np.ndarray, ...]) -> np.ndarray:
        """The rows whose ratio can exceed the threshold: those with presence steps, and the
        cold ones with n log s > threshold (n updates in s iterations). A split's ratio is
        n_a log(r_a / r) + n_b log(r_b / r), and r_a / r = (n_a / n)(s / s_a) <= s, since a
        part spans at least an iteration; so a cold row's ratio is at most n log s. That
        skips about three quarters of the rows on the run's workload (keys seen once or
        twice in their segment) and changes nothing the test finds."""
        n, s, _, h = totals
        cold_bound = n * np.log(np.maximum(s, 1.0))
        return np.flatnonzero((h > 0) | (cold_bound > self.threshold))

    def stderr(self, key: int) -> float:
        i = self._live(key)
        return 0.0 if i is None else float(self._se[i])
