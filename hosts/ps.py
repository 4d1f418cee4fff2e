"""The parameter-server agent (docs/design.md section 3): one shard of one job.

Parameters are fixed-point int64 over the key space; this shard owns key % n_shards == shard.
- PUSH: deduplicated by (worker, seq) in a 64-seq window like the switch's (the worker's
  sliding window guarantees a newer seq in a window position means the older one was acked);
  duplicates are re-acked with the mask stored for the seq, never applied twice. First-time
  pushes of the current iteration are buffered and applied at the barrier, so every pull for
  iteration t sees exactly iterations < t. The PUSH_ACK echoes the mask the switch set.
- PULL for t: answered once iterations < t are applied, else held. The reply's mask is the
  request's (the switch's cache-hit bitmap) plus the entries whose keys this PS knows the
  cache holds for t (acked WRITEBACKs), so workers learn them as hot, but not those the
  switch passed on unanswered (such a key has left the switch); values are int64 clamped
  to int32.
- DONE(t) from every worker: COLLECT iteration t from the switch (offsets 0..hot_slots-1,
  MAX_ENTRIES per packet; a lost reply is asked again after an RTT-based timeout, or at once
  when a later COLLECT is answered first, until answered: giving up would lose the switch's
  sums, so only an explicit `collect_retries` does that), apply cold and
  collected sums, WRITEBACK the new values of the hot keys tagged t+1 (sent once each), and
  DONE_ACK(t) to all workers as soon as the last WRITEBACK is sent (see _finalize), again to
  any later DONE(t). While workers are retransmitting, each DONE_ACK is sent twice. Its
  entries name keys that left the switch's cache (hosts/switch_cache.py), so that workers
  stop grouping them as cached.
- Hot keys (for WRITEBACK) are the keys this shard collected; a key leaves the set when a
  WRITEBACK_ACK has its mask bit clear. Values beyond int32 are not written back.
Server-only mode (collect off) skips COLLECT and WRITEBACK. The conversation with the switch
(sending, resending, reading replies) lives in hosts/switch_channel.py; what this PS believes
the switch cache holds in hosts/switch_cache.py; the barrier's progress in `IterationState`.
Choices beyond the design: every shard collects all of the job's slots and keeps only its own
keys; DONE.seq must equal this shard's index (the worker's shard list must match ours).

    python -m hosts.ps --job 1 --workers 4 --keys 100000 --iterations 20 \
        --bind 10.0.0.10:18497 --collect --switch 10.0.0.254 --hot-slots 256 \
        --log ps.csv --freq freq.csv --params params.npy --summary ps.json
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from contract.clihelp import HelpParser
from contract.codec import CodecError, Message, decode, encode
from contract.constants import (
    DEDUP_WINDOW,
    FLAG_RETRANSMIT,
    HOTAGG_PORT,
    INT32_MAX,
    INT32_MIN,
    MAX_ENTRIES,
    MAX_WORKERS,
    NUM_SLOTS,
    Op,
)
from contract.freqfile import LiveFrequency, is_live, write_frequency
from hosts.agent import (
    RECV_SIZE,
    Address,
    AgentError,
    Deadline,
    DeadlineExceeded,
    Interrupted,
    cpu_report,
    cpu_usage,
    install_stop_signals,
    open_udp,
    parse_address,
    positive_int,
)
from hosts.stats import CsvLog, load_hot_keys, params_sha256, save_params, write_json
from hosts.switch_cache import CacheBeliefs
from hosts.switch_channel import SwitchChannel

# Request log (--log): one row per request received (and per COLLECT/WRITEBACK sent).
# arrival = wall clock (s) when the kernel received the datagram (SO_TIMESTAMPNS; where that is
# not available, when it was read), start = when its handling began (so start - arrival is
# queueing at the PS: its socket buffer plus the batch ahead of it), reply =
# when the answer was sent (empty: none; DONE rows are written at the barrier, so their reply
# is the DONE_ACK time); result = accepted | dup | stale | replied | held | barrier | reack |
# waiting | collected | cached | unanswered | an error counter name (malformed, bad_key...).
LOG_COLUMNS = (
    "arrival",
    "start",
    "reply",
    "op",
    "worker",
    "seq",
    "iteration",
    "entries",
    "mask",
    "result",
    "peer",
)
_OP_NAMES = {op.value: op.name for op in Op}
# Requests that point at a configuration mismatch between a worker and this PS.
_MISCONFIGURED = {
    "unknown_job": "a request for another job id: check --job of the workers and the PS",
    "bad_worker": "a worker id >= --workers: check --workers and the workers' --worker-id",
    "bad_key": "a key outside --keys or owned by another shard: check --keys and --shard",
    "bad_shard": "a DONE for another shard: the workers' --ps list must be in shard order",
}
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux; SCM_TIMESTAMPNS has the same value
_TIMESPEC = struct.Struct("@qq")
_CMSG_SPACE = socket.CMSG_SPACE(_TIMESPEC.size)
_BATCH = 64  # datagrams drained per wake-up; arrival vs start then shows queueing in the PS


@dataclass
class PSConfig:
    job_id: int
    n_workers: int
    key_space: int
    iterations: int | None = None  # None: serve until stopped
    bind: Address = ("127.0.0.1", HOTAGG_PORT)
    shard: int = 0
    n_shards: int = 1
    collect: bool = False
    switch: Address | None = None  # switch service address for COLLECT/WRITEBACK
    hot_slots: int = 0  # the job's slot_count
    writeback: bool = True
    rto: float = 0.002  # minimum COLLECT timeout (it adapts to the measured RTT)
    rto_max: float = 0.4
    collect_retries: int | None = None  # None: ask until answered (the deadline bounds it)
    collect_window: int = 64
    linger: float = 1.0  # after the last iteration, keep re-acking DONEs until idle this long
    max_held: int = 65536
    deadline: float | None = None
    log_path: str | None = None
    freq_path: str | None = None
    freq_every: int = 0  # also rewrite freq_path every this many iterations (0: only at exit)
    params_path: str | None = None
    summary_path: str | None = None
    # key -> slot offset (or None) of the keys the controller made hot: written back before
    # iteration 1, so that the cache serves pulls from the start
    hot_keys: dict[int, int | None] | None = None

    def validate(self) -> None:
        if not 0 <= self.job_id < 1 << 16:
            raise AgentError(f"job id {self.job_id} must be 0..65535")
        if not 1 <= self.n_workers <= MAX_WORKERS:
            raise AgentError(f"workers must be 1..{MAX_WORKERS}")
        if self.key_space < 1 or not 0 <= self.shard < self.n_shards:
            raise AgentError("key space >= 1 and 0 <= shard < shards are required")
        if self.collect and (self.switch is None or not 1 <= self.hot_slots <= NUM_SLOTS):
            raise AgentError(f"collect needs --switch and --hot-slots 1..{NUM_SLOTS}")
        retries_bad = self.collect_retries is not None and self.collect_retries < 0
        if self.freq_every < 0 or (self.freq_every and not self.freq_path):
            raise AgentError("--freq-every needs --freq and must be >= 0")
        if self.freq_every and is_live(self.freq_path or ""):
            raise AgentError("--freq-every rewrites a file; a .live --freq is always current")
        if self.rto <= 0 or self.rto_max < self.rto or retries_bad:
            raise AgentError("0 < rto <= rto_max and collect_retries >= 0 are required")


class Phase(Enum):
    """Where an iteration is: its pushes are being taken until every worker sent DONE, then
    the barrier collects the switch's sums, invalidates wrong refreshes, writes back the hot
    keys, and releases (DONE_ACK to every worker)."""

    ACCUMULATING = "accumulating"
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
    cold_keys: list[int] = field(default_factory=list)  # first-time cold pushes
    cold_values: list[int] = field(default_factory=list)
    collected_keys: list[int] = field(default_factory=list)  # the switch's sums
    collected_sums: list[int] = field(default_factory=list)
    collected_offsets: list[int] = field(default_factory=list)
    refreshed: list[tuple[int, int]] = field(default_factory=list)  # (offset, key)

    @property
    def in_barrier(self) -> bool:
        return self.phase in (Phase.COLLECTING, Phase.INVALIDATING, Phase.WRITING_BACK)


class _Dedup:
    __slots__ = ("masks", "seqs")

    def __init__(self) -> None:
        self.seqs = [0] * DEDUP_WINDOW
        self.masks = [0] * DEDUP_WINDOW


class ParameterServer:
    def __init__(self, config: PSConfig) -> None:
        config.validate()
        self.cfg = config
        n = config.key_space
        self.params = np.zeros(n, dtype=np.int64)
        self._live: LiveFrequency | None = None
        if config.freq_path and is_live(config.freq_path):  # the counters are the file
            try:
                self._live = LiveFrequency(config.freq_path, n, self._freq_meta())
            except (OSError, ValueError) as e:
                raise AgentError(f"--freq {config.freq_path}: {e}") from None
            self.cold_count, self.collected_count = self._live.cold, self._live.collected
        else:
            self.cold_count = np.zeros(n, dtype=np.int64)
            self.collected_count = np.zeros(n, dtype=np.int64)
        self._freq_writer: threading.Thread | None = None  # a --freq-every rewrite in flight
        self._freq_error: BaseException | None = None
        self.counters: Counter[str] = Counter()
        self.hot: set[int] = set()
        self.it = IterationState(1)
        self.finished = False
        self._dedup = [_Dedup() for _ in range(config.n_workers)]
        self._addr: dict[int, Address] = {}
        self._held: deque[tuple[Message, Address, float]] = deque()
        # what this PS believes the switch cache holds (docs/design.md section 3)
        self.cache = CacheBeliefs()
        # the evicted keys the DONE_ACKs of one iteration carry (a re-ack repeats them)
        self._evicted_told: list[int] = []
        self._evicted_told_at = 0
        self._peers: dict[Address, str] = {}  # address -> "ip:port" for the log
        self._stop = threading.Event()
        self._loss_seen = 0  # the latest iteration that saw a retransmitted request
        self._cpu: list[tuple] = []  # cpu_usage() at the first request and at the finish
        self.sock = open_udp(config.bind)
        try:  # kernel receive times, so that queueing in the socket buffer counts as PS queueing
            self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            self._cmsg_space = _CMSG_SPACE
        except OSError:
            self._cmsg_space = 0
        self.address: Address = self.sock.getsockname()
        self._switch = SwitchChannel(
            config, self._send, self._row, self.counters, self.cache.refresh_lost
        )

    @property
    def cur(self) -> int:
        """The iteration being accumulated; iterations < cur are applied."""
        return self.it.number

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        self.sock.close()

    # --- main loop ---

    def run(self) -> dict:
        """Serve until the configured iterations are done (then linger) or stop(); return the
        summary. Raises DeadlineExceeded, or Interrupted when stopped before finishing."""
        cfg = self.cfg
        deadline = Deadline(cfg.deadline, f"PS shard {cfg.shard}")
        self._log = CsvLog(cfg.log_path, LOG_COLUMNS)
        self._prefill_cache()
        last_rx = finished_at = time.perf_counter()
        try:
            while not self._stop.is_set():
                deadline.check()
                batch = self._recv_batch(deadline.remaining(self._switch.timeout(0.2)))
                if batch:
                    last_rx = time.perf_counter()
                    if not self._cpu:
                        self._cpu.append(cpu_usage())
                for data, addr, arrival in batch:
                    was_finished = self.finished
                    self._handle(data, addr, arrival)
                    if self.finished and not was_finished:
                        finished_at = time.perf_counter()
                if self.it.in_barrier or self._switch.writeback_queued():
                    was_finished = self.finished
                    self._advance()
                    if self.finished and not was_finished:
                        finished_at = time.perf_counter()
                if self.finished and time.perf_counter() - max(last_rx, finished_at) >= cfg.linger:
                    break
            if not self.finished and cfg.iterations is not None:
                raise Interrupted(f"PS shard {cfg.shard} stopped in iteration {self.cur}")
            return self.summary()
        finally:
            self._log.close()
            self._write_outputs()

    def _prefill_cache(self) -> None:
        """WRITEBACK the initial values of this shard's configured hot keys, tagged iteration 1
        (their offsets seed the PS's belief of what each slot caches)."""
        cfg = self.cfg
        if not (cfg.collect and cfg.writeback and cfg.hot_keys):
            return
        n, shard = cfg.n_shards, cfg.shard
        mine = {k: o for k, o in cfg.hot_keys.items() if k < cfg.key_space and k % n == shard}
        self.hot.update(mine)
        self.cache.seed(mine)
        keys = sorted(mine)
        self._switch.start_writeback(self.cur, keys, self.params[keys].tolist())

    def _recv_batch(self, timeout: float) -> list[tuple[bytes, Address, float]]:
        out: list[tuple[bytes, Address, float]] = []
        self.sock.settimeout(timeout)
        while len(out) < _BATCH:
            try:
                data, ancdata, _flags, addr = self.sock.recvmsg(RECV_SIZE, self._cmsg_space)
            except (TimeoutError, BlockingIOError, InterruptedError):
                break
            except OSError:  # an ICMP error surfaced on the socket: nothing to read
                self.counters["recv_errors"] += 1
                break
            arrival = time.time()
            for level, kind, cdata in ancdata:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(cdata) >= 16:
                    sec, nsec = _TIMESPEC.unpack_from(cdata)
                    arrival = sec + nsec * 1e-9
            out.append((data, addr, arrival))
            self.sock.settimeout(0.0)  # drain what is already queued without waiting
        return out

    def _send(self, data: bytes, addr: Address) -> None:
        try:
            self.sock.sendto(data, addr)
        except OSError:  # a lost reply: the peer retransmits
            self.counters["send_errors"] += 1

    def _row(self, arrival, start, reply, op, m: Message | None, result: str, peer) -> None:
        if self._log.enabled:
            f = ("",) * 5 if m is None else (m.worker_id, m.seq, m.iteration, m.count, m.mask)
            self._log.write(
                (
                    f"{arrival:.6f}",
                    f"{start:.6f}",
                    "" if reply is None else f"{reply:.6f}",
                    op,
                    *f,
                    result,
                    self._peers.get(peer) or self._peers.setdefault(peer, f"{peer[0]}:{peer[1]}"),
                )
            )

    # --- requests ---

    def _handle(self, data: bytes, addr: Address, arrival: float) -> None:
        start = time.time()
        try:
            m = decode(data)
        except CodecError:
            self.counters["malformed"] += 1
            self._row(arrival, start, None, "?", None, "malformed", addr)
            return
        if m.op not in _OP_NAMES:
            result = "unknown_op"
        elif m.job_id != self.cfg.job_id:
            result = "unknown_job"
        elif m.op in (Op.PUSH, Op.PULL, Op.DONE) and m.worker_id >= self.cfg.n_workers:
            result = "bad_worker"
        elif m.op == Op.PUSH:
            if m.flags & FLAG_RETRANSMIT:
                self._loss_seen = self.cur
            result = self._on_push(m, addr)
        elif m.op == Op.PULL:
            if m.flags & FLAG_RETRANSMIT:
                self._loss_seen = self.cur
            result = self._on_pull(m, addr, arrival, start)
            if result == "replied":
                return  # logged by _answer_pull
        elif m.op == Op.DONE:
            result = self._on_done(m, addr, arrival, start)
        elif m.op == Op.COLLECT_REPLY:
            result = self._on_collect_reply(m)
        elif m.op == Op.WRITEBACK_ACK:
            cached, rejected = self._switch.on_writeback_ack(m)
            for key in cached:
                self.cache.written(key, m.iteration)
            for key in rejected:
                self.cache.rejected(key)
            self.hot.difference_update(rejected)
            result = "writeback_ack"
        else:
            result = "unexpected_op"
        if result in _MISCONFIGURED and not self.counters[result]:
            # workers would otherwise retransmit silently until their deadline
            print(f"ps: {_MISCONFIGURED[result]} (from {addr[0]}:{addr[1]}: {m})", file=sys.stderr)
        self.counters[result] += 1
        # DONEs are logged when DONE_ACK goes out; switch replies with their requests.
        if result not in ("barrier", "collect_reply", "writeback_ack"):
            replied = result in ("accepted", "dup", "reack")
            name = _OP_NAMES.get(m.op) or str(m.op)
            self._row(arrival, start, time.time() if replied else None, name, m, result, addr)

    def _keys_ok(self, keys: tuple[int, ...]) -> bool:
        n, shard, space = self.cfg.n_shards, self.cfg.shard, self.cfg.key_space
        if not keys:
            return True
        if max(keys) >= space:
            return False
        return n == 1 or all(k % n == shard for k in keys)

    def _on_push(self, m: Message, addr: Address) -> str:
        if m.seq == 0:
            return "malformed"
        d = self._dedup[m.worker_id]
        i = m.seq % DEDUP_WINDOW
        if d.seqs[i] == m.seq:
            self._send(self._ack(m, d.masks[i]), addr)
            return "dup"
        if d.seqs[i] > m.seq:
            return "stale"  # acked long ago (the worker's window moved past it)
        if m.iteration != self.cur or self.it.phase is not Phase.ACCUMULATING or self.finished:
            return "bad_iteration"  # cannot happen under BSP: not acked, not applied
        if not self._keys_ok(m.keys):
            return "bad_key"
        d.seqs[i], d.masks[i] = m.seq, m.mask
        self.it.cold_keys.extend(m.keys)
        self.it.cold_values.extend(m.values)
        self.counters["cold_entries"] += m.count
        self._send(self._ack(m, m.mask), addr)
        return "accepted"

    def _ack(self, m: Message, mask: int) -> bytes:
        return encode(Op.PUSH_ACK, m.job_id, m.worker_id, m.seq, m.iteration, mask=mask)

    def _on_pull(self, m: Message, addr: Address, arrival: float, start: float) -> str:
        if not self._keys_ok(m.keys):
            return "bad_key"
        writing_back = m.iteration == self.cur and self.it.phase is Phase.WRITING_BACK
        if m.iteration < self.cur or writing_back:
            # the parameters already hold later iterations: only a stale retransmission
            # asks this, and its worker has had its answer
            self.counters["late_pull"] += 1
            return "late"
        if m.iteration > self.cur:
            if len(self._held) >= self.cfg.max_held:
                self._held.popleft()
                self.counters["held_dropped"] += 1
            self._held.append((m, addr, arrival))
            return "held"
        self._answer_pull(m, addr, arrival, start)
        return "replied"

    def _answer_pull(self, m: Message, addr: Address, arrival: float, start: float) -> None:
        values = self.params.take(m.keys).tolist() if m.keys else []
        if values and (min(values) < INT32_MIN or max(values) > INT32_MAX):
            values = [min(max(v, INT32_MIN), INT32_MAX) for v in values]
            self.counters["saturated"] += 1
        # mask: the switch's cache-hit bits, plus the keys this PS knows the cache holds for
        # this iteration (acked WRITEBACKs), so that workers learn them as hot.
        mask, it, tag = m.mask, m.iteration, self.cache.tag
        if tag:
            # (in the barrier a refresh may already have moved the slot on to the next
            # iteration, unbeknown to this PS: only a stray resent pull comes then)
            switch_mask = m.mask if self.cfg.collect and not self.it.in_barrier else None
            for i, key in enumerate(m.keys):
                if tag.get(key) == it:  # self.cache.holds(key, it), on the hot path
                    if switch_mask is not None and not switch_mask >> i & 1:
                        # the switch passed it although it caches it for `it`: it has left
                        self.cache.not_served(key)
                        self.counters["evicted_not_served"] += 1
                    else:
                        mask |= 1 << i
        reply = encode(Op.PULL_REPLY, m.job_id, m.worker_id, m.seq, it, m.keys, values, mask=mask)
        self._send(reply, addr)
        self.counters["pull"] += 1
        self._row(arrival, start, time.time(), "PULL", m, "replied", addr)

    def _on_done(self, m: Message, addr: Address, arrival: float, start: float) -> str:
        if m.seq != self.cfg.shard:
            return "bad_shard"  # the worker's shard list disagrees with ours
        self._addr[m.worker_id] = addr
        if m.iteration < self.cur:
            self._send(self._done_ack(m.worker_id, m.iteration), addr)
            return "reack"
        if m.iteration > self.cur or self.finished:
            return "bad_iteration"
        done = self.it.done
        if m.worker_id in done:
            return "waiting"  # a resent DONE while others are still pushing
        done[m.worker_id] = (arrival, start)
        if len(done) == self.cfg.n_workers and self.it.phase is Phase.ACCUMULATING:
            self._finalize()
        return "barrier"

    def _done_ack(self, worker: int, iteration: int) -> bytes:
        # its entries: keys that left the switch's cache, announced at this release
        told = self._evicted_told if iteration == self._evicted_told_at else ()
        return encode(Op.DONE_ACK, self.cfg.job_id, worker, self.cfg.shard, iteration, told)

    # --- barrier: collect, apply, write back, release ---
    # COLLECT and WRITEBACK go through self._switch (hosts/switch_channel.py). DONE_ACK(t)
    # leaves as soon as the last WRITEBACK for t+1 is sent, without waiting for the acks: it
    # goes out on the same socket to the same first switch, which handles a port's frames in
    # order, so the cache is filled before any worker learns it may pull t+1. A WRITEBACK that
    # is lost, or ordered after a pull by some other path, only turns that pull into a miss the
    # PS answers.

    def _finalize(self) -> None:
        if not self.cfg.collect:
            self._apply()
            return
        it = self.it
        it.phase = Phase.COLLECTING
        # Ask the switch to move a cached key on to cur + 1 only if this PS holds no cold
        # part of it for cur: the switch then knows every contribution but those that went
        # to another slot, which the replies show (see _collected_elsewhere).
        cold = set(it.cold_keys)
        self.cache.not_summed(it.number, cold)
        refresh = self.cache.refreshable(it.number, cold)
        self._switch.start_collect(it.number, refresh)
        self._advance()

    def _advance(self) -> None:
        """Tick the switch channel and move the barrier on when its step is complete."""
        self._switch.tick()
        it = self.it
        if it.phase is Phase.COLLECTING and not self._switch.collecting():
            wrong = self._collected_elsewhere()
            if wrong:
                it.phase = Phase.INVALIDATING
                self._switch.start_invalidate(it.number, wrong)
            else:
                self._apply()
        elif it.phase is Phase.INVALIDATING and not self._switch.invalidating():
            self._apply()
        elif it.phase is Phase.WRITING_BACK and not self._switch.writeback_queued():
            self._release()

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

    def _on_collect_reply(self, m: Message) -> str:
        it = self.it
        collecting = it.phase in (Phase.COLLECTING, Phase.INVALIDATING)
        reply = self._switch.on_collect_reply(m, collecting)
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

    def _apply(self) -> None:
        """Apply iteration cur's cold and collected sums, then write back or release."""
        it = self.it
        if self._live is not None:
            self._live.begin(it.number)
        for keys, values, counts in (
            (it.cold_keys, it.cold_values, self.cold_count),
            (it.collected_keys, it.collected_sums, self.collected_count),
        ):
            if keys:
                k = np.array(keys, dtype=np.intp)
                np.subtract.at(self.params, k, np.array(values, dtype=np.int64))
                np.add.at(counts, k, 1)
        if self._live is not None:
            self._live.done(it.number)
        self.counters["collected_entries"] += len(it.collected_keys)
        it.cold_keys, it.cold_values = [], []
        it.collected_keys, it.collected_sums, it.collected_offsets = [], [], []
        if not (self.cfg.collect and self.cfg.writeback and self.hot):
            self._release()
            return
        # Keys the switch refreshed in this pass are cached for cur + 1 already.
        nxt, holds = self.cur + 1, self.cache.holds
        keys = np.array(sorted(k for k in self.hot if not holds(k, nxt)), dtype=np.intp)
        if not len(keys):
            self._release()
            return
        values = self.params[keys]
        fits = (values >= -(1 << 31)) & (values < 1 << 31)  # else the PS answers (saturated)
        self.counters["writeback_skipped"] += int((~fits).sum())
        it.phase = Phase.WRITING_BACK
        self._switch.start_writeback(self.cur + 1, keys[fits].tolist(), values[fits].tolist())
        if not self._switch.writeback_queued():
            self._release()

    def _release(self) -> None:
        """DONE_ACK(cur) to every worker, move to the next iteration, answer held pulls."""
        it = self.it
        it.phase = Phase.RELEASED
        now = time.time()
        # Workers that retransmit are losing packets: then a lost DONE_ACK, which costs a
        # worker a timeout and the whole job an iteration's wait, is made unlikely by a copy.
        copies = 2 if self._loss_seen and self.cur - self._loss_seen <= 2 else 1
        self._evicted_told_at = self.cur
        self._evicted_told = self.cache.take_evicted(MAX_ENTRIES, self.cur + 1)
        self.counters["evicted_told"] += len(self._evicted_told)
        for w, (arrival, start) in sorted(it.done.items()):
            ack = self._done_ack(w, self.cur)
            for _ in range(copies):
                self._send(ack, self._addr[w])
            m = Message(Op.DONE, 0, self.cfg.job_id, w, self.cfg.shard, self.cur, 0)
            self._row(arrival, start, now, "DONE", m, "barrier", self._addr[w])
        self.it = IterationState(it.number + 1)
        every = self.cfg.freq_every
        if every and it.number % every == 0:  # after the DONE_ACKs: off the barrier's path
            self._write_frequency(background=True)
        if self.cfg.iterations is not None and self.cur > self.cfg.iterations:
            self.finished = True
            self._cpu.append(cpu_usage())
        held, self._held = self._held, deque()
        for m, addr, arrival in held:
            if m.iteration <= self.cur:
                self._answer_pull(m, addr, arrival, time.time())
            else:
                self._held.append((m, addr, arrival))

    # --- outputs ---

    def summary(self) -> dict:
        cfg = self.cfg
        return {
            "job_id": cfg.job_id,
            "shard": cfg.shard,
            "shards": cfg.n_shards,
            "workers": cfg.n_workers,
            "keys": cfg.key_space,
            "collect": cfg.collect,
            "iterations_done": self.cur - 1,
            "finished": self.finished,
            "hot_keys": len(self.hot),
            "cpu": cpu_report(*self._cpu) if len(self._cpu) == 2 else None,
            "counters": dict(self.counters),
            "congestion": self._switch.describe() if cfg.collect else None,
            "params_sha256": params_sha256(self.params),
        }

    def _freq_meta(self) -> dict[str, int | str]:
        """The frequency file's fields that do not change while the PS runs."""
        cfg = self.cfg
        return {"job": cfg.job_id, "shard": f"{cfg.shard}/{cfg.n_shards}", "workers": cfg.n_workers}

    def _write_frequency(self, background: bool = False) -> None:
        """The frequency file of iterations < cur (read while running by the controller's
        online loop, controller/online/: hence written whole, then renamed).

        With `background` (the --freq-every rewrites) the counters are copied and the file
        is written by a thread, so the next iteration's pulls do not wait for it (tens of
        milliseconds with tens of thousands of keys); a rewrite still in flight is waited
        for first, so files are renamed into place in iteration order, the last one too."""
        if self._live is not None:
            return  # current since the last iteration's counts were added (_apply)
        cfg = self.cfg
        meta = {**self._freq_meta(), "iterations": self.cur - 1}
        if self._freq_writer is not None:
            self._freq_writer.join()
            self._freq_writer = None
            if self._freq_error is not None:  # the last rewrite failed: fail as it would have
                error, self._freq_error = self._freq_error, None
                raise error
        if not background:
            write_frequency(cfg.freq_path, self.cold_count, self.collected_count, meta)
            return
        cold, collected = self.cold_count.copy(), self.collected_count.copy()

        def write() -> None:
            try:
                write_frequency(cfg.freq_path, cold, collected, meta)
            except BaseException as e:  # raised in the PS's thread at the next write
                self._freq_error = e

        self._freq_writer = threading.Thread(target=write, name="freq-writer", daemon=True)
        self._freq_writer.start()

    def _write_outputs(self) -> None:
        cfg = self.cfg
        if cfg.params_path:
            save_params(cfg.params_path, self.params)
        if cfg.freq_path:
            self._write_frequency()
        if cfg.summary_path:
            write_json(cfg.summary_path, self.summary())


def build_parser() -> argparse.ArgumentParser:
    p = HelpParser(prog="python -m hosts.ps", description=__doc__.split("\n")[0])
    p.add_argument("--job", type=int, required=True, help="job id (0..65535)")
    p.add_argument("--workers", type=positive_int, required=True, help="workers in the job")
    p.add_argument("--keys", type=positive_int, required=True, help="key space")
    p.add_argument("--iterations", type=positive_int, help="stop after these (default: serve)")
    p.add_argument(
        "--bind", default=f"127.0.0.1:{HOTAGG_PORT}", help="ip[:port] (default loopback)"
    )
    p.add_argument("--shard", default="0/1", help="this shard / number of shards, e.g. 1/2")
    p.add_argument("--collect", action="store_true", help="collect sums from a switch")
    p.add_argument("--switch", help=f"switch service address ip[:port] (port {HOTAGG_PORT})")
    p.add_argument("--hot-slots", type=int, default=0, help="the job's slot_count")
    p.add_argument("--no-writeback", action="store_true", help="do not fill the switch cache")
    p.add_argument(
        "--hot-keys",
        help="CSV key,offset of the keys made hot (from the controller): their cache is "
        "filled before iteration 1",
    )
    p.add_argument(
        "--rto",
        type=float,
        default=0.002,
        help="minimum COLLECT retransmit timeout, s (it adapts to the measured RTT)",
    )
    p.add_argument(
        "--collect-retries",
        type=int,
        help="give a COLLECT up after this many resends (default: never, the deadline bounds "
        "the run; giving up loses the switch's sums, so the result is no longer exact)",
    )
    p.add_argument("--linger", type=float, default=1.0, help="idle seconds before exiting")
    p.add_argument(
        "--deadline",
        type=float,
        default=900.0,
        help="give up after this many seconds, exit 3 (0: never; default 900)",
    )
    p.add_argument("--log", help="request log CSV")
    p.add_argument(
        "--freq",
        help="key frequency statistics file (CSV; binary when it ends in .npz; a .live path "
        "holds the counters themselves while running, for the controller's online loop)",
    )
    p.add_argument(
        "--freq-every",
        type=int,
        default=0,
        metavar="N",
        help="rewrite --freq every N iterations while running, for the controller's online "
        "loop (`hotagg-ctl hotkeys auto --freq`; default 0: only at exit). Give it a .npz "
        "path: a CSV of tens of thousands of keys costs tens of ms to write and read. A "
        ".live --freq needs no rewrites",
    )
    p.add_argument("--params", help="final parameters .npy")
    p.add_argument("--summary", help="summary JSON")
    return p


def main(argv: list[str] | None = None) -> int:
    """Exit codes: 0 done, 1 error, 2 bad arguments, 3 deadline exceeded, 4 interrupted."""
    args = build_parser().parse_args(argv)
    try:
        if args.switch and not args.collect:
            raise AgentError("--switch without --collect: add --collect to use the switch")
        shard, _, n_shards = args.shard.partition("/")
        if not (shard.isdigit() and n_shards.isdigit()):
            raise AgentError(f"--shard {args.shard!r}: expected INDEX/COUNT, e.g. 0/2")
        try:
            hot_keys = load_hot_keys(args.hot_keys) if args.hot_keys else None
        except ValueError as exc:
            raise AgentError(str(exc)) from None
        cfg = PSConfig(
            job_id=args.job,
            hot_keys=hot_keys,
            n_workers=args.workers,
            key_space=args.keys,
            iterations=args.iterations,
            bind=parse_address(args.bind, HOTAGG_PORT),
            shard=int(shard),
            n_shards=int(n_shards),
            collect=args.collect,
            switch=parse_address(args.switch, HOTAGG_PORT) if args.switch else None,
            hot_slots=args.hot_slots,
            writeback=not args.no_writeback,
            rto=args.rto,
            rto_max=max(args.rto, 0.4),
            collect_retries=args.collect_retries,
            linger=args.linger,
            deadline=args.deadline or None,
            log_path=args.log,
            freq_path=args.freq,
            freq_every=args.freq_every,
            params_path=args.params,
            summary_path=args.summary,
        )
        ps = ParameterServer(cfg)
    except AgentError as exc:
        print(f"ps: {exc}", file=sys.stderr)
        return 2
    install_stop_signals(ps.stop)
    print(f"ps: listening on {ps.address[0]}:{ps.address[1]}", flush=True)
    try:
        summary = ps.run()
    except (DeadlineExceeded, Interrupted) as exc:
        print(f"ps: {exc}", file=sys.stderr)
        return 3 if isinstance(exc, DeadlineExceeded) else 4
    except OSError as exc:  # e.g. an output file that cannot be written
        print(f"ps: {exc}", file=sys.stderr)
        return 1
    finally:
        ps.close()
    print(json.dumps(summary, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
