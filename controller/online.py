"""The controller's online loop: follow the skew while a job runs (issue 10, item 2).

Each step the loop reads what happened since the last step from a `RateSource`, folds it into
per-key rates (`ChangeRateEstimator`: the mean since a key's rate last changed; or
`RateEstimator`, exponential decay), lets a `Hysteresis` policy pick a few
changes to the hot set, and applies them to the switch (`SwitchTarget`: evictions and
installs in one Write RPC, freed offsets reused at once: the data plane keeps that exact,
docs/design.md section 4). The target keeps its own record of the hot set, so a step reads
nothing back from the switch; with `PSFrequencySource(collected=True)` as the only source a
step's one RPC is that Write (bench/online_step.py measures a step).

Sources (all give counts of *updates*, i.e. worker push entries, since their previous read):
- `SwitchHitsSource`: the direct counters of the hot-key tables (`lookupN.hits`, readable
  over P4Runtime on both targets). A hit counts every lookup of a hot key, a worker's PULL
  entry as well as its PUSH entry (and the PS's WRITEBACKs), so an update is about
  `weight` = 0.5 hits (a WRITEBACK adds 0.5 per iteration: members look slightly better
  than they are). Counters restart when a key is re-installed; a smaller reading than the
  last is taken as a fresh counter. One Read RPC for the 8 tables (`read_hits`).
- `PSFrequencySource`: the PS's frequency files (hosts/stats.py): a `.live` file, which
  holds the PS's counters themselves while it runs, or one a PS started with
  `--freq-every N` rewrites (atomically) every N iterations. Their `cold` column counts the
  entries each key got at the PS (all of a cold key's updates, and a hot key's that the
  switch did not sum); their `iterations` header tells which iteration the counts reach.
  Before this loop the PS wrote the file only at exit: that is the minimal interface added.
  With `collected=True` it also counts the hot keys' updates, estimated from the
  `collected` column (the iterations whose switch sum the PS collected) and the file's
  `workers` (`updates_from_presence`): the files then count every update, no switch read.
  It passes the `collected` counts on too (`Observation.presence`): `ChangeRateEstimator`
  models a hot key's steps as samples of that presence rather than as updates.
- `CombinedSource`: the sum of several (switch hits + PS files: every update counted once).
- `controller.sketch.SketchSource`: the in-switch sketch's reports (digests) and counters
  (p4src/include/sketch.p4, docs/design.md section 6). It sees candidates, not every key
  (`complete=False`), so the loop then leaves the oracle column out.

Log line of a step: "iteration 120: +14 -9 keys, coverage 41.2% (oracle 44.0%)": the hot
set's share of the updates counted in the interval (with the hot set the interval ran with),
and the share the best `budget` keys of that interval would have had (only when the counts
cover every key, i.e. the PS files are read).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
from p4.v1 import p4runtime_pb2

from contract.constants import MAX_ENTRIES
from contract.names import hot_keys_table, set_slot_action
from controller.errors import BadInput, BudgetExceeded, WriteError
from controller.hot_keys import HotKeys, check_key
from controller.jobs import Job
from p4rt import wire

if TYPE_CHECKING:
    from hosts.stats import LiveReader  # imported where used, as read_frequency

_NONE = np.zeros(0, np.int64)
# A frequency file's counts since the last read: iterations done, and at the last read; the
# file's workers; the keys counted since, and their cold and collected counts (float64).
_Delta = tuple[int, int, int, np.ndarray, np.ndarray, np.ndarray]
STEP_BATCH = 4096  # updates per Write RPC of a step (~200 KB, far below gRPC's 4 MB)
# The loop's defaults, the same for `hotagg-ctl hotkeys auto` and `make run HOTSET=dynamic`
# (tuned with bench/hotset_sim.py; experiment/hotset.py says on what and why).
CHANGE_THRESHOLD = 6.0  # log-likelihood ratio (nats) at which a key's rate has changed
CHANGE_WINDOW = 12  # steps back in which a change can be placed (iterations at make run's pace)
DECAY = 0.5  # weight of the past rate per step (RateEstimator, `--decay`)
FIRST_FULL = True  # a key seen for the first time starts at its count
MARGIN = 0.6  # a candidate needs (1 + MARGIN) times the weakest member's rate
MAX_CHANGES = 32  # keys entering per step
MIN_RATE = 1.0  # updates per iteration a key needs to enter
CONFIDENCE = 2.0  # ... and to beat the weakest member by this many standard errors


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


def read_hits(hot_keys: HotKeys, job_id: int) -> dict[int, int]:
    """A job's hot-key hits summed over the 8 lookup instances' direct counters, in one Read
    RPC for all 8 tables (HotKeys.list(counters=True) sends one per table)."""
    p4info = hot_keys.p4info
    entities = [
        p4runtime_pb2.Entity(table_entry=p4info.wildcard(hot_keys_table(i), counters=True))
        for i in range(MAX_ENTRIES)
    ]
    # the match field ids of each table (the 8 instances may number them alike or not)
    ids = {
        p4info.table_id(hot_keys_table(i)): (
            p4info.match_field_id(hot_keys_table(i), "job_id"),
            p4info.match_field_id(hot_keys_table(i), "key"),
        )
        for i in range(MAX_ENTRIES)
    }
    hits: dict[int, int] = {}
    for reply in hot_keys.client.read_raw(entities):  # ~700 entries: decoded by hand
        for table_id, match, packets in wire.table_entry_counters(reply):
            job_field, key_field = ids[table_id]
            if int.from_bytes(match.get(job_field, b""), "big") == job_id:
                key = int.from_bytes(match.get(key_field, b""), "big")
                hits[key] = hits.get(key, 0) + packets
    return hits


class SwitchHitsSource:
    """Updates of the hot keys from the hot-key tables' direct counters (module doc)."""

    def __init__(self, hot_keys: HotKeys, job_id: int, weight: float = 0.5) -> None:
        if not weight > 0:
            raise BadInput(f"hit weight {weight} must be > 0")
        self.hot_keys, self.job_id, self.weight = hot_keys, job_id, weight
        self._last: dict[int, int] = {}

    def hits(self) -> dict[int, int]:
        return read_hits(self.hot_keys, self.job_id)

    def read(self) -> Observation:
        now = self.hits()
        counts = {}
        for key, hits in now.items():
            before = self._last.get(key, 0)
            delta = hits - before if hits >= before else hits  # re-installed: a new counter
            if delta:
                counts[key] = self.weight * delta
        self._last = now
        return Observation(counts)


def _presence_rate(share: np.ndarray, workers: float) -> np.ndarray:
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
    return max(span, 1) * _presence_rate(collected / max(span, 1), workers)


class PSFrequencySource:
    """Updates per key from PS frequency files (one per shard; module doc): the `cold`
    column, and with `collected` also the hot keys' updates estimated from the `collected`
    column (updates_from_presence), so the files alone count every key's updates and the
    loop needs no switch read."""

    def __init__(self, paths: Sequence[str | Path], collected: bool = False) -> None:
        if not paths:
            raise BadInput("no PS frequency file given")
        self.paths, self.collected = [Path(p) for p in paths], collected
        self._last: dict[Path, tuple[int, np.ndarray, np.ndarray]] = {}
        self._live: dict[Path, LiveReader] = {}

    def read(self) -> Observation:
        from hosts.stats import is_live

        counts: dict[int, float] = {}
        presence: dict[int, float] | None = {} if self.collected else None
        iterations: list[int] = []
        spans: list[int] = []
        workers = 1
        for path in self.paths:
            if not path.exists():
                continue  # the PS has not written it yet
            try:
                since = self._live_delta(path) if is_live(path) else self._file_delta(path)
            except (OSError, ValueError) as exc:
                raise BadInput(f"PS frequency file {path}: {exc}") from None
            done, prev_done, shard_workers, keys, cold, collected = since
            n = cold
            if presence is not None:
                n = n + updates_from_presence(collected, done - prev_done, shard_workers)
                seen = collected > 0
                presence.update(zip(keys[seen].tolist(), collected[seen].tolist()))
                workers = max(workers, shard_workers)
            moved = n > 0
            for key, c in zip(keys[moved].tolist(), n[moved].tolist()):
                counts[key] = counts.get(key, 0.0) + c
            iterations.append(done)
            spans.append(done - prev_done)
        return Observation(
            counts,
            iteration=max(iterations) if iterations else None,
            iterations=max(spans) if spans else None,
            complete=bool(iterations),
            presence=presence if iterations else None,
            workers=workers,
        )

    def _live_delta(self, path: Path) -> _Delta:
        from hosts.stats import LiveReader

        reader = self._live.get(path)
        if reader is None:
            reader = self._live[path] = LiveReader(path)
        meta, prev_done, keys, counts = reader.since()
        done, workers = int(meta.get("iterations", "0")), int(meta.get("workers", "1"))
        cold, collected = counts.astype(np.float64)
        return done, prev_done, workers, keys, cold, collected

    def _file_delta(self, path: Path) -> _Delta:
        """A rewritten file's (CSV, .npz) counts since the last read."""
        from hosts.stats import read_frequency  # the file's one reader

        freq = read_frequency(path)
        done = int(freq.meta.get("iterations", "0"))
        workers = int(freq.meta.get("workers", "1"))
        order = np.argsort(freq.keys, kind="stable")
        keys = freq.keys[order]
        cols = np.stack([freq.cold[order], freq.collected[order]], axis=1)
        prev_done, prev_keys, prev_cols = self._last.get(path, (0, _NONE, _NONE))
        if done < prev_done:  # a new run started: a fresh file
            prev_done, prev_keys, prev_cols = 0, _NONE, _NONE
        # The file lists every key ever updated (tens of thousands): difference it with
        # numpy, only the keys updated since the last read become Python objects.
        delta = cols.astype(np.float64)
        if len(prev_keys):
            at = np.minimum(np.searchsorted(prev_keys, keys), len(prev_keys) - 1)
            known = prev_keys[at] == keys
            delta[known] -= prev_cols[at[known]]
        delta = np.maximum(delta, 0.0)
        self._last[path] = (done, keys, cols)
        return done, prev_done, workers, keys, delta[:, 0], delta[:, 1]


class CombinedSource:
    """The sum of several sources' counts (e.g. switch hits and PS files)."""

    def __init__(self, sources: Iterable[RateSource]) -> None:
        self.sources = list(sources)

    def read(self) -> Observation:
        out = Observation({})
        for obs in (s.read() for s in self.sources):
            for key, n in obs.counts.items():
                out.counts[key] = out.counts.get(key, 0.0) + n
            if obs.iteration is not None:
                out.iteration = max(out.iteration or 0, obs.iteration)
            if obs.iterations is not None:
                out.iterations = max(out.iterations or 0, obs.iterations)
            out.complete = out.complete or obs.complete
        return out


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
        n + h * _presence_rate(share, workers), total, out=np.zeros_like(n), where=total > 0
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
        ll = _loglik(*parts, workers)
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


class SwitchTarget:
    """A job's hot keys on one switch, over P4Runtime, kept in the loop's own record.

    The record (key -> offset, as in lookup instance 0) is read from the switch once, and
    again after a failed write; apply() keeps it up to date, so a step reads nothing back.
    apply() sends the whole change in one Write RPC: deletes from instances 0..7, then
    inserts into 7..0 at the offsets the deletes freed (HotKeys' order, so that instance 0
    stays the record if the switch refuses part of it; the data plane's slot tags keep the
    sums exact whatever the order, docs/design.md section 4). Like HotKeys, it tolerates
    orphans of an interrupted earlier write: NOT_FOUND from a delete in instances 1..7 is
    ignored, ALREADY_EXISTS from an insert there is rewritten with MODIFY."""

    def __init__(self, hot_keys: HotKeys, job: Job) -> None:
        self.hot_keys, self.job = hot_keys, job
        p4info = hot_keys.p4info
        self._keys_only = [p4info.encoder(hot_keys_table(i)) for i in range(MAX_ENTRIES)]
        self._with_slot = [
            p4info.encoder(hot_keys_table(i), set_slot_action(i)) for i in range(MAX_ENTRIES)
        ]
        self._offsets: dict[int, int] | None = None
        self.reads = self.writes = 0  # RPCs sent (the benchmark's and the tests' view)

    def offsets(self) -> dict[int, int]:
        if self._offsets is None:
            self._offsets = {hk.key: hk.offset for hk in self.hot_keys.list(self.job.job_id)}
            self.reads += 1
        return self._offsets

    def current(self) -> set[int]:
        return set(self.offsets())

    def apply(self, changes: Changes) -> None:
        if not changes.add and not changes.remove:
            return
        offsets = dict(self.offsets())
        remove = list(dict.fromkeys(check_key(k) for k in changes.remove))
        missing = [k for k in remove if k not in offsets]
        if missing:
            raise BadInput(f"key {missing[0]} is not hot for job {self.job.job_id}")
        for k in remove:
            del offsets[k]
        add = [k for k in dict.fromkeys(check_key(k) for k in changes.add) if k not in offsets]
        used = set(offsets.values())
        if len(add) > self.job.slot_count - len(used):
            raise BudgetExceeded(
                f"job {self.job.job_id} has {self.job.slot_count} slots, {len(used)} in use: "
                f"no room for {len(add)} more keys"
            )
        free = (o for o in range(self.job.slot_count) if o not in used)
        added = [(k, next(free)) for k in add]
        jid = self.job.job_id
        delete, insert = p4runtime_pb2.Update.DELETE, p4runtime_pb2.Update.INSERT
        batch: list[tuple[int, int, bytes]] = []  # (type, instance, TableEntry bytes)
        for i in range(MAX_ENTRIES):
            batch += [(delete, i, self._keys_only[i]((jid, k))) for k in remove]
        for i in reversed(range(MAX_ENTRIES)):
            batch += [(insert, i, self._with_slot[i]((jid, k), (o,))) for k, o in added]
        try:
            self._write([wire.update(kind, entry) for kind, _, entry in batch])
            repair = []
        except WriteError as e:
            repair = []
            for x in e.errors:
                kind, i, entry = batch[x.index]
                if i and kind == delete and x.code == "NOT_FOUND":
                    continue  # an orphan's instance that an earlier delete already emptied
                if i and kind == insert and x.code == "ALREADY_EXISTS":
                    repair.append(wire.update(p4runtime_pb2.Update.MODIFY, entry))
                    continue
                self._offsets = None  # the switch holds something else: read it again
                raise
        if repair:
            try:
                self._write(repair)
            except WriteError:
                self._offsets = None
                raise
        for k, o in added:
            offsets[k] = o
        self._offsets = offsets

    def _write(self, updates: list[bytes]) -> None:
        self.writes += 1  # one RPC up to STEP_BATCH updates (a step: 16 per key moved)
        batch = min(len(updates), STEP_BATCH)
        self.hot_keys.client.write(updates, batch_size=batch, stop_on_error=False)


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
