"""The parameter-server agent (docs/design.md section 3): one shard of one job.

Parameters are fixed-point int64 over the key space; this shard owns key % n_shards == shard.
- PUSH: deduplicated by (worker, seq) in a 64-seq window like the switch's (the worker's
  sliding window guarantees a newer seq in a window position means the older one was acked);
  duplicates are re-acked with the mask stored for the seq, never applied twice. First-time
  pushes of the current iteration are buffered and applied at the barrier, so every pull for
  iteration t sees exactly iterations < t. The PUSH_ACK echoes the mask the switch set.
- PULL for t: answered once iterations < t are applied, else held. The reply echoes the
  request's mask (the switch's cache-hit bitmap); values are int64 clamped to int32.
- DONE(t) from every worker: COLLECT iteration t from the switch (offsets 0..hot_slots-1,
  MAX_ENTRIES per packet, lost replies re-asked, given up after `collect_retries`), apply cold
  and collected sums, WRITEBACK the new values of the hot keys tagged t+1 (sent once each;
  acks awaited up to one rto), DONE_ACK(t) to all workers (and again to any later DONE(t)).
- Hot keys (for WRITEBACK) are the keys this shard collected; a key leaves the set when a
  WRITEBACK_ACK has its mask bit clear. Values beyond int32 are not written back.
Server-only mode (collect off) skips COLLECT and WRITEBACK.
Choices beyond the design: every shard collects all of the job's slots and keeps only its own
keys; DONE.seq must equal this shard's index (the worker's shard list must match ours).

    python -m hosts.ps --job 1 --workers 4 --keys 100000 --iterations 20 \
        --bind 10.0.0.10:18497 --collect --switch 10.0.0.254 --hot-slots 256 \
        --log ps.csv --freq freq.csv --params params.npy --summary ps.json
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass

import numpy as np

from hosts.agent import (
    RECV_SIZE,
    Address,
    AgentError,
    Deadline,
    DeadlineExceeded,
    Interrupted,
    install_stop_signals,
    open_udp,
    parse_address,
    positive_int,
)
from hosts.codec import CodecError, Message, decode, encode, saturate_int32
from hosts.protocol import (
    DEDUP_WINDOW,
    FLAG_RETRANSMIT,
    HOTAGG_PORT,
    MAX_ENTRIES,
    MAX_WORKERS,
    NUM_SLOTS,
    Op,
)
from hosts.stats import CsvLog, params_sha256, save_params, write_frequency, write_json

# Request log (--log): one row per request received (and per COLLECT/WRITEBACK sent).
# arrival = wall clock (s) when the datagram was read, start = when its handling began (the PS
# drains up to _BATCH datagrams per wake-up, so start - arrival is queueing in the PS), reply =
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
    rto: float = 0.05
    rto_max: float = 0.4
    collect_retries: int = 10
    collect_window: int = 64
    linger: float = 1.0  # after the last iteration, keep re-acking DONEs until idle this long
    max_held: int = 65536
    deadline: float | None = None
    log_path: str | None = None
    freq_path: str | None = None
    params_path: str | None = None
    summary_path: str | None = None

    def validate(self) -> None:
        if not 0 <= self.job_id < 1 << 16:
            raise AgentError(f"job id {self.job_id} must be 0..65535")
        if not 1 <= self.n_workers <= MAX_WORKERS:
            raise AgentError(f"workers must be 1..{MAX_WORKERS}")
        if self.key_space < 1 or not 0 <= self.shard < self.n_shards:
            raise AgentError("key space >= 1 and 0 <= shard < shards are required")
        if self.collect and (self.switch is None or not 1 <= self.hot_slots <= NUM_SLOTS):
            raise AgentError(f"collect needs --switch and --hot-slots 1..{NUM_SLOTS}")
        if self.rto <= 0 or self.rto_max < self.rto or self.collect_retries < 0:
            raise AgentError("0 < rto <= rto_max and collect_retries >= 0 are required")


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
        self.cold_count = np.zeros(n, dtype=np.int64)
        self.collected_count = np.zeros(n, dtype=np.int64)
        self.counters: Counter[str] = Counter()
        self.hot: set[int] = set()
        self.cur = 1  # the iteration being accumulated; iterations < cur are applied
        self.finished = False
        self._dedup = [_Dedup() for _ in range(config.n_workers)]
        self._done: dict[int, tuple[float, float]] = {}  # worker -> (arrival, start) of DONE(cur)
        self._addr: dict[int, Address] = {}
        self._cold: tuple[list[int], list[int]] = ([], [])
        self._collected: tuple[list[int], list[int]] = ([], [])
        self._held: deque[tuple[Message, Address, float]] = deque()
        self._phase: str | None = None  # "collect" / "writeback" while the barrier runs
        self._queue: deque[tuple] = deque()
        self._inflight: dict[int, list] = {}  # seq -> [item, sent, due, tries]
        self._ctl_seq = 1
        self._stop = threading.Event()
        self._warned_lost = False
        self.sock = open_udp(config.bind)
        self.address: Address = self.sock.getsockname()

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
        last_rx = finished_at = time.perf_counter()
        try:
            while not self._stop.is_set():
                deadline.check()
                timeout = 0.2
                if self._phase and self._inflight:
                    due = min(c[2] for c in self._inflight.values())
                    timeout = min(timeout, max(0.0, due - time.perf_counter()))
                batch = self._recv_batch(deadline.remaining(timeout))
                if batch:
                    last_rx = time.perf_counter()
                for data, addr, arrival in batch:
                    was_finished = self.finished
                    self._handle(data, addr, arrival)
                    if self.finished and not was_finished:
                        finished_at = time.perf_counter()
                if self._phase:
                    self._phase_tick()
                if self.finished and time.perf_counter() - max(last_rx, finished_at) >= cfg.linger:
                    break
            if not self.finished and cfg.iterations is not None:
                raise Interrupted(f"PS shard {cfg.shard} stopped in iteration {self.cur}")
            return self.summary()
        finally:
            self._log.close()
            self._write_outputs()

    def _recv_batch(self, timeout: float) -> list[tuple[bytes, Address, float]]:
        out: list[tuple[bytes, Address, float]] = []
        self.sock.settimeout(timeout)
        while len(out) < _BATCH:
            try:
                data, addr = self.sock.recvfrom(RECV_SIZE)
            except (TimeoutError, BlockingIOError, InterruptedError):
                break
            except OSError:  # an ICMP error surfaced on the socket: nothing to read
                self.counters["recv_errors"] += 1
                break
            out.append((data, addr, time.time()))
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
                    f"{peer[0]}:{peer[1]}",
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
        if not 1 <= m.op <= len(Op):
            result = "unknown_op"
        elif m.job_id != self.cfg.job_id:
            result = "unknown_job"
        elif m.op in (Op.PUSH, Op.PULL, Op.DONE) and m.worker_id >= self.cfg.n_workers:
            result = "bad_worker"
        elif m.op == Op.PUSH:
            result = self._on_push(m, addr)
        elif m.op == Op.PULL:
            result = self._on_pull(m, addr, arrival, start)
            if result == "replied":
                return  # logged by _answer_pull
        elif m.op == Op.DONE:
            result = self._on_done(m, addr, arrival, start)
        elif m.op == Op.COLLECT_REPLY:
            result = self._on_collect_reply(m)
        elif m.op == Op.WRITEBACK_ACK:
            result = self._on_writeback_ack(m)
        else:
            result = "unexpected_op"
        self.counters[result] += 1
        # DONEs are logged when DONE_ACK goes out; switch replies with their requests.
        if result not in ("barrier", "collect_reply", "writeback_ack"):
            replied = result in ("accepted", "dup", "reack")
            name = Op(m.op).name if 1 <= m.op <= len(Op) else str(m.op)
            self._row(arrival, start, time.time() if replied else None, name, m, result, addr)

    def _keys_ok(self, keys: tuple[int, ...]) -> bool:
        n, shard, space = self.cfg.n_shards, self.cfg.shard, self.cfg.key_space
        return all(k < space and k % n == shard for k in keys)

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
        if m.iteration != self.cur or self._phase or self.finished:
            return "bad_iteration"  # cannot happen under BSP: not acked, not applied
        if not self._keys_ok(m.keys):
            return "bad_key"
        d.seqs[i], d.masks[i] = m.seq, m.mask
        self._cold[0].extend(m.keys)
        self._cold[1].extend(m.values)
        self.counters["cold_entries"] += m.count
        self._send(self._ack(m, m.mask), addr)
        return "accepted"

    def _ack(self, m: Message, mask: int) -> bytes:
        return encode(Op.PUSH_ACK, m.job_id, m.worker_id, m.seq, m.iteration, mask=mask)

    def _on_pull(self, m: Message, addr: Address, arrival: float, start: float) -> str:
        if not self._keys_ok(m.keys):
            return "bad_key"
        if m.iteration > self.cur:
            if len(self._held) >= self.cfg.max_held:
                self._held.popleft()
                self.counters["held_dropped"] += 1
            self._held.append((m, addr, arrival))
            return "held"
        self._answer_pull(m, addr, arrival, start)
        return "replied"

    def _answer_pull(self, m: Message, addr: Address, arrival: float, start: float) -> None:
        raw = self.params[list(m.keys)]
        values = saturate_int32(raw)
        if m.count and not np.array_equal(raw, values):
            self.counters["saturated"] += 1
        reply = encode(
            Op.PULL_REPLY, m.job_id, m.worker_id, m.seq, m.iteration, m.keys, values, mask=m.mask
        )
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
        if m.worker_id in self._done:
            return "waiting"  # a resent DONE while others are still pushing
        self._done[m.worker_id] = (arrival, start)
        if len(self._done) == self.cfg.n_workers and not self._phase:
            self._finalize()
        return "barrier"

    def _done_ack(self, worker: int, iteration: int) -> bytes:
        return encode(Op.DONE_ACK, self.cfg.job_id, worker, self.cfg.shard, iteration)

    # --- barrier: collect, apply, write back, release ---
    # COLLECT and WRITEBACK go to the switch as a paced phase: at most collect_window packets
    # in flight; a COLLECT is asked again up to collect_retries times, a WRITEBACK is sent once
    # (its loss only costs cache hits) and the phase waits one rto for its ack, so the cache is
    # filled before DONE_ACK lets the workers pull iteration t+1.

    def _finalize(self) -> None:
        if self.cfg.collect:
            offsets = list(range(self.cfg.hot_slots))
            chunks = [
                (offsets[i : i + MAX_ENTRIES], None) for i in range(0, len(offsets), MAX_ENTRIES)
            ]
            self._start_phase("collect", chunks)
        else:
            self._apply()

    def _start_phase(self, phase: str, items: list[tuple[list[int], list[int] | None]]) -> None:
        self._phase, self._queue = phase, deque(items)
        self._phase_tick()

    def _phase_packet(self, seq: int, item: tuple, flags: int = 0) -> bytes:
        op, it = (
            (Op.COLLECT, self.cur) if self._phase == "collect" else (Op.WRITEBACK, self.cur + 1)
        )
        return encode(op, self.cfg.job_id, self.cfg.shard, seq, it, item[0], item[1], flags=flags)

    def _phase_tick(self) -> None:
        cfg, now, phase = self.cfg, time.perf_counter(), self._phase
        retries = cfg.collect_retries if phase == "collect" else 0
        for seq, c in list(self._inflight.items()):
            if c[2] > now:
                continue
            if c[3] >= retries:
                del self._inflight[seq]
                self.counters[f"{phase}_unanswered"] += 1
                self._row(c[1], c[1], None, phase.upper(), None, "unanswered", cfg.switch)
                if phase == "collect" and not self._warned_lost:
                    self._warned_lost = True
                    print(
                        f"PS shard {cfg.shard}: COLLECT to {cfg.switch[0]}:{cfg.switch[1]} "
                        f"unanswered after {retries} retries; iteration {self.cur} may miss "
                        "switch sums (is the switch there?)",
                        file=sys.stderr,
                    )
                continue
            c[3] += 1
            c[2] = now + min(cfg.rto * 2 ** c[3], cfg.rto_max)
            self._send(self._phase_packet(seq, c[0], FLAG_RETRANSMIT), cfg.switch)
            self.counters[f"{phase}_retransmits"] += 1
        while self._queue and len(self._inflight) < cfg.collect_window:
            item, seq = self._queue.popleft(), self._ctl_seq
            self._ctl_seq += 1
            self._inflight[seq] = [item, time.time(), now + cfg.rto, 0]
            self._send(self._phase_packet(seq, item), cfg.switch)
            self.counters[f"{phase}_sent"] += 1
        if not self._queue and not self._inflight:
            self._phase = None
            if phase == "collect":
                self._apply()
            else:
                self._release()

    def _on_collect_reply(self, m: Message) -> str:
        c = self._inflight.get(m.seq) if self._phase == "collect" else None
        if c is None or m.iteration != self.cur:
            return "late_reply"
        if m.count != len(c[0][0]):
            return "bad_reply"  # left in flight: asked again
        del self._inflight[m.seq]
        space, n, shard = self.cfg.key_space, self.cfg.n_shards, self.cfg.shard
        for i, (key, value) in enumerate(zip(m.keys, m.values)):
            if not m.mask >> i & 1:
                continue
            if key >= space:
                self.counters["collect_bad_key"] += 1
            elif key % n != shard:
                self.counters["collect_other_shard"] += 1  # another shard's PS takes it
            else:
                self._collected[0].append(key)
                self._collected[1].append(value)
                self.hot.add(key)
        self._row(c[1], c[1], time.time(), "COLLECT", m, "collected", self.cfg.switch)
        return "collect_reply"

    def _apply(self) -> None:
        """Apply iteration cur's cold and collected sums, then write back or release."""
        for (keys, values), counts in (
            (self._cold, self.cold_count),
            (self._collected, self.collected_count),
        ):
            if keys:
                k = np.array(keys, dtype=np.intp)
                np.subtract.at(self.params, k, np.array(values, dtype=np.int64))
                np.add.at(counts, k, 1)
        self.counters["collected_entries"] += len(self._collected[0])
        self._cold, self._collected = ([], []), ([], [])
        if not (self.cfg.collect and self.cfg.writeback and self.hot):
            self._release()
            return
        keys = np.array(sorted(self.hot), dtype=np.intp)
        values = self.params[keys]
        fits = (values >= -(1 << 31)) & (values < 1 << 31)  # else the PS answers (saturated)
        self.counters["writeback_skipped"] += int((~fits).sum())
        keys, values = keys[fits].tolist(), values[fits].tolist()
        step = MAX_ENTRIES
        items = [(keys[i : i + step], values[i : i + step]) for i in range(0, len(keys), step)]
        self._start_phase("writeback", items)

    def _on_writeback_ack(self, m: Message) -> str:
        for i, key in enumerate(m.keys):
            if m.mask >> i & 1:
                self.counters["writeback_cached"] += 1
            else:
                self.hot.discard(key)  # the switch no longer holds it: stop writing it back
                self.counters["writeback_rejected"] += 1
        c = self._inflight.pop(m.seq, None) if self._phase == "writeback" else None
        if c is not None:
            self._row(c[1], c[1], time.time(), "WRITEBACK", m, "cached", self.cfg.switch)
        return "writeback_ack"

    def _release(self) -> None:
        """DONE_ACK(cur) to every worker, move to the next iteration, answer held pulls."""
        now = time.time()
        for w, (arrival, start) in sorted(self._done.items()):
            self._send(self._done_ack(w, self.cur), self._addr[w])
            m = Message(Op.DONE, 0, self.cfg.job_id, w, self.cfg.shard, self.cur, 0)
            self._row(arrival, start, now, "DONE", m, "barrier", self._addr[w])
        self._done.clear()
        self.cur += 1
        if self.cfg.iterations is not None and self.cur > self.cfg.iterations:
            self.finished = True
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
            "counters": dict(self.counters),
            "params_sha256": params_sha256(self.params),
        }

    def _write_outputs(self) -> None:
        cfg = self.cfg
        if cfg.params_path:
            save_params(cfg.params_path, self.params)
        if cfg.freq_path:
            meta = {
                "job": cfg.job_id,
                "shard": f"{cfg.shard}/{cfg.n_shards}",
                "workers": cfg.n_workers,
                "iterations": self.cur - 1,
            }
            write_frequency(cfg.freq_path, self.cold_count, self.collected_count, meta)
        if cfg.summary_path:
            write_json(cfg.summary_path, self.summary())


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m hosts.ps", description=__doc__.split("\n")[0])
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
    p.add_argument("--rto", type=float, default=0.05, help="COLLECT retransmit timeout, s")
    p.add_argument("--collect-retries", type=int, default=10)
    p.add_argument("--linger", type=float, default=1.0, help="idle seconds before exiting")
    p.add_argument(
        "--deadline",
        type=float,
        default=900.0,
        help="give up after this many seconds, exit 3 (0: never; default 900)",
    )
    p.add_argument("--log", help="request log CSV")
    p.add_argument("--freq", help="key frequency statistics file")
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
        cfg = PSConfig(
            job_id=args.job,
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
