"""What the switch's register sizes cost: each target's resident memory and start-up time,
and the register bytes the P4Info declares, written as JSON.

Usage: python -m bench.switch_memory [--out DIR] [--repeats N]
                                     [--targets embedded,bmv2,bmv2-perf]

Per target, each of --repeats times: launch the switch (two veth ports), time until its
P4Runtime port is ready and read its resident set (VmRSS); push the pipeline (the committed
P4Info, and for BMv2 the JSON p4c compiles from p4src/ now), time the push and read VmRSS
again. BMv2 allocates its registers at the push, the embedded switch at start-up; the
median of the repeats is reported. For the embedded switch, the bytes of the dedup_seq
register once every cell holds a distinct seq (Python ints above 256 are objects of their
own) are measured too, in this process with tracemalloc.
Needs root (veth pairs). Writes DIR/switch_memory.json (default bench/results).
"""

from __future__ import annotations

import json
import os
import statistics
import time
import tracemalloc
from pathlib import Path

from bench.__main__ import machine
from bench.switch_bench import bmv2_device_config
from contract.clihelp import HelpParser
from contract.constants import DEDUP_SIZE, MAX_JOBS, MAX_WORKERS, WORKER_ADMISSION_SIZE
from topologies.netns import VethNet
from topologies.switches import REPO_ROOT, SwitchProcess
from topologies.targets import DEFAULT_BMV2_BINARY, Bmv2Target, EmbeddedTarget, Target

P4INFO_PATH = REPO_ROOT / "p4src" / "hotagg.p4info.txtpb"


def register_bytes() -> dict:
    """Every register of the committed P4Info: cells x bits, and the total in bytes."""
    from controller.p4info import P4Info

    p4info = P4Info.from_file(P4INFO_PATH)
    registers = {
        r.preamble.name: {
            "cells": r.size,
            "bits": r.type_spec.bitstring.bit.bitwidth,
            "bytes": r.size * r.type_spec.bitstring.bit.bitwidth // 8,
        }
        for r in p4info.message.registers
    }
    return {"registers": registers, "total_bytes": sum(r["bytes"] for r in registers.values())}


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def measure_once(target: Target, device_config: bytes) -> dict:
    from controller.client import SwitchClient
    from controller.p4info import P4Info

    p4info = P4Info.from_file(P4INFO_PATH)
    prefix = f"hamm{os.getpid() % 100000}"
    with VethNet(prefix, 2) as net:
        proc = SwitchProcess(
            "memory", dict(net.switch_ifaces), target=target, log_dir=Path("/tmp/hotagg-bench-logs")
        )
        start = time.perf_counter()
        proc.launch().wait_ready(timeout=60.0)
        try:
            ready_s = time.perf_counter() - start
            assert proc.proc is not None
            rss_ready = rss_kib(proc.proc.pid)
            with SwitchClient(proc.grpc_addr, wait=10.0).connect() as client:
                start = time.perf_counter()
                client.set_pipeline(p4info.message, device_config)
                push_s = time.perf_counter() - start
            rss_pipeline = rss_kib(proc.proc.pid)
        finally:
            proc.stop()
    return {
        "ready_s": ready_s,
        "rss_ready_kib": rss_ready,
        "pipeline_push_s": push_s,
        "rss_pipeline_kib": rss_pipeline,
    }


def measure_target(target: Target, repeats: int) -> dict:
    if why := target.missing():
        return {"skipped": why}
    device_config = bmv2_device_config(None) if isinstance(target, Bmv2Target) else b""
    runs = [measure_once(target, device_config) for _ in range(repeats)]
    result: dict = {"repeats": repeats}
    for key in runs[0]:
        median = statistics.median(run[key] for run in runs)
        result[key] = round(median, 3) if key.endswith("_s") else int(median)
    return result


def embedded_dedup_filled_bytes() -> int:
    """Bytes the embedded dedup_seq register holds once every cell has a distinct seq."""
    from softswitch.state import Register

    tracemalloc.start()
    try:
        register = Register("dedup_seq", DEDUP_SIZE, 32)
        first = 1 << 20  # far above CPython's cached small ints
        register.values[:] = range(first, first + DEDUP_SIZE)
        size, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return size


TARGETS = {
    "embedded": EmbeddedTarget,
    "bmv2": lambda: Bmv2Target(DEFAULT_BMV2_BINARY),
    "bmv2-perf": lambda: Bmv2Target(f"{DEFAULT_BMV2_BINARY}-perf"),
}


def main(argv: list[str] | None = None) -> int:
    parser = HelpParser(prog="python -m bench.switch_memory", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=Path("bench/results"), help="directory of the JSON results"
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="start-ups per target (default: %(default)s)"
    )
    parser.add_argument(
        "--targets", default=",".join(TARGETS), help="comma-separated targets to measure"
    )
    args = parser.parse_args(argv)
    names = [n for n in args.targets.split(",") if n]
    if unknown := [n for n in names if n not in TARGETS]:
        parser.error(f"--targets: unknown {', '.join(unknown)} (known: {', '.join(TARGETS)})")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    results = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine(),
        "sizes": {
            "MAX_JOBS": MAX_JOBS,
            "MAX_WORKERS": MAX_WORKERS,
            "DEDUP_SIZE": DEDUP_SIZE,
            "WORKER_ADMISSION_SIZE": WORKER_ADMISSION_SIZE,
        },
        **register_bytes(),
        "embedded_dedup_seq_filled_bytes": embedded_dedup_filled_bytes(),
        "targets": {name: measure_target(TARGETS[name](), args.repeats) for name in names},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "switch_memory.json"
    path.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results["targets"], indent=2))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
