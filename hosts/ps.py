"""The parameter-server agent (docs/design.md section 3): one shard of one job.

Parameters are fixed-point int64 over the key space; this shard owns key % n_shards == shard.
Workers PUSH their updates and PULL parameters; once every worker's DONE(t) is in, the
barrier COLLECTs iteration t's sums from the switch (offsets 0..hot_slots-1, MAX_ENTRIES per
packet; a lost reply is asked again after an RTT-based timeout, or at once when a later
COLLECT is answered first, until answered: giving up would lose the switch's sums, so only
an explicit `collect_retries` does that), applies cold and collected sums, WRITEBACKs the
new values of the hot keys tagged t+1 (sent once each), and DONE_ACKs every worker as soon
as the last WRITEBACK is sent. Server-only mode (collect off) skips COLLECT and WRITEBACK.
Choices beyond the design: every shard collects all of the job's slots and keeps only its own
keys; DONE.seq must equal this shard's index (the worker's shard list must match ours).

This module runs the shard and holds its command line; the parts it wires together:
- hosts/ps_config.py: the configuration (PSConfig);
- hosts/ps_socket.py, hosts/ps_log.py: the UDP socket, and the request log (--log);
- hosts/ps_requests.py: the answer to each request, per op (PUSH, PULL, DONE ...);
- hosts/ps_barrier.py: the barrier's phases (collect, invalidate, apply, write back);
- hosts/switch_channel.py: the conversation with the switch (sending, resending, replies);
- hosts/switch_cache.py: what this PS believes the switch cache holds;
- hosts/ps_frequency.py: the per-key counts and the frequency file (--freq).

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
from collections import Counter
from typing import Any

import numpy as np

from contract.clihelp import HelpParser
from contract.constants import HOTAGG_PORT
from hosts.agent import (
    AgentError,
    Deadline,
    DeadlineExceeded,
    Interrupted,
    cpu_report,
    cpu_usage,
    install_stop_signals,
    parse_address,
    positive_int,
)
from hosts.leaf_flush import Leaf
from hosts.ps_barrier import Barrier, IterationState
from hosts.ps_config import PSConfig, SyncMode
from hosts.ps_frequency import FrequencyCounts
from hosts.ps_log import RequestLog
from hosts.ps_requests import RequestHandler
from hosts.ps_socket import PSSocket
from hosts.stats import load_hot_keys, params_sha256, save_params, write_json


class ParameterServer:
    """One PS shard: receives requests until its iterations are done, then writes its
    outputs (--params, --freq, --summary)."""

    def __init__(self, config: PSConfig) -> None:
        config.validate()
        self.cfg = config
        self.params = np.zeros(config.key_space, dtype=np.int64)
        self.counts = FrequencyCounts(config)  # a .live --freq is created here
        self.counters: Counter[str] = Counter()
        self.log = RequestLog()  # opened by run()
        self.socket = PSSocket(config.bind, self.counters)
        self.address = self.socket.address
        self.barrier = Barrier(
            config,
            self.params,
            self.counts,
            self.counters,
            self.socket.send,
            self.log.row,
            self._released,
        )
        self.requests = RequestHandler(
            config, self.params, self.barrier, self.counters, self.socket.send, self.log.row
        )
        self._stop = threading.Event()
        self._cpu: list[tuple[float, ...]] = []  # cpu_usage() at the first request and the finish

    @property
    def cur(self) -> int:
        """The iteration being accumulated; iterations < cur are applied."""
        return self.barrier.cur

    @property
    def it(self) -> IterationState:
        return self.barrier.it

    @property
    def finished(self) -> bool:
        return self.barrier.finished

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        self.socket.close()

    def run(self) -> dict[str, Any]:
        """Serve until the configured iterations are done (then linger) or stop(); return the
        summary. Raises DeadlineExceeded, or Interrupted when stopped before finishing."""
        cfg = self.cfg
        deadline = Deadline(cfg.deadline, f"PS shard {cfg.shard}")
        self.log.open(cfg.log_path)
        self.barrier.prefill()
        last_rx = finished_at = time.perf_counter()
        try:
            while not self._stop.is_set():
                deadline.check()
                timeout = deadline.remaining(self.barrier.timeout(0.2))
                batch = self.socket.recv_batch(timeout)
                if batch:
                    last_rx = time.perf_counter()
                    if not self._cpu:
                        self._cpu.append(cpu_usage())
                for data, addr, arrival in batch:
                    was_finished = self.finished
                    self.requests.handle(data, addr, arrival)
                    if self.finished and not was_finished:
                        finished_at = time.perf_counter()
                if self.barrier.busy():
                    was_finished = self.finished
                    self.barrier.advance()
                    if self.finished and not was_finished:
                        finished_at = time.perf_counter()
                if self.finished and time.perf_counter() - max(last_rx, finished_at) >= cfg.linger:
                    break
            if not self.finished and cfg.iterations is not None:
                raise Interrupted(f"PS shard {cfg.shard} stopped in iteration {self.cur}")
            return self.summary()
        finally:
            self.log.close()
            self._write_outputs()

    def _released(self, it: IterationState) -> None:
        """The barrier released iteration `it` (the next one has begun)."""
        self.requests.release(it)
        every = self.cfg.freq_every
        if every and it.number % every == 0:  # after the DONE_ACKs: off the barrier's path
            self.counts.write(it.number, background=True)
        if self.finished:
            self._cpu.append(cpu_usage())
        self.requests.answer_held()

    def summary(self) -> dict[str, Any]:
        cfg = self.cfg
        return {
            "job_id": cfg.job_id,
            "shard": cfg.shard,
            "shards": cfg.n_shards,
            "workers": cfg.n_workers,
            "keys": cfg.key_space,
            "collect": cfg.collect,
            "sync": str(cfg.sync),
            # pulls the PS answered, by staleness (docs/design.md section 8)
            "staleness": {str(k): v for k, v in sorted(self.requests.staleness.items())},
            "iterations_done": self.cur - 1,
            "finished": self.finished,
            "hot_keys": len(self.barrier.hot),
            "cpu": cpu_report(*self._cpu) if len(self._cpu) == 2 else None,
            "counters": dict(self.counters),
            "congestion": self.barrier.switch.describe() if cfg.collect else None,
            "params_sha256": params_sha256(self.params),
        }

    def _write_outputs(self) -> None:
        cfg = self.cfg
        if cfg.params_path:
            save_params(cfg.params_path, self.params)
        if cfg.freq_path:
            self.counts.write(self.cur - 1)
        if cfg.summary_path:
            write_json(cfg.summary_path, self.summary())


def parse_leaf(text: str) -> Leaf:
    """`10.0.2.254/15` (or with :port), optionally `/3,4,5` -> the remote leaf's address,
    pseudo-worker id and the workers behind it."""
    parts = text.split("/")
    address, worker = parts[0], parts[1] if len(parts) > 1 else ""
    rack = parts[2].split(",") if len(parts) == 3 and parts[2] else []
    if not address or not worker.isdigit() or len(parts) > 3 or not all(w.isdigit() for w in rack):
        raise AgentError(
            f"--leaf {text!r}: expected IP[:PORT]/WORKER[/RACK], e.g. 10.0.2.254/15/3,4,5"
        )
    return Leaf(parse_address(address, HOTAGG_PORT), int(worker), frozenset(map(int, rack)))


def sync_mode(text: str) -> SyncMode:
    """argparse type: `bsp`, `ssp:S` or `async`."""
    try:
        return SyncMode.parse(text)
    except AgentError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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
        "--leaf",
        action="append",
        default=[],
        metavar="IP[:PORT]/WORKER[/RACK]",
        help="a remote leaf that aggregates too (docs/design.md section 7): its service "
        "address, the worker id its partial pushes carry and, comma-separated, the workers "
        "behind it (it is flushed once they are all done; without: at the barrier); repeat "
        "in chain order",
    )
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
    p.add_argument(
        "--sync",
        type=sync_mode,
        default=SyncMode(),
        help="bsp (default), ssp:S (a worker may run up to S iterations ahead of the "
        "slowest) or async (no barrier); docs/design.md section 8",
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
            leaves=tuple(parse_leaf(text) for text in args.leaf),
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
            sync=args.sync,
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
