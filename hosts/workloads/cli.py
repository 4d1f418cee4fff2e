"""The workers' workload options: the ones every workload gets, then each registered
workload's own in a group of its name; and the workload they name, built.

The options every workload gets are those more than one workload reads, and those the
experiment gives every worker (experiment/agents.py): --keys, --seed, --skew,
--keys-per-iter, --value-range, --drift (for the workloads that drift) and --stream-offset.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import NoReturn

from hosts.workloads.base import (
    StreamOffset,
    Workload,
    WorkloadName,
    drifting_names,
    one_of,
    workload_class,
    workload_classes,
    workload_help,
    workload_names,
)
from hosts.workloads.drift import DEFAULT_DRIFT_HEAD, DriftSpec
from hosts.workloads.seeded import WorkloadError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The workload options on `parser`: those every workload gets, then each registered
    workload's own (its add_arguments)."""
    g = parser.add_argument_group("workload")
    g.add_argument(
        "--workload",
        choices=workload_names(),
        default=WorkloadName.ZIPF,
        help=workload_help(),
    )
    g.add_argument("--keys", type=int, default=100_000, help="key space (parameters)")
    g.add_argument("--seed", type=int, default=1, help="seed of the workload's draws")
    g.add_argument("--skew", type=float, default=1.1, help="Zipf exponent (zipf, lr)")
    g.add_argument("--keys-per-iter", type=int, default=64, help="zipf: draws per worker/iter")
    g.add_argument("--value-range", type=float, default=0.01, help="zipf/trace: max |value|")
    g.add_argument(
        "--drift",
        metavar="every=K,fraction=F[,head=H]",
        help=f"{', '.join(drifting_names())}: every K iterations a fraction F of the H most "
        f"popular ranks (default {DEFAULT_DRIFT_HEAD}) take keys from the tail (default: none)",
    )
    g.add_argument(
        "--stream-offset",
        type=int,
        default=0,
        help="read iteration t of the stream as t + offset (a warm-up that does not see "
        "the measured iterations)",
    )
    for cls in workload_classes():
        cls.add_arguments(parser.add_argument_group(f"{cls.name} workload"))


def from_args(args: argparse.Namespace) -> Workload:
    """The workload the parsed options name, read from --stream-offset on."""
    cls = workload_class(args.workload)
    drift = DriftSpec.parse(getattr(args, "drift", None))
    if drift is not None and not cls.drifts:
        raise WorkloadError(
            f"--drift goes with {one_of(drifting_names())}, not --workload {cls.name}"
        )
    workload = cls.from_args(args, drift)
    offset = getattr(args, "stream_offset", 0)
    return StreamOffset(workload, offset) if offset else workload


class _RaisingParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise WorkloadError(message)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The workload options in `argv`, as the workers parse them; WorkloadError where a
    worker's parser would exit."""
    parser = _RaisingParser(add_help=False)
    add_arguments(parser)
    return parser.parse_args(argv)
