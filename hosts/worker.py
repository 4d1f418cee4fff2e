"""The worker agent: BSP pull / compute / push / DONE per iteration (docs/design.md section 3).

Per iteration t: PULL the workload's keys for t, compute the step from the pulled values (with
--compute, sleeping until the emulated compute time has passed: hosts/compute.py), PUSH
its entries (one seq per packet from 1, never reused; a sliding window of DEDUP_WINDOW seqs, so
seq s is sent only while every seq <= s - 64 is acked), then DONE(t) to every shard until each
answers DONE_ACK(t). While waiting for DONE_ACK(t) it prepares t+1's PULLs.

Loss recovery and congestion control are hosts/reliable.py's: PULLs and PUSHes go out within
a congestion window (at most the dedup window) that adapts to queueing delay and loss; an
unanswered request is resent (RETRANSMIT flag) after an RTT-based timeout once no reply at all
came for that long, and at once when the same shard answers a request sent after it (the path
and the PS keep order, so it was lost); a second reply to a resent request counts as
`spurious_retransmits`. After a resend, DONE goes out twice.

A reply counts only when it comes from the address (IPv4 and port) of the shard its request
went to: the PS answers from there, and a switch's reply carries the PS's address (it swaps
the request's). The switches already drop PUSH_ACK, PULL_REPLY and DONE_ACK that do not
come from where the PS's traffic arrives (docs/trust.md); this second check is cheap and
also holds where no switch checks.

Keys the switch aggregated (PUSH_ACK mask bit set) or holds in its cache (PULL_REPLY mask bit
set) are "hot"; a cleared PUSH_ACK bit makes a key cold again, for pulls as well, and so does
a DONE_ACK that names it (it left the switch, docs/design.md section 4). Hot keys
travel in their own PULL and PUSH packets, so the switch can answer a whole pull from its
cache and ack a whole push without involving the PS.

Choices beyond the design: a PULL's `seq` is a per-worker pull request number (its own space,
echoed in the reply); a DONE's `seq` is the index of the shard it is sent to (echoed in
DONE_ACK), and shard i owns the keys with key % n_shards == i.

    python -m hosts.worker --job 1 --worker-id 0 --ps 10.0.0.1:18497 --iterations 20 \
        --workload zipf --keys 100000 --skew 1.1 --log w0.csv --summary w0.json
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import select
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

import numpy as np

from contract.clihelp import HelpParser
from contract.codec import CodecError, Message, decode, encode
from contract.constants import (
    DEDUP_WINDOW,
    FLAG_FROM_SWITCH,
    FLAG_HOT_PUSHED,
    HOTAGG_PORT,
    MAX_ENTRIES,
    MAX_WORKERS,
    Op,
)
from hosts import workloads
from hosts.agent import (
    RECV_SIZE,
    Address,
    AgentError,
    Deadline,
    DeadlineExceeded,
    Interrupted,
    RttEstimator,
    cpu_report,
    cpu_usage,
    install_stop_signals,
    open_udp,
    parse_address,
    positive_int,
)
from hosts.compute import ComputeError, ComputePlan, plan_of
from hosts.compute import add_arguments as add_compute_arguments
from hosts.push_log import PushLog
from hosts.reliable import ReliableChannel, Request, Window
from hosts.stats import CsvLog, load_hot_keys, write_json

# Request log (--log): one row per completed request. kind = pull | push | done | iteration;
# seq = push seq / pull number / shard index; hot = entries the worker believed hot when it
# sent them; ready = wall clock (s) when it was handed to the channel (ready -> sent: the wait
# for the window); sent/reply = wall clock (s) of the first send and of the reply; latency_us
# from a monotonic clock; retransmits; from_switch = the reply carried FROM_SWITCH; mask =
# reply mask; loss only on `iteration` rows (whose sent/reply span the whole iteration).
LOG_COLUMNS = (
    "kind",
    "iteration",
    "seq",
    "shard",
    "entries",
    "hot",
    "ready",
    "sent",
    "reply",
    "latency_us",
    "retransmits",
    "from_switch",
    "mask",
    "loss",
)

_RECV_BATCH = 64  # replies taken per wake-up
T = TypeVar("T")


@dataclass
class WorkerConfig:
    job_id: int
    worker_id: int
    ps: list[Address]  # shard i's address at index i
    iterations: int
    bind: Address = ("127.0.0.1", 0)
    rto: float = 0.003  # minimum retransmission timeout (it adapts to the measured RTT)
    rto_max: float = 1.0  # cap, also for the doubling per retry
    rto_initial: float | None = None  # the timeout before a round trip is measured (None: 50 ms)
    window: int = DEDUP_WINDOW
    group_hot: bool = True
    deadline: float | None = None
    log_path: str | None = None
    summary_path: str | None = None
    pushes_path: str | None = None  # what it pushed, raw (hosts/push_log.py)
    progress: bool = False  # one flushed stdout line per finished iteration (for runners)
    hot_keys: list[int] | None = None  # keys the controller made hot: grouped from the start
    compute: ComputePlan | None = None  # emulated compute per iteration (hosts/compute.py)
    # Aggregation at every leaf: tell the PS once this iteration's hot pushes are acked, so
    # it can flush this worker's leaf while the cold pushes still queue (design.md section 7)
    signal_hot_pushed: bool = False

    def validate(self) -> None:
        if not 0 <= self.job_id < 1 << 16:
            raise AgentError(f"job id {self.job_id} must be 0..65535")
        if not 0 <= self.worker_id < MAX_WORKERS:
            raise AgentError(f"worker id {self.worker_id} must be 0..{MAX_WORKERS - 1}")
        if not self.ps:
            raise AgentError("at least one PS address is needed")
        if not 1 <= self.window <= DEDUP_WINDOW:
            raise AgentError(f"window must be 1..{DEDUP_WINDOW} (the dedup window)")
        if self.iterations < 1 or self.rto <= 0 or self.rto_max < self.rto:
            raise AgentError("iterations >= 1 and 0 < rto <= rto_max are required")
        if self.rto_initial is not None and not 0 < self.rto_initial <= self.rto_max:
            raise AgentError(f"rto_initial {self.rto_initial} must be in (0, rto_max]")


@dataclass
class _Entries:
    """What the worker keeps with a PULL or PUSH until its reply (reliable.Request.context)."""

    shard: int
    index: np.ndarray | None = None  # pull: positions of the keys in the pulled array
    hot: int = 0  # entries believed hot when sent


_Request = Request[_Entries]  # for annotations only: calling the alias is slow


@dataclass
class WorkerResult:
    iterations: int
    losses: list[float | None]
    counters: dict[str, int]
    hot_keys: int
    elapsed: float
    cpu: dict[str, float] | None = None  # agent.cpu_report over the iterations


def reply_sources(ps: list[Address]) -> dict[Address, int]:
    """Shard by the address its replies come from, as recvfrom reports it."""
    return {(str(ipaddress.IPv4Address(ip)), port): shard for shard, (ip, port) in enumerate(ps)}


class Worker:
    def __init__(self, config: WorkerConfig, workload: workloads.Workload) -> None:
        config.validate()
        self.cfg, self.workload = config, workload
        # Keys the switch aggregates (grouped in PUSHes) and keys its cache holds (grouped in
        # PULLs): learnt from PUSH_ACK and PULL_REPLY masks, seeded with the configured hot set.
        self.hot: set[int] = set(config.hot_keys or ())
        self.cached: set[int] = set(config.hot_keys or ())
        self._evicted: set[int] = set()  # told by the last DONE_ACKs, for _regroup
        self.counters: Counter[str] = Counter()
        self._stop = threading.Event()
        self._next_seq = 1
        self._next_pull = 1
        self._n_shards = len(config.ps)
        self._shard_at = reply_sources(config.ps)
        self._iteration = 0
        self._loss_seen = 0  # the latest iteration in which a request was resent
        # latency.csv's sent/reply columns: perf_counter moved onto the wall clock once, so
        # reply - sent is exactly the latency and both stay comparable with the PS's times.
        self._wall_offset = time.time() - time.perf_counter()
        self._unlogged: Callable[[], None] | None = None  # the last iteration's log row
        self.compute_ms: list[float] = []  # per iteration: pull reply to push (_compute)
        # every update pushed, once, for the conservation check (experiment/conservation.py)
        self._pushes = PushLog(
            config.pushes_path, config.job_id, config.worker_id, config.iterations
        )
        self.sock = open_udp(config.bind)
        self.address: Address = self.sock.getsockname()
        # PULLs and PUSHes (seqs never reused, at most `window` ahead of the lowest
        # unanswered); DONEs, whose round trip waits for the barrier, on their own estimator.
        self._data: ReliableChannel[_Entries] = ReliableChannel(
            self._send,
            self.counters,
            RttEstimator(config.rto, config.rto_max, config.rto_initial),
            Window(config.window),
            span=config.window,
            on_resend=self._on_resend,
        )
        self._barrier: ReliableChannel[_Entries] = ReliableChannel(
            self._send,
            self.counters,
            RttEstimator(config.rto, config.rto_max),
            Window(self._n_shards, adaptive=False),
            track_spurious=False,  # a DONE's seq is its shard, the same every iteration
            sample_resent=True,  # the barrier's wait, learnt even when a DONE was resent
            copies=self._done_copies,
            on_resend=self._on_resend,
        )

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def close(self) -> None:
        self.sock.close()

    def run(self) -> WorkerResult:
        """Run all iterations; raises DeadlineExceeded or Interrupted if it cannot finish."""
        cfg = self.cfg
        self._deadline = Deadline(cfg.deadline, f"worker {cfg.worker_id}")
        self._log = CsvLog(cfg.log_path, LOG_COLUMNS)
        losses: list[float | None] = []
        begin, cpu0 = time.perf_counter(), cpu_usage()
        try:
            # While waiting for DONE_ACK(t) the worker prepares iteration t+1's pulls, and
            # while its pulls for t+1 are out it logs iteration t: neither is on the path
            # from one barrier to the next.
            nxt: tuple[np.ndarray, list[_Request]] | None = self._prepare_pull(1)
            for t in range(1, cfg.iterations + 1):
                t0 = time.perf_counter()
                self._iteration = t
                assert nxt is not None  # _done returned prepare's result: t is not the last
                keys, reqs = nxt
                pulled = self._pull(t, reqs, len(keys), self._flush_log)
                pulled_at = time.perf_counter()
                step = self.workload.step(cfg.worker_id, t, keys, pulled)
                self._compute(t, pulled_at)
                self._push(t, np.asarray(step.keys, np.uint64), np.asarray(step.values, np.int32))
                prepare = partial(self._prepare_pull, t + 1) if t < cfg.iterations else None
                nxt = self._done(t, prepare)
                if nxt is not None and self._evicted:
                    nxt = (nxt[0], self._regroup(t + 1, *nxt))
                elapsed = time.perf_counter() - t0
                losses.append(step.loss)
                t_wall = t0 + self._wall_offset
                self._unlogged = partial(
                    self._log_iteration, t, len(step.keys), t_wall, elapsed, step.loss
                )
            self._flush_log()
            self._pushes.close(complete=True)
            result = WorkerResult(
                cfg.iterations,
                losses,
                dict(self.counters),
                len(self.hot),
                time.perf_counter() - begin,
                cpu_report(cpu0, cpu_usage()),
            )
            if cfg.summary_path:
                write_json(cfg.summary_path, self.summary(result))
            return result
        finally:
            self._flush_log()
            self._log.close()
            self._pushes.close(complete=False)  # a run cut short: what it pushed until then

    def _compute(self, t: int, since: float) -> None:
        """Emulated compute: sleep until the plan's time for (worker, t) has passed since the
        pull's reply (the step's own CPU time counts in it). A sleep, not work, so that it
        takes no core from the switch and the other agents."""
        plan = self.cfg.compute
        if plan is not None:
            until = since + plan.ms(self.cfg.worker_id, t) / 1e3
            while (left := until - time.perf_counter()) > 0:
                if self._stop.wait(min(left, 0.2)):
                    raise Interrupted(f"worker {self.cfg.worker_id} stopped in iteration {t}")
                self._deadline.check()
        self.compute_ms.append(round((time.perf_counter() - since) * 1e3, 3))

    def _flush_log(self) -> None:
        """Write the finished iteration's row (deferred off the barrier-to-barrier path)."""
        write = self._unlogged
        if write is not None:
            self._unlogged = None
            write()

    def _log_iteration(
        self, t: int, n: int, sent: float, elapsed: float, loss: float | None
    ) -> None:
        reply = sent + elapsed
        self._log.write(
            (
                "iteration",
                t,
                "",
                "",
                n,
                "",
                "",
                f"{sent:.6f}",
                f"{reply:.6f}",
                f"{elapsed * 1e6:.1f}",
                "",
                "",
                "",
                "" if loss is None else repr(loss),
            )
        )
        if self.cfg.progress:
            print(f"progress {t}/{self.cfg.iterations}", flush=True)

    def summary(self, r: WorkerResult) -> dict:
        return {
            "worker_id": self.cfg.worker_id,
            "job_id": self.cfg.job_id,
            "iterations": r.iterations,
            "elapsed_s": r.elapsed,
            "cpu": r.cpu,
            "losses": r.losses,
            "counters": r.counters,
            "hot_keys": r.hot_keys,
            "congestion": self._data.window.describe(),
            "rtt_max_ms": round(1e3 * self._data.max_rtt, 3),
            # how far the wall clock moved from the log's monotonic times since the start
            # (the latency dissection compares them with the PS's wall-clock times)
            "wall_clock_drift_us": round(
                (time.time() - time.perf_counter() - self._wall_offset) * 1e6, 1
            ),
            "workload": self.workload.describe(),
            "compute": None
            if self.cfg.compute is None
            else {
                "spec": str(self.cfg.compute.spec),
                "stragglers": str(self.cfg.compute.stragglers or "") or None,
                "ms": self.compute_ms,  # per iteration, as slept (from the pull's reply)
            },
        }

    # --- grouping ---

    def _groups(
        self, keys: np.ndarray, hot_set: set[int]
    ) -> Iterator[tuple[int, bool, np.ndarray]]:
        """Yield (shard, hot, positions) chunks of at most MAX_ENTRIES keys each, keys in
        `hot_set` in chunks of their own."""
        shard_of = keys % np.uint64(self._n_shards)
        if self.cfg.group_hot and hot_set:
            is_hot = np.fromiter((k in hot_set for k in keys.tolist()), bool, len(keys))
        else:
            is_hot = np.zeros(len(keys), bool)
        for shard in range(self._n_shards):
            in_shard = shard_of == shard
            for hot in (True, False):
                pos = np.flatnonzero(in_shard & (is_hot == hot))
                for i in range(0, len(pos), MAX_ENTRIES):
                    yield shard, hot, pos[i : i + MAX_ENTRIES]

    # --- the three exchanges of an iteration ---

    def _prepare_pull(self, t: int) -> tuple[np.ndarray, list[_Request]]:
        """Iteration t's keys and PULL requests, keys the switch cache held in their own
        packets (a PULL is answered by the switch only if all its keys hit)."""
        keys = np.asarray(self.workload.pull_keys(self.cfg.worker_id, t), dtype=np.uint64)
        return keys, self._pull_requests(t, keys)

    def _pull_requests(self, t: int, keys: np.ndarray) -> list[_Request]:
        reqs, job, me = [], self.cfg.job_id, self.cfg.worker_id
        for shard, hot, pos in self._groups(keys, self.cached):
            seq, self._next_pull = self._next_pull, self._next_pull + 1
            k = tuple(keys[pos].tolist())
            m = Message(Op.PULL, 0, job, me, seq, t, 0, k, (0,) * len(k))
            reqs.append(Request(m, self.cfg.ps[shard], "pull", _Entries(shard, pos, len(k) * hot)))
        return reqs

    def _regroup(self, t: int, keys: np.ndarray, reqs: list[_Request]) -> list[_Request]:
        """t's prepared PULLs again if a DONE_ACK said one of their cached keys left the
        switch (one such key would take its whole PULL to the PS); they were not sent, so
        their seqs are reused."""
        told, self._evicted = self._evicted, set()
        if not any(r.context.hot and not told.isdisjoint(r.msg.keys) for r in reqs):
            return reqs
        self.counters["pulls_regrouped"] += 1
        self._next_pull = reqs[0].msg.seq
        return self._pull_requests(t, keys)

    def _pull(
        self, t: int, reqs: list[_Request], n: int, idle: Callable[[], None] | None = None
    ) -> np.ndarray:
        pulled = np.zeros(n, dtype=np.int32)
        hot, cached = self.hot, self.cached

        def on_reply(req: _Request, m: Message) -> bool:
            if m.iteration != t or m.keys != req.msg.keys:
                return False
            pulled[req.context.index] = m.values
            if m.mask or req.context.hot:  # mask: cache hits, or keys the PS knows are cached
                for i, key in enumerate(req.msg.keys):
                    if m.mask >> i & 1:
                        cached.add(key)
                        hot.add(key)  # it has a slot, so the switch aggregates it
                    else:
                        cached.discard(key)
            self.counters["pull_switch_hits" if m.flags & FLAG_FROM_SWITCH else "pull_ps"] += 1
            return True

        self._transfer(self._data, t, reqs, Op.PULL_REPLY, on_reply, idle)
        return pulled

    def _push(self, t: int, keys: np.ndarray, values: np.ndarray) -> None:
        self._pushes.record(t, keys, values)  # once per update: resends are not updates
        reqs, job, me = [], self.cfg.job_id, self.cfg.worker_id
        for shard, hot, pos in self._groups(keys, self.hot):
            seq, self._next_seq = self._next_seq, self._next_seq + 1
            k, v = tuple(keys[pos].tolist()), tuple(values[pos].tolist())
            m = Message(Op.PUSH, 0, job, me, seq, t, 0, k, v)
            reqs.append(Request(m, self.cfg.ps[shard], "push", _Entries(shard, hot=len(k) * hot)))
        hot_left = sum(1 for r in reqs if r.context.hot) if self.cfg.signal_hot_pushed else -1
        if hot_left == 0:
            self._hot_pushed(t)

        def on_reply(req: _Request, m: Message) -> bool:
            nonlocal hot_left
            if m.iteration != t:
                return False
            if req.context.hot and hot_left > 0:
                hot_left -= 1
                if hot_left == 0:
                    self._hot_pushed(t)
            for i, key in enumerate(req.msg.keys):
                if m.mask >> i & 1:
                    self.hot.add(key)
                else:
                    # No slot summed it in t, mostly because it left the hot set: its pull
                    # of t+1 would miss and take its whole hot PULL to the PS (a PULL_REPLY
                    # mask makes it cached again if it is; docs/design.md section 4).
                    self.hot.discard(key)
                    self.cached.discard(key)
            self.counters["push_switch_acks" if m.flags & FLAG_FROM_SWITCH else "push_ps"] += 1
            return True

        self._transfer(self._data, t, reqs, Op.PUSH_ACK, on_reply)

    def _hot_pushed(self, t: int) -> None:
        """DONE(t) flagged HOT_PUSHED to every shard, once and never answered: a lost one
        only leaves the leaf's flush to the plain DONE(t) (docs/design.md section 7)."""
        job, me = self.cfg.job_id, self.cfg.worker_id
        for shard, addr in enumerate(self.cfg.ps):
            self._send(encode(Op.DONE, job, me, shard, t, flags=FLAG_HOT_PUSHED), addr)
        self.counters["hot_pushed_sent"] += 1

    def _done(self, t: int, idle: Callable[[], T] | None = None) -> T | None:
        """DONE(t) to every shard until each acks; returns what `idle` (run once, while the
        barrier is pending) returned."""
        job, me = self.cfg.job_id, self.cfg.worker_id
        reqs = [
            Request(Message(Op.DONE, 0, job, me, s, t, 0), addr, "done", _Entries(s))
            for s, addr in enumerate(self.cfg.ps)
        ]

        def done(_r: _Request, m: Message) -> bool:
            if m.iteration != t:
                return False
            if m.keys:  # keys that left the switch's cache (docs/design.md section 4)
                self.hot.difference_update(m.keys)
                self.cached.difference_update(m.keys)
                self._evicted.update(m.keys)
            return True

        return self._transfer(self._barrier, t, reqs, Op.DONE_ACK, done, idle)

    # --- reliable request/reply engine ---

    def _transfer(
        self,
        ch: ReliableChannel[_Entries],
        t: int,
        reqs: list[_Request],
        reply_op: Op,
        on_reply: Callable[[_Request, Message], bool],
        idle: Callable[[], T] | None = None,
    ) -> T | None:
        """Send `reqs` through `ch` (hosts/reliable.py: window, resends) and hand each
        matching reply to `on_reply` until every request is answered. `idle` runs once,
        after the first sends (work that overlaps the wait); its result is returned."""
        result = None
        log = self._log.write
        ready = f"{time.perf_counter() + self._wall_offset:.6f}"  # the log's `ready`
        ch.submit(reqs)
        while ch.busy():
            if self._stop.is_set():
                raise Interrupted(f"worker {self.cfg.worker_id} stopped in iteration {t}")
            self._deadline.check()
            ch.pump()
            if idle is not None:
                result, idle = idle(), None
                continue  # replies may be waiting: read them without blocking
            for m, shard in self._recv(ch.wake_in(0.2)):
                # Only the data channel tracks spurious resends (a DONE's seq repeats), and
                # a resent PUSH's second reply often comes while DONE is waited for.
                if self._data.spurious(m):
                    continue
                if m.op != reply_op:
                    self.counters["stray_replies"] += 1
                    continue
                r = ch.lookup(m.seq)
                if r is not None and r.context.shard != shard:
                    self.counters["replies_from_another_shard"] += 1
                    continue
                if r is None or not on_reply(r, m):
                    self.counters["late_replies"] += 1
                    continue
                from_switch = bool(m.flags & FLAG_FROM_SWITCH)
                # A PS reply passed the switch after every earlier request to that shard:
                # those still unanswered were lost. A switch reply may overtake them.
                ch.answered(r, m, ordered=not from_switch, path=from_switch)
                done = time.perf_counter()
                log(
                    (
                        r.kind,
                        t,
                        r.id,
                        r.context.shard,
                        len(r.msg.keys),
                        r.context.hot,
                        ready,
                        f"{r.first + self._wall_offset:.6f}",
                        f"{done + self._wall_offset:.6f}",
                        f"{(done - r.first) * 1e6:.1f}",
                        r.tries,
                        int(from_switch),
                        m.mask,
                        "",
                    )
                )
        if idle is not None:  # nothing was sent
            result = idle()
        return result

    def _on_resend(self, _r: _Request) -> None:
        self._loss_seen = self._iteration

    def _done_copies(self) -> int:
        """Packets are being lost: a second copy of each DONE saves a timeout."""
        if self._loss_seen and self._iteration - self._loss_seen <= 2:
            self.counters["done_copies"] += 1
            return 2
        return 1

    def _send(self, data: bytes, dest: Address) -> None:
        try:
            self.sock.sendto(data, dest)
        except OSError as exc:  # e.g. ENOBUFS or no route: a lost packet, resent on timeout
            self.counters["send_errors"] += 1
            if self.counters["send_errors"] == 1:
                print(f"worker {self.cfg.worker_id}: send failed: {exc}", file=sys.stderr)

    def _recv(self, timeout: float) -> list[tuple[Message, int]]:
        """Wait up to `timeout` for a datagram, then take whatever else is already queued;
        each reply with the shard it came from (others are counted and dropped)."""
        out: list[tuple[Message, int]] = []
        sock = self.sock
        # Wake at least every 0.2 s to notice stop() and the deadline.
        sock.settimeout(self._deadline.remaining(min(max(timeout, 0.0), 0.2)))
        while len(out) < _RECV_BATCH:
            try:
                data, source = sock.recvfrom(RECV_SIZE)
            except (TimeoutError, BlockingIOError):
                break
            except OSError:  # e.g. ECONNREFUSED surfaced by ICMP: treat as loss
                self.counters["recv_errors"] += 1
                break
            sock.settimeout(0.0)
            shard = self._shard_at.get(source)
            if shard is None:  # not from a PS shard's address: forged, or not hotagg's
                self.counters["replies_from_elsewhere"] += 1
                continue
            try:
                m = decode(data)
            except CodecError:
                self.counters["malformed"] += 1
                continue
            if m.job_id != self.cfg.job_id or m.worker_id != self.cfg.worker_id:
                self.counters["foreign"] += 1
                continue
            out.append((m, shard))
        return out


def build_parser() -> argparse.ArgumentParser:
    p = HelpParser(prog="python -m hosts.worker", description=__doc__.split("\n")[0])
    p.add_argument("--job", type=int, required=True, help="job id (0..65535)")
    p.add_argument("--worker-id", type=int, required=True, help=f"0..{MAX_WORKERS - 1}")
    p.add_argument("--ps", required=True, help="PS shard addresses ip[:port],... in shard order")
    p.add_argument("--iterations", type=positive_int, required=True)
    p.add_argument("--bind", default="127.0.0.1:0", help="local ip:port (default 127.0.0.1:0)")
    p.add_argument(
        "--rto",
        type=float,
        default=0.003,
        help="minimum retransmit timeout, s (it adapts to the measured RTT)",
    )
    p.add_argument("--rto-max", type=float, default=1.0, help="retransmit timeout cap, s")
    p.add_argument(
        "--rto-initial",
        type=float,
        help="timeout before the first round trip is measured, s (default 0.05; the "
        "experiment passes what its warm-up measured)",
    )
    p.add_argument("--no-group-hot", action="store_true", help="mix hot and cold keys")
    p.add_argument(
        "--signal-hot-pushed",
        action="store_true",
        help="send the PS a DONE flagged HOT_PUSHED once an iteration's hot pushes are acked "
        "(aggregation at every leaf: the PS flushes the leaf then)",
    )
    p.add_argument(
        "--deadline",
        type=float,
        default=900.0,
        help="give up after this many seconds, exit 3 (0: never; default 900)",
    )
    p.add_argument("--log", help="per-request latency CSV")
    p.add_argument("--summary", help="summary JSON")
    p.add_argument(
        "--pushes",
        help="raw log of every update pushed (.npz, hosts/push_log.py), written at the end "
        "for the conservation check (python -m experiment.conservation)",
    )
    p.add_argument("--progress", action="store_true", help="print 'progress t/T' per iteration")
    p.add_argument(
        "--hot-keys",
        help="CSV key[,offset] of the keys made hot (from the controller): grouped in their "
        "own packets from iteration 1 on (otherwise learnt from the replies)",
    )
    p.add_argument(
        "--wait-go",
        action="store_true",
        help="once set up, print 'ready' and start only when a line 'go' arrives on stdin "
        "(so that workers started one after another begin iteration 1 together)",
    )
    add_compute_arguments(p)
    workloads.add_arguments(p)
    return p


def main(argv: list[str] | None = None) -> int:
    """Exit codes: 0 done, 1 error, 2 bad arguments, 3 deadline exceeded, 4 interrupted."""
    args = build_parser().parse_args(argv)
    try:
        cfg = WorkerConfig(
            job_id=args.job,
            worker_id=args.worker_id,
            ps=[parse_address(a, HOTAGG_PORT) for a in args.ps.split(",")],
            iterations=args.iterations,
            bind=parse_address(args.bind, 0),
            rto=args.rto,
            rto_max=max(args.rto, args.rto_max),
            rto_initial=args.rto_initial,
            group_hot=not args.no_group_hot,
            signal_hot_pushed=args.signal_hot_pushed,
            deadline=args.deadline or None,
            log_path=args.log,
            summary_path=args.summary,
            pushes_path=args.pushes,
            progress=args.progress,
            hot_keys=sorted(load_hot_keys(args.hot_keys)) if args.hot_keys else None,
            # seeded by the workload's seed: both modes and the model draw the same times
            compute=plan_of(args.compute, args.stragglers, args.seed),
        )
        worker = Worker(cfg, workloads.from_args(args))
    except (AgentError, workloads.WorkloadError, ComputeError, ValueError) as exc:
        print(f"worker: {exc}", file=sys.stderr)
        return 2
    install_stop_signals(worker.stop)
    if args.wait_go:
        print("ready", flush=True)
        # Poll, so that SIGINT/SIGTERM (which only set the stop flag) end the wait too.
        while not worker.stopped and not select.select([sys.stdin], [], [], 0.2)[0]:
            pass
        line = "" if worker.stopped else sys.stdin.readline()
        if line.strip() != "go":
            why = "stopped" if worker.stopped else f"got {line.strip()!r}"
            print(f"worker: expected 'go' on stdin, {why}", file=sys.stderr)
            worker.close()
            return 4
    try:
        result = worker.run()
    except DeadlineExceeded as exc:
        print(f"worker: {exc}", file=sys.stderr)
        return 3
    except Interrupted as exc:
        print(f"worker: {exc}", file=sys.stderr)
        return 4
    except OSError as exc:  # e.g. an output file that cannot be written
        print(f"worker: {exc}", file=sys.stderr)
        return 1
    finally:
        worker.close()
    print(json.dumps(worker.summary(result), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
