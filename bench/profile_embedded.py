"""Where the embedded switch spends its time per packet, written as JSON.

    python -m bench.profile_embedded [--seconds S] [--packets N] [--top K] [--out FILE]
                                     [--no-veth] [--no-profile]

Two parts, each for the bench's two cases (8-entry PUSH, all keys hot / all keys cold):

- "pipeline": `Pipeline.process` alone, in this process, no sockets: microseconds per frame,
  and a cProfile of the same run (top functions by own time).
- "loop" (root only): softswitch.runtime.Runtime on a veth pair, in a child process, fed by
  bench.switch_bench.blast from this one; the bare loop (a cross-connect "pipeline", as
  bench/bare_loop.py) and the switch are measured back to back, so their ratio is the one
  `make bench` reports, less the noise of a busy machine. A second run of each case with
  cProfile around the packet loop shows how the loop's time splits between the socket calls
  and the pipeline.

The pipeline is configured through softswitch.state directly, with the bench's routes, job
and 1024 hot keys, so no gRPC server runs. Nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import multiprocessing
import os
import pstats
import signal
import sys
import time
from pathlib import Path

from contract.constants import MAX_ENTRIES

JOB_ID = 1
HOT_KEYS = 1024
MAC = {1: "02:00:00:00:00:01", 2: "02:00:00:00:00:02"}
IP = {1: "10.0.0.1", 2: "10.0.0.2"}
P = "HotaggIngress."


def configure(pipeline) -> None:
    """The state that bench/switch_bench.py installs over P4Runtime, written directly."""
    lpm = pipeline.tables[P + "ipv4_lpm"]
    for port in (1, 2):
        addr = int.from_bytes(bytes(map(int, IP[port].split("."))), "big")
        mac = int(MAC[port].replace(":", ""), 16)
        lpm.insert(((addr, 32),), P + "ipv4_forward", (mac, port))
    pipeline.tables[P + "jobs"].insert((JOB_ID,), P + "set_job", (0, 0, HOT_KEYS))
    from bench.switch_bench import WORKERS  # the stream's workers, all from host 1 on port 1

    src = int.from_bytes(bytes(map(int, IP[1].split("."))), "big")
    for worker in range(WORKERS):
        pipeline.tables[P + "worker_admission"].insert((JOB_ID, worker, 1, src), P + "admit", ())
    for i in range(MAX_ENTRIES):
        t = pipeline.tables[f"{P}lookup{i}.hot_keys"]
        for key in range(HOT_KEYS):
            t.insert((JOB_ID, key), f"{P}lookup{i}.set_slot", (key,))


def push_frames(hot: bool, n: int, first: int = 0) -> list[bytes]:
    """`n` PUSH frames exactly as the bench sends them (64 workers, rising seqs)."""
    from bench.switch_bench import PushStream

    stream = PushStream(hot)
    stream.sent = first
    return [bytes(stream.next()) for _ in range(n)]


def profile_pipeline(packets: int, top: int, with_profile: bool) -> dict:
    from softswitch.pipeline import Pipeline

    result = {}
    for case, hot in (("push_hot", True), ("push_cold", False)):
        p = Pipeline(seed=1)
        configure(p)
        frames = push_frames(hot, packets)
        process = p.process
        start = time.perf_counter()
        for f in frames:
            process(1, f)
        seconds = time.perf_counter() - start
        r = {"us_per_frame": round(seconds / packets * 1e6, 3), "frames": packets}
        if with_profile:
            p = Pipeline(seed=1)
            configure(p)
            prof = cProfile.Profile()
            prof.enable()
            for f in frames:
                p.process(1, f)
            prof.disable()
            r["top"] = top_functions(pstats.Stats(prof, stream=io.StringIO()), top)
        result[case] = r
    return result


class CrossConnect:
    """The bare loop's pipeline (bench/bare_loop.py): port 1 <-> port 2."""

    def process(self, port: int, frame: bytes) -> list[tuple[int, bytes]]:
        return [(3 - port, frame)]


def _loop_child(kind: str, ports: dict, prof_path: str | None, ready) -> None:
    from softswitch.pipeline import Pipeline
    from softswitch.runtime import Runtime

    if kind == "bare":
        pipeline = CrossConnect()
    else:
        pipeline = Pipeline(seed=1)
        configure(pipeline)
    runtime = Runtime(pipeline, ports)
    runtime.open()
    signal.signal(signal.SIGTERM, lambda *_: runtime._stop.set())
    ready.send(True)
    cpu = time.process_time()
    if prof_path:
        prof = cProfile.Profile()
        prof.runcall(runtime.run)
        prof.dump_stats(prof_path)
    else:
        runtime.run()
    ready.send((runtime.stats["rx"], time.process_time() - cpu))
    runtime.close()


def run_loop(net, kind: str, hot: bool, seconds: float, seq_base: int, prof_path: str | None):
    """One child switch, one blast; returns (output pps, frames sent, CPU microseconds the
    child spent per frame it received). The CPU time per frame hardly depends on what else
    runs on the machine, unlike the rate."""
    from bench.switch_bench import PushStream, blast

    ctx = multiprocessing.get_context("fork")
    r, w = ctx.Pipe(duplex=False)
    child = ctx.Process(
        target=_loop_child, args=(kind, dict(net.switch_ifaces), prof_path, w), daemon=True
    )
    child.start()
    try:
        if not r.poll(30) or not r.recv():
            raise RuntimeError("packet loop did not start")
        stream = PushStream(hot)
        stream.sent = seq_base
        # the bare loop sends everything to port 2; a hot push is answered on port 1
        out_port = 1 if (kind == "switch" and hot) else 2
        rate = blast(net, stream, net.switch_ifaces[out_port], seconds)
    finally:
        os.kill(child.pid, signal.SIGTERM)
        rx, cpu = r.recv() if r.poll(15) else (0, 0.0)
        child.join(10)
    return rate.pps, stream.sent, (cpu / rx * 1e6 if rx else None)


def profile_loop(seconds: float, top: int, with_profile: bool) -> dict:
    from topologies.netns import VethNet

    prefix = f"hapr{os.getpid() % 100000}"
    result: dict = {}
    with VethNet(prefix, 2) as net:
        seq = 0
        rates, cpu = {}, {}
        for name, kind, hot in (
            ("bare_loop", "bare", True),
            ("push_hot", "switch", True),
            ("push_cold", "switch", False),
            ("bare_loop_again", "bare", True),
        ):
            pps, seq, us = run_loop(net, kind, hot, seconds, seq, None)
            rates[name], cpu[name] = round(pps, 1), us and round(us, 2)
            print(f"profile: loop {name}: {pps:,.0f} pps, {us:.2f} us CPU/frame", file=sys.stderr)
        bare = (rates["bare_loop"] + rates["bare_loop_again"]) / 2 or 1.0
        bare_us = (cpu["bare_loop"] + cpu["bare_loop_again"]) / 2
        result["packets_per_s"] = rates
        result["ratio_to_bare_loop"] = {
            c: round(rates[c] / bare, 3) for c in ("push_hot", "push_cold")
        }
        result["cpu_us_per_frame"] = cpu
        # what the rate ratio would be with a core each: bare CPU per frame / switch's
        result["cpu_ratio_to_bare_loop"] = {
            c: round(bare_us / cpu[c], 3) for c in ("push_hot", "push_cold")
        }
        if with_profile:
            for name, kind, hot in (
                ("bare_loop", "bare", True),
                ("push_hot", "switch", True),
                ("push_cold", "switch", False),
            ):
                path = f"/tmp/hotagg-profile-{os.getpid()}-{name}.prof"
                pps, seq, _ = run_loop(net, kind, hot, seconds, seq, path)
                st = pstats.Stats(path, stream=io.StringIO())
                prof_rows = top_functions(st, top)
                os.unlink(path)
                result.setdefault("profiled", {})[name] = {
                    "packets_per_s_under_profiler": round(pps, 1),
                    "top": prof_rows,
                }
    return result


def top_functions(st: pstats.Stats, top: int) -> list[dict]:
    """The `top` functions by own time; shares are of all time but the idle poll()."""
    idle = "<method 'poll' of 'select.poll' objects>"  # waiting is not work
    stats = {k: v for k, v in st.stats.items() if k[2] != idle}
    total = sum(v[2] for v in stats.values()) or 1.0
    rows = []
    for (file, line, func), (_cc, ncalls, tottime, cumtime, _callers) in stats.items():
        where = f"{Path(file).name}:{line}" if line else file
        rows.append(
            {
                "function": f"{func} ({where})",
                "calls": ncalls,
                "own_s": round(tottime, 4),
                "own_share": round(tottime / total, 3),
                "cum_s": round(cumtime, 4),
            }
        )
    rows.sort(key=lambda r: r["own_s"], reverse=True)
    return rows[:top]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per loop measurement")
    parser.add_argument("--packets", type=int, default=50_000, help="per pipeline case")
    parser.add_argument("--top", type=int, default=15, help="functions per profile")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    parser.add_argument("--no-veth", action="store_true", help="pipeline part only")
    parser.add_argument("--no-profile", action="store_true", help="rates only, no cProfile")
    args = parser.parse_args(argv)
    result: dict = {"pipeline": profile_pipeline(args.packets, args.top, not args.no_profile)}
    if not args.no_veth:
        if os.geteuid() != 0:
            result["loop"] = {"skipped": "needs root (veth pairs and raw sockets)"}
        else:
            result["loop"] = profile_loop(args.seconds, args.top, not args.no_profile)
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
