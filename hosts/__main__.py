"""Small tools around the agents' files.

    python -m hosts reference --workers 4 --iterations 20 --workload zipf --keys 100000 \
        --out ref.npy          # the numpy reference run; prints its sha256
    python -m hosts sha256 p0.npy p1.npy      # sha256 of the combined shard parameters
    python -m hosts top-keys -n 256 freq0.csv freq1.csv   # hottest keys, one per line

The agents themselves: `python -m hosts.ps --help`, `python -m hosts.worker --help`.
"""

from __future__ import annotations

import argparse
import json
import sys

from contract.clihelp import HelpParser
from contract.freqfile import top_keys
from hosts import workloads
from hosts.agent import positive_int
from hosts.stats import load_params, params_sha256, save_params


def build_parser() -> argparse.ArgumentParser:
    p = HelpParser(prog="python -m hosts", description="hotagg host tools")
    sub = p.add_subparsers(dest="cmd", required=True)
    ref = sub.add_parser("reference", help="compute the expected final parameters with numpy")
    ref.add_argument("--workers", type=positive_int, required=True)
    ref.add_argument("--iterations", type=positive_int, required=True)
    ref.add_argument("--out", help="save the parameters (.npy)")
    ref.add_argument("--losses", help="save the per-iteration, per-worker losses (JSON)")
    workloads.add_arguments(ref)
    sha = sub.add_parser("sha256", help="sha256 of one or more shards' parameter files")
    sha.add_argument("params", nargs="+")
    top = sub.add_parser("top-keys", help="the most updated keys over frequency files")
    top.add_argument("-n", type=positive_int, required=True)
    top.add_argument("freq", nargs="+")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.cmd == "reference":
            ref = workloads.reference_run(workloads.from_args(args), args.workers, args.iterations)
            if args.out:
                save_params(args.out, ref.params)
            if args.losses:
                with open(args.losses, "w") as f:
                    json.dump(ref.losses, f)
            print(params_sha256(ref.params))
        elif args.cmd == "sha256":
            print(params_sha256(load_params(args.params)))
        else:
            print("\n".join(str(k) for k in top_keys(args.freq, args.n)))
    except (OSError, ValueError) as exc:
        print(f"hosts {args.cmd}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
