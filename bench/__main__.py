"""`make bench`: switch throughput and P4Runtime install rate, written as JSON.

Usage: python -m bench [--seconds S] [--out DIR] [--targets embedded,bmv2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

from contract.constants import MAX_ENTRIES
from topologies.switches import bmv2_missing


def machine() -> dict:
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "cpu": next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            "unknown",
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seconds",
        type=float,
        default=4.0,
        help="offered-load time per measurement (default: %(default)s)",
    )
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--targets", default="embedded,bmv2")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print(
            "bench: needs root (veth pairs and raw sockets); run: sudo make bench", file=sys.stderr
        )
        return 1
    from bench.switch_bench import measure_bare_loop, measure_switch

    result: dict = {
        "machine": machine(),
        "entries_per_packet": MAX_ENTRIES,
        "seconds_per_measurement": args.seconds,
        "targets": {},
    }
    print(f"bench: bare Python loop on veth ({args.seconds:g} s) ...", flush=True)
    result["bare_loop"] = measure_bare_loop(args.seconds)
    ceiling = result["bare_loop"]["packets_per_s"]
    for target in args.targets.split(","):
        if target == "bmv2" and (why := bmv2_missing()):
            result["targets"][target] = {"skipped": why}
            print(f"bench: bmv2 skipped: {why}", flush=True)
            continue
        print(f"bench: {target} switch ...", flush=True)
        r = measure_switch(target, args.seconds)
        for case in ("push_hot", "push_cold"):
            r[case]["ratio_to_bare_loop"] = round(r[case]["packets_per_s"] / ceiling, 3)
        result["targets"][target] = r
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = args.out / f"bench-{stamp}.json"
    text = json.dumps(result, indent=2)
    path.write_text(text + "\n")
    (args.out / "latest.json").write_text(text + "\n")
    print(text)
    print(f"bench: wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
