"""A PS shard's barrier (docs/design.md section 3): once every worker's DONE(t) is in, COLLECT
iteration t's sums from the switch, invalidate refreshes that missed a contribution, apply
the cold and collected sums, WRITEBACK the hot keys' new values tagged t+1, and release.

COLLECT and WRITEBACK go through the SwitchChannel (hosts/switch_channel.py); what the PS
believes the switch cache holds is its CacheBeliefs (hosts/switch_cache.py). DONE_ACK(t)
leaves as soon as the last WRITEBACK for t+1 is sent, without waiting for the acks: it goes
out on the same socket to the same first switch, which handles a port's frames in order, so
the cache is filled before any worker learns it may pull t+1. A WRITEBACK that is lost, or
ordered after a pull by some other path, only turns that pull into a miss the PS answers.
The release itself (the DONE_ACKs, the pulls held for t+1) is the caller's `on_release`.

In `ssp:S` and `async` (docs/design.md section 8) iterations are still applied in order,
each whole, once every worker's DONE for it is in; pushes and DONEs of later iterations
wait in their own IterationState (`ahead`). After applying t the PS tells the switch that
every copy of t is read (an empty COLLECT of t + 1), before any DONE_ACK lets a worker push
t + 2. In `async` cold entries are applied as they arrive (`apply_cold`), not with their
iteration.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from contract.codec import Message
from contract.constants import INT32_MAX, INT32_MIN
from hosts.agent import Address
from hosts.leaf_flush import LeafFlush
from hosts.ps_config import PSConfig
from hosts.ps_frequency import FrequencyCounts
from hosts.switch_cache import CacheBeliefs
from hosts.switch_channel import RowWriter, SwitchChannel


class Phase(Enum):
    """Where an iteration is: its pushes are being taken until every worker sent DONE, then
    the barrier collects the switch's sums, invalidates wrong refreshes, writes back the hot
    keys, and releases (DONE_ACK to every worker)."""

    ACCUMULATING = "accumulating"
    FLUSHING = "flushing"  # remote leaves' partial sums up to the root (design.md section 7)
    COLLECTING = "collecting"
    INVALIDATING = "invalidating"
    WRITING_BACK = "writing back"
    RELEASED = "released"


@dataclass
class IterationState:
    """The PS's state of the iteration being accumulated (iterations before it are applied)."""

    number: int
    phase: Phase = Phase.ACCUMULATING
    done: dict[int, tuple[float, float]] = field(default_factory=dict)  # worker -> DONE times
    hot_pushed: set[int] = field(default_factory=set)  # workers whose hot pushes are acked
    cold_keys: list[int] = field(default_factory=list)  # first-time cold pushes
    cold_values: list[int] = field(default_factory=list)
    collected_keys: list[int] = field(default_factory=list)  # the switch's sums
    collected_sums: list[int] = field(default_factory=list)
    collected_offsets: list[int] = field(default_factory=list)
    refreshed: list[tuple[int, int]] = field(default_factory=list)  # (offset, key)
    acked: set[int] = field(default_factory=set)  # workers sent DONE_ACK early (ssp, async)
    # partial PUSHes of remote leaves that reached the PS with refused entries (section 7)
    flush_remainders: int = 0

    @property
    def in_barrier(self) -> bool:
        return self.phase in (
            Phase.FLUSHING,
            Phase.COLLECTING,
            Phase.INVALIDATING,
            Phase.WRITING_BACK,
        )


class Barrier:
    """The iteration a shard accumulates (`it`), and the steps that apply it and move on.

    `params` is the shard's parameter array (applied in place); `counts` counts each key's
    applied entries; `on_release(it)` is called once iteration `it` is applied and, with
    collect, its hot keys written back, after `it` has become the next iteration's state."""

    def __init__(
        self,
        config: PSConfig,
        params: np.ndarray,
        counts: FrequencyCounts,
        counters: Counter[str],
        send: Callable[[bytes, Address], None],
        row: RowWriter,
        on_release: Callable[[IterationState], None],
    ) -> None:
        self.cfg, self.params, self.counts, self.counters = config, params, counts, counters
        self.it = IterationState(1)
        # keys whose sums this shard collected: written back after each iteration; a key
        # leaves when a WRITEBACK_ACK has its mask bit clear
        self.hot: set[int] = set()
        # what this PS believes the switch cache holds (docs/design.md section 3)
        self.cache = CacheBeliefs()
        self.switch = SwitchChannel(config, send, row, counters, self.cache.refresh_lost)
        # aggregation at every leaf: the remote leaves' sums are flushed to the root first
        self.flush = (
            LeafFlush(config.job_id, config.leaves, config.hot_slots, send, counters)
            if config.leaves
            else None
        )
        self._on_release = on_release
        self.sync = config.sync
        # ssp, async: the states of iterations after cur that pushes or DONEs reached
        self.ahead: dict[int, IterationState] = {}

    @property
    def cur(self) -> int:
        """The iteration being accumulated; iterations < cur are applied."""
        return self.it.number

    @property
    def applied(self) -> int:
        """The newest iteration the parameters hold whole (cur, once it is applied and its
        hot keys are being written back)."""
        return self.cur if self.it.phase is Phase.WRITING_BACK else self.cur - 1

    def state(self, iteration: int) -> IterationState | None:
        """The state that takes a push or DONE of `iteration`: cur's while it accumulates, a
        later one's in ssp (at most S + 1 ahead, as the pacing allows) and async; None for an
        iteration that is applied, being applied, beyond --iterations or too far ahead."""
        limit, bound = self.cfg.iterations, self.sync.bound
        if limit is not None and iteration > limit:
            return None
        if iteration == self.cur:
            return self.it if self.it.phase is Phase.ACCUMULATING else None
        # ssp: a DONE_ACK sent while cur is written back lets a worker reach cur + S + 1
        ahead = None if bound is None else bound + 1 if bound else 0
        if iteration < self.cur or (ahead is not None and iteration > self.cur + ahead):
            return None
        if iteration not in self.ahead:
            self.ahead[iteration] = IterationState(iteration)
        return self.ahead[iteration]

    def complete(self, it: IterationState) -> bool:
        """Every worker's DONE for `it` is in."""
        return len(it.done) == self.cfg.n_workers

    def apply_cold(self, keys: tuple[int, ...], values: tuple[int, ...]) -> None:
        """async: cold entries are applied as they arrive (their state keeps the keys, for
        the counts and the refresh rule, but not the values)."""
        if keys:
            np.subtract.at(
                self.params, np.array(keys, dtype=np.intp), np.array(values, dtype=np.int64)
            )

    @property
    def finished(self) -> bool:
        """The configured iterations are all applied."""
        return self.cfg.iterations is not None and self.cur > self.cfg.iterations

    def busy(self) -> bool:
        """A step is under way that the switch's replies or timeouts move on (`advance`)."""
        return self.it.in_barrier or self._writing() or self.switch.releasing()

    def timeout(self, limit: float) -> float:
        """Seconds until something is due (a resend, or a flush-count probe), at most `limit`."""
        limit = self.switch.timeout(limit)
        if self.flush is not None and self.it.phase is Phase.FLUSHING and not self.switch.probing():
            limit = min(limit, self.flush.probe_due())
        return limit

    def _writing(self) -> bool:
        return self.switch.writeback_queued() or self.switch.chaining()

    def _chain(self, iteration: int, keys: list[int], values: list[int]) -> None:
        """Write these values, tagged `iteration`, into every remote leaf's cache."""
        if self.cfg.leaves and keys:
            self.switch.start_chain(iteration, keys, values, self.cfg.leaves[0].address)

    def prefill(self) -> None:
        """WRITEBACK the initial values of this shard's configured hot keys, tagged iteration 1
        (their offsets seed the PS's belief of what each slot caches)."""
        cfg = self.cfg
        if cfg.collect and not self.sync.bsp:
            # a value left in the switch by an earlier run of this job index must not let
            # pushes reuse copies of this run that are not read yet (design.md section 8)
            self.switch.start_release(self.cur)
        if not (cfg.collect and cfg.writeback and cfg.hot_keys):
            return
        n, shard = cfg.n_shards, cfg.shard
        mine = {k: o for k, o in cfg.hot_keys.items() if k < cfg.key_space and k % n == shard}
        self.hot.update(mine)
        self.cache.seed(mine)
        keys = sorted(mine)
        self.switch.start_writeback(self.cur, keys, self.params[keys].tolist())
        self._chain(self.cur, keys, self.params[keys].tolist())

    def on_done(self) -> None:
        """A worker's DONE for `cur`, or its word that its hot pushes are acked, came in:
        flush the remote leaves whose racks are all that far, while the rest still push
        (docs/design.md section 7)."""
        it = self.it
        if self.flush is not None and it.phase is Phase.ACCUMULATING:
            self.flush.racks_done(it.number, it.done.keys() | it.hot_pushed)

    def finalize(self) -> None:
        """Every worker's DONE for `cur` is in: collect (or, server-only, apply at once)."""
        if not self.cfg.collect:
            self._apply()
            return
        if self.flush is not None:
            self.it.phase = Phase.FLUSHING
            self.flush.start(self.it.number)
            self.advance()
            return
        self._start_collect()

    def _start_collect(self) -> None:
        it = self.it
        it.phase = Phase.COLLECTING
        # Ask the switch to move a cached key on to cur + 1 only if this PS holds no cold
        # part of it for cur: the switch then knows every contribution but those that went
        # to another slot, which the replies show (see _collected_elsewhere).
        cold = set(it.cold_keys)
        self.cache.not_summed(it.number, cold)
        refresh = self.cache.refreshable(it.number, cold)
        self.switch.start_collect(it.number, refresh)
        self.advance()

    def advance(self) -> None:
        """Tick the switch channel and move the barrier on when its step is complete."""
        self.switch.tick()
        it = self.it
        if it.phase is Phase.FLUSHING and self.flush is not None:
            if self.flush.done:
                self._start_collect()
            elif not self.switch.probing() and self.flush.probe_due() == 0:
                self.switch.start_probe(it.number)
        elif it.phase is Phase.COLLECTING and not self.switch.collecting():
            wrong = self._collected_elsewhere()
            if wrong:
                it.phase = Phase.INVALIDATING
                self.switch.start_invalidate(it.number, wrong)
            else:
                self._apply()
        elif it.phase is Phase.INVALIDATING and not self.switch.invalidating():
            self._apply()
        elif it.phase is Phase.WRITING_BACK and not self._writing():
            self._release()

    def on_collect_reply(self, m: Message) -> str:
        """A COLLECT_REPLY: this shard's sums, and the slots the switch refreshed or refused."""
        it = self.it
        collecting = it.phase in (Phase.COLLECTING, Phase.INVALIDATING)
        reply = self.switch.on_collect_reply(m, collecting)
        if reply.flush_count is not None:
            if it.phase is Phase.FLUSHING and self.flush is not None:
                self.flush.on_count(reply.flush_count + it.flush_remainders)
                self.advance()
            return reply.result
        for offset in reply.refused:
            self.cache.refused(offset)
        for offset, key in reply.refreshed:
            self.cache.refreshed(offset, key, m.iteration + 1)
        for key, value, offset in reply.collected:
            it.collected_keys.append(key)
            it.collected_sums.append(value)
            it.collected_offsets.append(offset)
            self.cache.collected(key, offset)
            self.hot.add(key)
        it.refreshed.extend(reply.refreshed)
        return reply.result

    def on_writeback_ack(self, m: Message) -> str:
        """A WRITEBACK_ACK: its keys are cached for its iteration, or left the switch."""
        cached, rejected = self.switch.on_writeback_ack(m)
        for key in cached:
            self.cache.written(key, m.iteration)
        for key in rejected:
            self.cache.rejected(key)
        self.hot.difference_update(rejected)
        return "writeback_ack"

    def _collected_elsewhere(self) -> list[tuple[int, int]]:
        """Refreshed (offset, key) pairs whose key also had a sum at another offset this
        iteration (the controller moved it): that cache value lacks those contributions.
        Also those of COLLECTs given up (--collect-retries), which may have refreshed."""
        it = self.it
        wrong = self.cache.take_unsure()
        if it.refreshed:
            at: dict[int, set[int]] = {}
            for key, offset in zip(it.collected_keys, it.collected_offsets):
                at.setdefault(key, set()).add(offset)
            wrong += [(o, k) for o, k in it.refreshed if at.get(k, {o}) != {o}]
        for o, k in wrong:
            self.cache.forget(o, k)
        self.counters["refresh_invalidated"] += len(wrong)
        return wrong

    def _apply(self) -> None:
        """Apply iteration cur's cold and collected sums, then write back or release."""
        it = self.it
        cold = np.array(it.cold_keys, dtype=np.intp)
        collected = np.array(it.collected_keys, dtype=np.intp)
        self.counts.add(it.number, cold, collected)
        for keys, values in ((cold, it.cold_values), (collected, it.collected_sums)):
            if len(keys) and len(values):  # async: cold values were applied on arrival
                np.subtract.at(self.params, keys, np.array(values, dtype=np.int64))
        self.counters["collected_entries"] += len(it.collected_keys)
        if self.cfg.collect and not self.sync.bsp:
            # every copy of cur is read: sent before any DONE_ACK lets a worker push cur + 2
            self.switch.start_release(self.cur + 1)
        it.cold_keys, it.cold_values = [], []
        it.collected_keys, it.collected_sums, it.collected_offsets = [], [], []
        if not (self.cfg.collect and self.cfg.writeback and self.hot):
            self._release()
            return
        # Keys the switch refreshed in this pass are cached for cur + 1 already; the remote
        # leaves' caches are written whole (their sums were partial).
        nxt, holds = self.cur + 1, self.cache.holds
        root = np.array(sorted(k for k in self.hot if not holds(k, nxt)), dtype=np.intp)
        leaves = np.array(sorted(self.hot) if self.flush else [], dtype=np.intp)
        if not len(root) and not len(leaves):
            self._release()
            return
        it.phase = Phase.WRITING_BACK
        for keys, send in ((root, self.switch.start_writeback), (leaves, self._chain)):
            if len(keys):
                cached = self.params[keys]
                fits = (cached >= INT32_MIN) & (cached <= INT32_MAX)  # else the PS answers
                self.counters["writeback_skipped"] += int((~fits).sum())
                send(nxt, keys[fits].tolist(), cached[fits].tolist())
        if not self._writing():
            self._release()

    def _release(self) -> None:
        """Iteration cur is done: the next one starts, and the caller releases the workers."""
        done = self.it
        done.phase = Phase.RELEASED
        nxt = done.number + 1
        self.it = self.ahead.pop(nxt) if nxt in self.ahead else IterationState(nxt)
        self._on_release(done)
        if self.complete(self.it) and not self.finished:
            self.finalize()  # ssp, async: its DONEs came while the previous one was applied
