"""The worker agent: BSP pull / compute / push / DONE per iteration (docs/design.md section 3).

Per iteration t: PULL the workload's keys for t, compute the step from the pulled values, PUSH
its entries (one seq per packet from 1, never reused; a sliding window of DEDUP_WINDOW seqs, so
seq s is sent only while every seq <= s - 64 is acked; unacked packets are resent with the
RETRANSMIT flag), then DONE(t) to every shard until each answers DONE_ACK(t).

Keys the switch aggregated (PUSH_ACK mask bit set) are "hot"; a cleared bit makes a key cold
again. Hot keys travel in their own PULL and PUSH packets, so the switch can answer a whole
pull from its cache and ack a whole push without involving the PS.

Choices beyond the design: a PULL's `seq` is a per-worker pull request number (its own space,
echoed in the reply); a DONE's `seq` is the index of the shard it is sent to (echoed in
DONE_ACK), and shard i owns the keys with key % n_shards == i.

    python -m hosts.worker --job 1 --worker-id 0 --ps 10.0.0.1:18497 --iterations 20 \
        --workload zipf --keys 100000 --skew 1.1 --log w0.csv --summary w0.json
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from hosts import workloads
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
from hosts.codec import CodecError, Message, decode, encode
from hosts.protocol import (
    DEDUP_WINDOW,
    FLAG_FROM_SWITCH,
    FLAG_RETRANSMIT,
    HOTAGG_PORT,
    MAX_ENTRIES,
    MAX_WORKERS,
    Op,
)
from hosts.stats import CsvLog, write_json

# Request log (--log): one row per completed request. kind = pull | push | done | iteration;
# seq = push seq / pull number / shard index; hot = entries the worker believed hot when it
# sent them; sent/reply = wall clock (s) of the first send and of the reply; latency_us from a
# monotonic clock; retransmits; from_switch = the reply carried FROM_SWITCH; mask = reply mask;
# loss only on `iteration` rows (whose sent/reply span the whole iteration).
LOG_COLUMNS = (
    "kind",
    "iteration",
    "seq",
    "shard",
    "entries",
    "hot",
    "sent",
    "reply",
    "latency_us",
    "retransmits",
    "from_switch",
    "mask",
    "loss",
)


@dataclass
class WorkerConfig:
    job_id: int
    worker_id: int
    ps: list[Address]  # shard i's address at index i
    iterations: int
    bind: Address = ("127.0.0.1", 0)
    rto: float = 0.05  # minimum retransmission timeout (it adapts to the measured RTT)
    rto_max: float = 1.0  # cap, also for the doubling per retry
    window: int = DEDUP_WINDOW
    group_hot: bool = True
    deadline: float | None = None
    log_path: str | None = None
    summary_path: str | None = None
    progress: bool = False  # one flushed stdout line per finished iteration (for runners)

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


@dataclass
class _Request:
    id: int  # seq (push, pull) or shard index (done)
    shard: int
    data: bytes
    keys: tuple[int, ...] = ()
    index: np.ndarray | None = None  # pull: positions of `keys` in the pulled array
    hot: int = 0
    sent: float = 0.0
    start: float = 0.0
    due: float = 0.0
    tries: int = 0


@dataclass
class WorkerResult:
    iterations: int
    losses: list[float | None]
    counters: dict[str, int]
    hot_keys: int
    elapsed: float


class Worker:
    def __init__(self, config: WorkerConfig, workload: workloads.Workload) -> None:
        config.validate()
        self.cfg, self.workload = config, workload
        self.hot: set[int] = set()
        self.counters: Counter[str] = Counter()
        self._stop = threading.Event()
        self._next_seq = 1
        self._next_pull = 1
        self._n_shards = len(config.ps)
        self._srtt: float | None = None  # smoothed RTT and its variation (RFC 6298 style)
        self._rttvar = 0.0
        self.sock = open_udp(config.bind)
        self.address: Address = self.sock.getsockname()

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        self.sock.close()

    def run(self) -> WorkerResult:
        """Run all iterations; raises DeadlineExceeded or Interrupted if it cannot finish."""
        cfg = self.cfg
        self._deadline = Deadline(cfg.deadline, f"worker {cfg.worker_id}")
        self._log = CsvLog(cfg.log_path, LOG_COLUMNS)
        losses: list[float | None] = []
        begin = time.perf_counter()
        try:
            for t in range(1, cfg.iterations + 1):
                t_wall, t0 = time.time(), time.perf_counter()
                keys = np.asarray(self.workload.pull_keys(cfg.worker_id, t), dtype=np.uint64)
                pulled = self._pull(t, keys)
                step = self.workload.step(cfg.worker_id, t, keys, pulled)
                self._push(t, np.asarray(step.keys, np.uint64), np.asarray(step.values, np.int32))
                self._done(t)
                losses.append(step.loss)
                self._log.write(
                    (
                        "iteration",
                        t,
                        "",
                        "",
                        len(step.keys),
                        "",
                        f"{t_wall:.6f}",
                        f"{time.time():.6f}",
                        f"{(time.perf_counter() - t0) * 1e6:.1f}",
                        "",
                        "",
                        "",
                        "" if step.loss is None else repr(step.loss),
                    )
                )
                if cfg.progress:
                    print(f"progress {t}/{cfg.iterations}", flush=True)
            result = WorkerResult(
                cfg.iterations,
                losses,
                dict(self.counters),
                len(self.hot),
                time.perf_counter() - begin,
            )
            if cfg.summary_path:
                write_json(cfg.summary_path, self.summary(result))
            return result
        finally:
            self._log.close()

    def summary(self, r: WorkerResult) -> dict:
        return {
            "worker_id": self.cfg.worker_id,
            "job_id": self.cfg.job_id,
            "iterations": r.iterations,
            "elapsed_s": r.elapsed,
            "losses": r.losses,
            "counters": r.counters,
            "hot_keys": r.hot_keys,
            "workload": self.workload.describe(),
        }

    # --- grouping ---

    def _groups(self, keys: np.ndarray):
        """Yield (shard, hot, positions) chunks of at most MAX_ENTRIES keys each."""
        shard_of = keys % np.uint64(self._n_shards)
        if self.cfg.group_hot and self.hot:
            is_hot = np.fromiter((k in self.hot for k in keys.tolist()), bool, len(keys))
        else:
            is_hot = np.zeros(len(keys), bool)
        for shard in range(self._n_shards):
            in_shard = shard_of == shard
            for hot in (True, False):
                pos = np.flatnonzero(in_shard & (is_hot == hot))
                for i in range(0, len(pos), MAX_ENTRIES):
                    yield shard, hot, pos[i : i + MAX_ENTRIES]

    # --- the three exchanges of an iteration ---

    def _pull(self, t: int, keys: np.ndarray) -> np.ndarray:
        pulled = np.zeros(len(keys), dtype=np.int32)
        reqs = []
        for shard, hot, pos in self._groups(keys):
            seq, self._next_pull = self._next_pull, self._next_pull + 1
            k = tuple(keys[pos].tolist())
            data = encode(Op.PULL, self.cfg.job_id, self.cfg.worker_id, seq, t, k)
            reqs.append(_Request(seq, shard, data, k, pos, len(k) if hot else 0))

        def on_reply(req: _Request, m: Message) -> bool:
            if m.iteration != t or m.keys != req.keys:
                return False
            pulled[req.index] = m.values
            self.counters["pull_switch_hits" if m.flags & FLAG_FROM_SWITCH else "pull_ps"] += 1
            return True

        self._transfer("pull", t, reqs, Op.PULL_REPLY, on_reply)
        return pulled

    def _push(self, t: int, keys: np.ndarray, values: np.ndarray) -> None:
        reqs = []
        for shard, hot, pos in self._groups(keys):
            seq, self._next_seq = self._next_seq, self._next_seq + 1
            k = tuple(keys[pos].tolist())
            data = encode(Op.PUSH, self.cfg.job_id, self.cfg.worker_id, seq, t, k, values[pos])
            reqs.append(_Request(seq, shard, data, k, None, len(k) if hot else 0))

        def on_reply(req: _Request, m: Message) -> bool:
            if m.iteration != t:
                return False
            for i, key in enumerate(req.keys):
                if m.mask >> i & 1:
                    self.hot.add(key)
                else:
                    self.hot.discard(key)
            self.counters["push_switch_acks" if m.flags & FLAG_FROM_SWITCH else "push_ps"] += 1
            return True

        self._transfer("push", t, reqs, Op.PUSH_ACK, on_reply)

    def _done(self, t: int) -> None:
        reqs = [
            _Request(s, s, encode(Op.DONE, self.cfg.job_id, self.cfg.worker_id, s, t))
            for s in range(self._n_shards)
        ]
        self._transfer("done", t, reqs, Op.DONE_ACK, lambda _r, m: m.iteration == t)

    # --- reliable request/reply engine ---

    def _transfer(
        self,
        kind: str,
        t: int,
        reqs: list[_Request],
        reply_op: Op,
        on_reply: Callable[[_Request, Message], bool],
    ) -> None:
        """Send `reqs` (ids increasing) with a sliding window over ids, resend on timeout,
        and hand each matching reply to `on_reply` until every request is answered."""
        cfg = self.cfg
        pending = deque(reqs)
        inflight: dict[int, _Request] = {}  # insertion order = id order: first = lowest unacked
        while pending or inflight:
            if self._stop.is_set():
                raise Interrupted(f"worker {cfg.worker_id} stopped in iteration {t}")
            self._deadline.check()
            now = time.perf_counter()
            while pending and (not inflight or pending[0].id < next(iter(inflight)) + cfg.window):
                r = pending.popleft()
                self._send(r.data, r.shard)
                r.sent, r.start, r.due = time.time(), now, now + self._rto()
                inflight[r.id] = r
                self.counters[f"{kind}_sent"] += 1
            m = self._recv(min(r.due for r in inflight.values()) - now)
            if m is not None:
                if m.op != reply_op:
                    self.counters["stray_replies"] += 1
                else:
                    r = inflight.get(m.seq)
                    if r is not None and on_reply(r, m):
                        del inflight[m.seq]
                        done = time.perf_counter()
                        if r.tries == 0 and kind != "done":  # DONE waits for the barrier
                            self._sample_rtt(done - r.start)
                        self._log.write(
                            (
                                kind,
                                t,
                                r.id,
                                r.shard,
                                len(r.keys),
                                r.hot,
                                f"{r.sent:.6f}",
                                f"{time.time():.6f}",
                                f"{(done - r.start) * 1e6:.1f}",
                                r.tries,
                                int(bool(m.flags & FLAG_FROM_SWITCH)),
                                m.mask,
                                "",
                            )
                        )
                    else:
                        self.counters["late_replies"] += 1
            now = time.perf_counter()
            for r in inflight.values():
                if r.due <= now:
                    r.tries += 1
                    r.due = now + min(self._rto() * (2**r.tries), cfg.rto_max)
                    data = bytearray(r.data)
                    data[2] |= FLAG_RETRANSMIT
                    self._send(bytes(data), r.shard)
                    self.counters[f"{kind}_retransmits"] += 1

    def _sample_rtt(self, rtt: float) -> None:
        if self._srtt is None:
            self._srtt, self._rttvar = rtt, rtt / 2
        else:
            self._rttvar = 0.75 * self._rttvar + 0.25 * abs(self._srtt - rtt)
            self._srtt = 0.875 * self._srtt + 0.125 * rtt

    def _rto(self) -> float:
        if self._srtt is None:
            return self.cfg.rto
        return max(self.cfg.rto, min(self.cfg.rto_max, self._srtt + 4 * self._rttvar))

    def _send(self, data: bytes, shard: int) -> None:
        try:
            self.sock.sendto(data, self.cfg.ps[shard])
        except OSError as exc:  # e.g. ENOBUFS or no route: a lost packet, resent on timeout
            self.counters["send_errors"] += 1
            if self.counters["send_errors"] == 1:
                print(f"worker {self.cfg.worker_id}: send failed: {exc}", file=sys.stderr)

    def _recv(self, timeout: float) -> Message | None:
        # Wake at least every 0.2 s to notice stop() and the deadline.
        self.sock.settimeout(self._deadline.remaining(min(max(timeout, 0.0), 0.2)))
        try:
            data = self.sock.recv(RECV_SIZE)
        except (TimeoutError, BlockingIOError):
            return None
        except OSError:  # e.g. ECONNREFUSED surfaced by ICMP: treat as loss
            self.counters["recv_errors"] += 1
            return None
        try:
            m = decode(data)
        except CodecError:
            self.counters["malformed"] += 1
            return None
        if m.job_id != self.cfg.job_id or m.worker_id != self.cfg.worker_id:
            self.counters["foreign"] += 1
            return None
        return m


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m hosts.worker", description=__doc__.split("\n")[0])
    p.add_argument("--job", type=int, required=True, help="job id (0..65535)")
    p.add_argument("--worker-id", type=int, required=True, help=f"0..{MAX_WORKERS - 1}")
    p.add_argument("--ps", required=True, help="PS shard addresses ip[:port],... in shard order")
    p.add_argument("--iterations", type=positive_int, required=True)
    p.add_argument("--bind", default="127.0.0.1:0", help="local ip:port (default 127.0.0.1:0)")
    p.add_argument("--rto", type=float, default=0.05, help="minimum retransmit timeout, s")
    p.add_argument("--rto-max", type=float, default=1.0, help="retransmit timeout cap, s")
    p.add_argument("--no-group-hot", action="store_true", help="mix hot and cold keys")
    p.add_argument(
        "--deadline",
        type=float,
        default=900.0,
        help="give up after this many seconds, exit 3 (0: never; default 900)",
    )
    p.add_argument("--log", help="per-request latency CSV")
    p.add_argument("--summary", help="summary JSON")
    p.add_argument("--progress", action="store_true", help="print 'progress t/T' per iteration")
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
            group_hot=not args.no_group_hot,
            deadline=args.deadline or None,
            log_path=args.log,
            summary_path=args.summary,
            progress=args.progress,
        )
        worker = Worker(cfg, workloads.from_args(args))
    except (AgentError, workloads.WorkloadError) as exc:
        print(f"worker: {exc}", file=sys.stderr)
        return 2
    install_stop_signals(worker.stop)
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
