"""`make bench`: switch throughput, P4Runtime install rate and BMv2's instructions per
packet (callgrind), written as JSON.

Usage: python -m bench [--seconds S] [--out DIR] [--targets embedded,bmv2]
                       [--bmv2-binaries simple_switch_grpc,simple_switch_grpc-perf]
                       [--bmv2-json build/hotagg.json] [--callgrind BINARY]

BMv2 is measured once per binary (its standard build and its performance build by
default), each under its own key in "targets": "bmv2" for simple_switch_grpc,
"bmv2-perf" for simple_switch_grpc-perf, else "bmv2:<binary>". A binary that is not on
PATH is recorded as skipped, with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

from contract.clihelp import HelpParser
from contract.constants import MAX_ENTRIES
from topologies.switches import DEFAULT_BMV2_BINARY
from topologies.targets import Bmv2Target, Target, target_class

# BMv2's standard build and the build BMv2's docs/performance.md advises (see
# ../shared/p4tools/README.md): both are measured unless --bmv2-binaries says otherwise.
BMV2_BINARIES = f"{DEFAULT_BMV2_BINARY},{DEFAULT_BMV2_BINARY}-perf"


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


def bmv2_target_name(binary: str) -> str:
    """The key of a BMv2 binary's results: bmv2, bmv2-perf, or bmv2:<binary>."""
    name = Path(binary).name
    if name == DEFAULT_BMV2_BINARY:
        return "bmv2"
    if name.startswith(DEFAULT_BMV2_BINARY + "-"):
        return "bmv2-" + name[len(DEFAULT_BMV2_BINARY) + 1 :]
    return f"bmv2:{binary}"


def existing_file(text: str) -> Path:
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"no such file: {text}")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = HelpParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seconds",
        type=float,
        default=4.0,
        help="offered-load time per measurement (default: %(default)s)",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("bench/results"), help="directory of the JSON results"
    )
    parser.add_argument(
        "--targets", default="embedded,bmv2", help="comma-separated switch targets to measure"
    )
    parser.add_argument(
        "--bmv2-binaries",
        default=BMV2_BINARIES,
        help="comma-separated BMv2 switch binaries (names on PATH or paths) measured for "
        "target bmv2 (default: %(default)s)",
    )
    parser.add_argument(
        "--bmv2-json",
        type=existing_file,
        default=None,
        help="BMv2 JSON to load instead of compiling p4src/ (e.g. to compare two programs)",
    )
    parser.add_argument(
        "--callgrind",
        default=f"{DEFAULT_BMV2_BINARY}-perf",
        metavar="BINARY",
        help="also count BMv2's instructions per packet of each case under callgrind "
        "(bench.bmv2_callgrind; steady on a busy machine, so --bmv2-json compares two "
        "programs by it); empty: skip (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print(
            "bench: needs root (veth pairs and raw sockets); run: sudo make bench", file=sys.stderr
        )
        return 1
    from bench.switch_bench import CASES, measure_bare_loop, measure_switch

    result: dict = {
        "machine": machine(),
        "entries_per_packet": MAX_ENTRIES,
        "seconds_per_measurement": args.seconds,
        "targets": {},
    }
    print(f"bench: bare Python loop on veth ({args.seconds:g} s) ...", flush=True)
    result["bare_loop"] = measure_bare_loop(args.seconds)
    ceiling = result["bare_loop"]["packets_per_s"]
    runs: list[tuple[str, Target, str | None]] = []  # (result key, target, BMv2 binary)
    for name in args.targets.split(","):
        cls = target_class(name)
        if issubclass(cls, Bmv2Target):  # one run per BMv2 build
            runs += [(bmv2_target_name(b), cls(b), b) for b in args.bmv2_binaries.split(",")]
        else:
            runs.append((name, cls.from_environment(), None))
    if args.bmv2_json:
        result["bmv2_json"] = str(args.bmv2_json)
    for key, target, binary in runs:
        if why := target.missing():
            result["targets"][key] = {"binary": binary, "skipped": why}
            print(f"bench: {key} skipped: {why}", flush=True)
            continue
        print(f"bench: {key} switch ...", flush=True)
        r = measure_switch(target, args.seconds, bmv2_json=args.bmv2_json)
        for case, *_ in CASES:
            r[case]["ratio_to_bare_loop"] = round(r[case]["packets_per_s"] / ceiling, 3)
        result["targets"][key] = {"binary": binary, **r} if binary else r
    if args.callgrind:
        from bench.bmv2_callgrind import measure, unavailable

        if why := unavailable(args.callgrind):
            result["bmv2_callgrind"] = {"binary": args.callgrind, "skipped": why}
            print(f"bench: callgrind skipped: {why}", flush=True)
        else:
            print(f"bench: {args.callgrind} under callgrind ...", flush=True)
            result["bmv2_callgrind"] = measure(args.callgrind, args.bmv2_json, 60, 0.05)
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
