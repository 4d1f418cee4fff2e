"""What one step of the online hot-set loop costs (controller/online/), before and after.

An embedded switch's P4Runtime server runs in a process of its own (optionally with a thread
pushing PUSH frames through its pipeline, as traffic would), with a job of `--budget` slots
full of hot keys. Each step swaps `--swap` keys, as a re-selection under drift does:
- "before": the loop as it was: the hot set read back (instance 0), the 8 instances' hit
  counters read one table per RPC, then HotKeys.evict and HotKeys.install (each reads
  instance 0 again and writes the 8 instances one RPC each);
- "after": SwitchTarget's own record, read_hits (one Read RPC), one Write RPC.
It also times PSFrequencySource.read on a frequency file of `--freq-rows` keys (the PS's
file lists every key ever updated: ~17,600 after 100 iterations at the defaults).

    .venv/bin/python -m bench.online_step --steps 30 --load --out bench/results/online_step.json

The machine is shared: the numbers are indicative; the RPC counts are exact.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import emit
from contract.p4files import P4INFO_PATH

SERVER = r"""
import sys, threading
from softswitch.p4rt import P4RuntimeServer
from softswitch.pipeline import Pipeline
from contract.frames import push_frame
pipeline = Pipeline(seed=1)
server = P4RuntimeServer(pipeline, address="127.0.0.1:0")
print(server.start(), flush=True)
def traffic():
    keys = range(0, 400, 4)
    frames = [push_frame(1, [k, k + 1, k + 2, k + 3], seq) for seq, k in enumerate(keys, 1)]
    while True:
        for f in frames:
            pipeline.process(1, f)
if sys.argv[1] == "load":
    sys.stdin.readline()  # the job is configured
    threading.Thread(target=traffic, daemon=True).start()
sys.stdin.read()
"""


class Counting:
    """Counts a SwitchClient's Read and Write RPCs."""

    def __init__(self, client) -> None:
        self.reads = self.writes = 0
        read, read_raw, write = client.read, client.read_raw, client._write

        def counted_read(entities):
            self.reads += 1
            return read(entities)

        def counted_read_raw(entities):
            self.reads += 1
            return read_raw(entities)

        def counted_write(req, timeout=None):
            self.writes += 1
            return write(req, timeout=timeout)

        client.read, client.read_raw, client._write = counted_read, counted_read_raw, counted_write


def main(argv: list[str] | None = None) -> int:
    from contract.freqfile import write_frequency
    from controller.client import SwitchClient
    from controller.hot_keys import HotKeys
    from controller.jobs import Jobs
    from controller.online.policy import Changes
    from controller.online.sources import PSFrequencySource, read_hits
    from controller.online.switch_target import SwitchTarget
    from controller.p4info import P4Info

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--budget", type=int, default=108)
    p.add_argument("--swap", type=int, default=12)
    p.add_argument("--freq-rows", type=int, default=17600)
    p.add_argument("--load", action="store_true", help="traffic through the switch meanwhile")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)

    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, "load" if args.load else "idle"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        port = int(proc.stdout.readline())
        p4info = P4Info.from_file(P4INFO_PATH)
        client = SwitchClient(f"127.0.0.1:{port}", 0, (0, 1), timeout=10).connect()
        client.set_pipeline(p4info.message)
        job = Jobs(client, p4info).add(1, args.budget)
        from controller.tenancy import Tenancy, admission

        Tenancy(client, p4info).admit([admission(1, 0, 1, "10.0.0.1")])
        hot = HotKeys(client, p4info)
        hot.install(job, range(args.budget))
        proc.stdin.write("go\n")
        proc.stdin.flush()
        rpcs = Counting(client)
        pool = list(range(args.budget, args.budget + 10 * args.swap))

        def swaps(current: set[int]) -> Changes:
            out = sorted(current)[: args.swap]
            fresh = [k for k in pool if k not in current][: args.swap]
            pool[:] = [k for k in pool if k not in fresh] + out
            return Changes(fresh, out)

        def before() -> None:
            current = {hk.key for hk in hot.list(1)}
            hot.list(1, counters=True)
            ch = swaps(current)
            hot.evict(1, ch.remove)
            hot.install(job, ch.add)

        target = SwitchTarget(hot, job)

        def after() -> None:
            current = target.current()
            read_hits(hot, 1)
            target.apply(swaps(current))

        results: dict[str, object] = {"config": vars(args) | {"out": str(args.out)}}
        for name, step in (("before", before), ("after", after)):
            rpcs.reads = rpcs.writes = 0
            times = []
            for _ in range(args.steps):
                t = time.perf_counter()
                step()
                times.append(time.perf_counter() - t)
            results[name] = {
                "step_ms_median": round(1e3 * statistics.median(times), 2),
                "step_ms_mean": round(1e3 * statistics.fmean(times), 2),
                "steps_per_s": round(1 / statistics.fmean(times), 1),
                "read_rpcs_per_step": rpcs.reads / args.steps,
                "write_rpcs_per_step": rpcs.writes / args.steps,
            }
        assert {hk.key for hk in hot.list(1)} == target.current()  # the record stayed true
        client.close()
    finally:
        proc.kill()
        proc.wait()

    with tempfile.TemporaryDirectory() as tmp:
        rng = np.random.default_rng(1)
        path = Path(tmp) / "freq0.csv"
        cold = np.zeros(100_000, np.int64)
        idx = rng.choice(100_000, args.freq_rows, replace=False)
        cold[idx] = rng.integers(1, 50, args.freq_rows)
        collected = np.zeros_like(cold)
        t = time.perf_counter()
        write_frequency(path, cold, collected, {"iterations": 2})
        results["freq_write_ms"] = round(1e3 * (time.perf_counter() - t), 2)
        src = PSFrequencySource([path])
        src.read()
        cold[idx[:1000]] += 1
        write_frequency(path, cold, collected, {"iterations": 4})
        t = time.perf_counter()
        obs = src.read()
        results["freq_read_ms"] = round(1e3 * (time.perf_counter() - t), 2)
        assert len(obs.counts) == 1000
    emit(results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
