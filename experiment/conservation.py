"""The conservation check: every update a worker pushed is applied exactly once, so a phase's
final parameters are its initial ones with every pushed update applied once, in the PS's
arithmetic. It is recomputed from the raw logs a phase leaves: each worker's pushes
(`w<i>.pushes.npz`, hosts/push_log.py), the PS shards' final parameters (`params<i>.npy`)
and their summaries (`ps<i>.json`: how many workers and shards there were).

The PS's arithmetic (hosts/ps_barrier.py, hosts/ps_requests.py): every phase's PS starts
from zeros (hosts/ps.py), holds int64 and subtracts each update's int32 value, cold entries
one by one and the switch's sums as collected. The switch sums in int32 and sends an entry
that would overflow on to the PS, and nothing scales or clamps a value on its way to the
parameters (pull replies are clamped, the parameters are not), so the recomputation is
`initial - sum of every pushed value`, per key, in int64.

For SYNC=bsp, and for workloads whose pushes do not depend on what was pulled, both modes
push the same updates, so their parameters must also be equal (`params_compared`). Under
SYNC=ssp:S or async, `lr` pushes gradients at the values it pulled, which are stale by
different amounts in the two modes: the modes push different updates, their parameters
differ, and each mode is exact when it conserved its own.

    python -m experiment.conservation runs/<id>     # every phase of a run (make conservation)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from contract.clihelp import HelpParser
from experiment.schema import Conservation, KeyDifference, PhaseConservation
from hosts.push_log import PUSH_LOG_SUFFIX, Pushes, PushLogError, load_pushes, push_log_path
from hosts.stats import load_params
from hosts.workloads import WorkloadError, workload_class

CONSERVED, VIOLATED, UNCHECKED = "conserved", "violated", "unchecked"
SHOWN = 5  # differing keys a check lists
EXPLAINED_AT_MOST = 10_000  # differing keys read for which update explains them (the rest counted)


@dataclass(frozen=True)
class PhaseCheck:
    """One phase's verdict (PhaseConservation, as summary.json holds it)."""

    phase: str
    status: str
    why: str
    workers: int = 0
    updates: int = 0
    keys: int = 0
    differing_keys: int = 0
    lost: int = 0
    doubled: int = 0
    differences: list[KeyDifference] = field(default_factory=list)

    @property
    def conserved(self) -> bool:
        return self.status == CONSERVED

    def as_dict(self) -> PhaseConservation:
        return {
            "status": self.status,
            "why": self.why,
            "workers": self.workers,
            "updates": self.updates,
            "keys": self.keys,
            "differing_keys": self.differing_keys,
            "lost": self.lost,
            "doubled": self.doubled,
            "first_differences": self.differences,
        }


def describe(phase: str, check: PhaseConservation) -> list[str]:
    """A check as lines: the verdict, then each differing key shown."""
    lines = [f"{phase}: {check['status']}: {check['why']}"]
    for d in check["first_differences"]:
        lines.append(
            f"  key {d['key']}: expected {d['expected']}, the PS wrote {d['actual']} "
            f"(off by {d['actual'] - d['expected']:+d}): {d['reading']}"
        )
    return lines


def _unchecked(phase: str, why: str, workers: int = 0) -> PhaseCheck:
    return PhaseCheck(phase, UNCHECKED, why, workers)


def _ps_summaries(directory: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted(directory.glob("ps*.json"), key=_index):
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue  # a PS that did not finish: the parameters' check says what is missing
    return out


def _index(path: Path) -> int:
    digits = re.search(r"(\d+)", path.name)
    return int(digits.group(1)) if digits else -1


def check_phase(
    directory: Path, workers: int | None = None, shards: int | None = None, name: str = ""
) -> PhaseCheck:
    """The conservation check of the phase in `directory`; `workers` and `shards` as the run
    knows them (None: from the PS summaries, else the files there). Missing, unreadable or
    cut-short files give UNCHECKED with the reason, never an exception."""
    phase = name or directory.name
    if not directory.is_dir():
        return _unchecked(phase, f"{directory} is not a folder")
    summaries = _ps_summaries(directory)
    if shards is None:
        shards = summaries[0].get("shards") if summaries else None
        shards = shards or len(list(directory.glob("params*.npy")))
    if workers is None:
        workers = summaries[0].get("workers") if summaries else None
        # else every worker that left a file: one without its pushes is then named
        workers = workers or max(
            (_index(p) + 1 for p in directory.glob("w*.*") if _index(p) >= 0), default=0
        )
    if not shards:
        return _unchecked(phase, "no params*.npy: the PS wrote no final parameters", workers)
    if not workers:
        return _unchecked(phase, f"no w*{PUSH_LOG_SUFFIX}: no worker's pushes were logged")
    params = [directory / f"params{i}.npy" for i in range(shards)]
    if missing := [p.name for p in params if not p.exists()]:
        return _unchecked(
            phase, f"{', '.join(missing)} missing (a PS shard did not finish)", workers
        )
    try:
        actual = load_params(params)
    except (OSError, ValueError, EOFError) as exc:
        return _unchecked(phase, f"the final parameters cannot be read ({exc})", workers)
    logs: list[Pushes] = []
    for w in range(workers):
        try:
            pushes = load_pushes(push_log_path(directory, w))
        except PushLogError as exc:
            return _unchecked(phase, f"worker {w}'s pushes: {exc}", workers)
        if short := pushes.shortfall():
            return _unchecked(phase, short, workers)
        logs.append(pushes)
    return recompute(phase, np.zeros_like(actual), actual, logs)


def recompute(
    phase: str, initial: np.ndarray, actual: np.ndarray, logs: list[Pushes]
) -> PhaseCheck:
    """`actual` against `initial` with every update in `logs` applied once, as the PS
    applies it (subtracted, int64)."""
    keys = np.concatenate([p.keys for p in logs]) if logs else np.zeros(0, np.uint64)
    values = np.concatenate([p.values for p in logs]).astype(np.int64) if logs else keys
    workers = len(logs)
    if len(keys) and int(keys.max()) >= len(initial):
        return _unchecked(
            phase,
            f"a key pushed ({int(keys.max())}) lies outside the parameters' {len(initial)} keys",
            workers,
        )
    expected = np.array(initial, dtype=np.int64)
    np.subtract.at(expected, keys.astype(np.intp), values)
    off = np.asarray(actual, dtype=np.int64) - expected
    differing = np.flatnonzero(off)
    touched = int(np.count_nonzero(np.bincount(keys.astype(np.intp), minlength=len(initial))))
    if not len(differing):
        why = f"{len(keys):,} updates of {workers} workers to {touched:,} keys, each applied once"
        return PhaseCheck(phase, CONSERVED, why, workers, len(keys), touched)
    readings = _Readings(logs, keys, values)
    lost = doubled = 0
    shown: list[KeyDifference] = []
    for k in differing[:EXPLAINED_AT_MOST].tolist():
        kind, reading = readings.explain(k, int(off[k]))
        lost += kind == "lost"
        doubled += kind == "doubled"
        if len(shown) < SHOWN:
            shown.append(
                {
                    "key": k,
                    "expected": int(expected[k]),
                    "actual": int(actual[k]),
                    "reading": reading,
                }
            )
    why = (
        f"{len(differing):,} of {touched:,} keys differ from their updates applied once "
        f"({lost} by an update lost, {doubled} by one counted twice, "
        f"{min(len(differing), EXPLAINED_AT_MOST) - lost - doubled} either way or by no "
        "single update); "
        f"{len(keys):,} updates of {workers} workers"
    )
    return PhaseCheck(
        phase, VIOLATED, why, workers, len(keys), touched, len(differing), lost, doubled, shown
    )


class _Readings:
    """Which single pushed update explains a key's difference: one applied too few times
    (lost) or once too often (counted twice)."""

    def __init__(self, logs: list[Pushes], keys: np.ndarray, values: np.ndarray) -> None:
        self.order = np.argsort(keys, kind="stable")
        self.sorted_keys = keys[self.order]
        self.values = values
        self.workers = np.concatenate(
            [np.full(len(p.keys), p.worker_id, np.int64) for p in logs] or [np.zeros(0, np.int64)]
        )
        self.iterations = np.concatenate(
            [p.entry_iterations for p in logs] or [np.zeros(0, np.int64)]
        )

    def explain(self, key: int, off: int) -> tuple[str, str]:
        """('lost' | 'doubled' | '', a reading). The PS subtracts: an update v applied too
        few times leaves the value v higher (off = v), one counted twice v lower (off = -v)."""
        lo, hi = np.searchsorted(self.sorted_keys, [key, key + 1])
        entries = self.order[lo:hi]
        if not len(entries):
            return "", f"no worker pushed key {key}, yet the PS moved it by {-off:+d}"
        values = self.values[entries]
        lost, doubled = entries[values == off], entries[values == -off]
        readings = [
            f"an update of {int(self.values[hits[0]]):+d} {what}: {self._which(hits)}"
            for hits, what in ((lost, "lost (applied 0 times)"), (doubled, "counted twice"))
            if len(hits)
        ]
        if not readings:
            return "", (
                f"no single one of its {len(entries)} updates (summing {int(values.sum()):+d}) "
                "explains it"
            )
        if len(readings) == 2:  # values of both signs fit: either reading holds
            return "", f"either {readings[0]}, or {readings[1]}"
        return ("lost" if len(lost) else "doubled"), readings[0]

    def _which(self, hits: np.ndarray) -> str:
        """The first of the updates `hits` (all of one value) by worker and iteration."""
        i = int(hits[0])
        others = f" (or one of {len(hits) - 1} more of that value)" if len(hits) > 1 else ""
        return f"worker {self.workers[i]}'s of iteration {self.iterations[i]}{others}"


def params_compared(config: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether both modes push the same updates, so that their parameters must be equal
    too, and why (the run's config.json)."""
    sync, name = config.get("sync", "bsp"), config.get("workload", "")
    try:
        uses_pulled = workload_class(name).pushes_use_pulled
    except WorkloadError:
        uses_pulled = False  # a workload this hotagg does not know: compare, as always
    if sync != "bsp" and uses_pulled:
        return False, (
            f"SYNC={sync} with WORKLOAD={name}: each mode pushes gradients at the values it "
            "pulled, stale by different amounts, so the modes push different updates and "
            "their parameters are not expected to be equal; each mode is exact when it "
            "conserved its own updates"
        )
    return True, (
        "both modes push the same updates, so their parameters must be equal, and each "
        "mode must conserve them"
    )


def run_verdict(
    phases: Mapping[str, Path], config: Mapping[str, Any], workers: int, shards: int
) -> Conservation:
    """summary.json's `conservation` of a run's phases (name -> folder)."""
    compared, why = params_compared(config)
    return {
        "params_compared": compared,
        "why": why,
        "modes": {m: check_phase(d, workers, shards, m).as_dict() for m, d in phases.items()},
    }


def exact(params_equal: bool, verdict: Conservation) -> bool:
    """A run is exact when no phase lost or doubled an update and, where the modes push the
    same updates, their parameters are equal; where they push different ones, every phase
    must have been checked and conserved (the only check there is)."""
    statuses = [m["status"] for m in verdict["modes"].values()]
    if VIOLATED in statuses:
        return False
    if verdict["params_compared"]:
        return params_equal
    return bool(statuses) and all(s == CONSERVED for s in statuses)


def not_exact_reason(summary: Mapping[str, Any]) -> str:
    """Why a run that is not exact is not (for its last line)."""
    verdict = summary.get("conservation")
    reasons = []
    if verdict:
        for mode, check in verdict["modes"].items():
            if check["status"] != CONSERVED and (
                check["status"] == VIOLATED or not verdict["params_compared"]
            ):
                reasons.append(f"{mode}: {check['status']}: {check['why']}")
    sha = summary.get("params_sha256") or {}
    if (not verdict or verdict["params_compared"]) and len(set(sha.values())) > 1:
        reasons.append("the parameters of the two modes differ (summary.json params_sha256)")
    return "; ".join(reasons) or "see summary.json"


# --- the command line ---

PHASE_ORDER = ("warmup", "calibrate", "server", "offload")


def phase_dirs(run_dir: Path) -> list[Path]:
    """The phase folders of a run (a job's of several in <phase>/job<id>/), in run order."""

    def rank(path: Path) -> tuple[int, str]:
        top = path.relative_to(run_dir).parts[0]
        for i, prefix in enumerate(PHASE_ORDER):
            if top.startswith(prefix):
                return i, str(path)
        return len(PHASE_ORDER), str(path)

    found = {
        p.parent
        for folder in ("*", "*/job*")
        for pattern in ("params*.npy", f"w*{PUSH_LOG_SUFFIX}", "ps*.json")
        for p in run_dir.glob(f"{folder}/{pattern}")
    }
    return sorted(found, key=rank)


def build_parser() -> argparse.ArgumentParser:
    p = HelpParser(prog="python -m experiment.conservation", description=__doc__.split("\n")[0])
    p.add_argument("run", type=Path, help="a run's folder, e.g. runs/latest, or one phase's")
    p.add_argument("--json", action="store_true", help="print each phase's check as JSON")
    return p


def main(argv: list[str] | None = None) -> int:
    """Exit codes: 0 every phase conserved, 1 a phase lost or doubled an update, 2 no phase
    found, 3 a phase could not be checked (a file missing or cut short; none violated)."""
    args = build_parser().parse_args(argv)
    run: Path = args.run
    if not run.is_dir():
        print(f"conservation: {run} is not a folder", file=sys.stderr)
        return 2
    dirs = phase_dirs(run) or ([run] if list(run.glob(f"w*{PUSH_LOG_SUFFIX}")) else [])
    if not dirs:
        print(
            f"conservation: no phase folders in {run} (no params*.npy or pushes)", file=sys.stderr
        )
        return 2
    checks = {
        str(d.relative_to(run)) if d != run else run.name: check_phase(d).as_dict() for d in dirs
    }
    if args.json:
        print(json.dumps(checks, indent=1))
    else:
        for phase, check in checks.items():
            print("\n".join(describe(phase, check)))
    statuses = {c["status"] for c in checks.values()}
    return 1 if VIOLATED in statuses else 3 if UNCHECKED in statuses else 0


if __name__ == "__main__":
    sys.exit(main())
