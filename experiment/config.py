"""A run's configuration and the experiment's vocabulary: what every other module of
experiment/ shares (RunConfig, the hot-set modes and sources, the run's errors, constants),
so that they import it and not each other.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from contract.enums import NameEnum
from contract.p4files import REPO
from hosts.workloads import WorkloadName, workload_class
from topologies.targets import TargetName

JOB_ID = 1  # the job of a one-job run; JOBS=J numbers its jobs 1..J
# The options JOBS=J takes per job, as a list (SKEW=1.1,1.3); one value applies to every job.
PER_JOB_OPTIONS = ("workers", "skew", "keys", "keys_per_iter", "seed", "workload")
DEFAULT_JOB_WORKERS = 4  # JOBS=J without WORKERS: each job's, as topologies/star.json has
# BW=auto tries these link rates (Mbit/s), rising, with this many iterations each.
AUTO_RATES = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0)
CALIBRATION_ITERATIONS = 8
# A generated workload's warm-up reads its stream this far on: far beyond any measured
# iteration, so the hot set is learnt from iterations that are not measured.
WARMUP_STREAM_OFFSET = 1_000_000


class HotSetMode(NameEnum):
    """HOTSET=: the hot set during the offload phase."""

    STATIC = "static"  # the warm-up's, frozen
    DYNAMIC = "dynamic"  # re-selected by the online loop (experiment/hotset.py)


class HotSetSource(NameEnum):
    """HOTSET_SOURCE=: what the online loop measures the keys' rates from."""

    PS = "ps"  # the PS shards' .live counters
    SWITCH = "switch"  # the hot-key tables' hit counters and the cold-key sketch's reports


# Iterations between the online loop's re-selections, by what it reads (hotset_source). With
# the PS's counters, every iteration: a key that enters the head is in the set an iteration
# sooner, and the change test looks back as many iterations (experiment/hotset.py
# change_window). The switch's source stays at 2: each step reads the hit counters and the
# followed sketch cells (~10 ms of the embedded switch's CPU), and a report threshold over one
# iteration (2 updates) would report many more tail keys; not measured at 1.
HOTSET_EVERY: dict[HotSetSource, int] = {HotSetSource.PS: 1, HotSetSource.SWITCH: 2}


class ExperimentError(RuntimeError):
    """The run cannot go on; the message says why and what to do."""


class PreflightError(ExperimentError):
    """The run cannot start: bad options or missing prerequisites."""


class Aggregate(NameEnum):
    """Where hot keys are aggregated (docs/design.md sections 2 and 7)."""

    PS_LEAF = "ps-leaf"  # the switch the PS hangs off
    LEAVES = "leaves"  # every leaf, partial sums flushed up to the PS's leaf


class Split(NameEnum):
    """SPLIT=: how JOBS=J share the switch's HOT_SLOTS (docs/design.md section 9)."""

    SAVINGS = "savings"  # the controller's split that saves the most PS-link bytes in total
    EQUAL = "equal"  # HOT_SLOTS // J each


@dataclass
class RunConfig:
    target: str = TargetName.EMBEDDED  # a registered target's name (topologies/targets.py)
    topo: Path = REPO / "topologies" / "star.json"
    workers: int = 0  # 0: every worker host of the topology (options.check fills it in)
    iterations: int = 50
    skew: float = 1.1
    keys: int = 100_000
    keys_per_iter: int = 256
    hot_slots: int = 256
    loss: float = 0.0
    seed: int = 1
    workload: str = WorkloadName.ZIPF  # a registered workload's name (hosts/workloads/)
    aggregate: Aggregate = Aggregate.PS_LEAF
    warmup: int = 5
    # Mbit/s on every link, instead of the topology's (None: as given; "auto": calibrated)
    bw: float | str | None = None
    ps: list[str] = field(default_factory=list)  # PS hosts, for files without hotagg's roles
    runs_dir: Path = REPO / "runs"
    grpc_base_port: int = 0  # P4Runtime port of the first switch; 0: free ports
    intf_prefix: str = ""  # keeps switch interface names of concurrent runs apart; "": own
    keep: bool = False  # leave the network up after the run, until Ctrl-C
    # SERVERS=: the machines the run is spread over ([user@]host,...; "": this one alone),
    # and PLACE=: node@server overrides of the automatic placement (experiment/placement.py)
    servers: str = ""
    place: str = ""
    # A switch that dies during a phase is restarted and the phase run again, this many
    # times per run at most (0: the run ends, ProcessDied).
    switch_restarts: int = 0
    phase_timeout: float = 600.0
    extra_workload_args: list[str] = field(default_factory=list)
    # The hot set during the offload phase; with DYNAMIC the online loop re-selects every
    # `hotset_every` iterations from what `hotset_source` measures.
    hotset: HotSetMode = HotSetMode.STATIC
    hotset_every: int = 0  # 0: the source's pace, HOTSET_EVERY[hotset_source]
    hotset_source: HotSetSource = HotSetSource.PS
    drift: str | None = None  # the measured phases' --drift (hosts/workloads/), or None
    # Several jobs on one switch: `jobs` of them, each with its own workers and PS; `per_job`
    # holds an option's value for each job where it was given as a list (PER_JOB_OPTIONS).
    jobs: int = 1
    per_job: dict[str, list[Any]] = field(default_factory=dict)
    split: Split = Split.SAVINGS
    job_id: int = JOB_ID  # the job this configuration describes (job_configs)
    # SYNC=: bsp, ssp:S or async (hosts/ps_config.py SyncMode; docs/design.md section 8)
    sync: str = "bsp"
    # Emulated compute of the measured phases (hosts/compute.py): COMPUTE= and STRAGGLERS= in
    # their normal form (None: none), and REAL_BW= (Mbit/s), the real link rate the emulated
    # links stand for. `time_scale`: emulated seconds per real second, REAL_BW over the PS
    # link's rate, set once the links' rate is known (after BW=auto's calibration).
    compute: str | None = None
    stragglers: str | None = None
    real_bw: float | None = None
    time_scale: float | None = None

    def __post_init__(self) -> None:
        if not self.hotset_every:  # an unknown source is refused where it is checked
            self.hotset_every = HOTSET_EVERY.get(self.hotset_source, HOTSET_EVERY[HotSetSource.PS])

    def as_dict(self) -> dict[str, Any]:
        """config.json's fields: every option, paths as strings, names as their values."""
        d = asdict(self)
        d["topo"], d["runs_dir"] = str(self.topo), str(self.runs_dir)
        for key in ("target", "workload", "hotset", "hotset_source", "split"):
            d[key] = str(d[key])
        return d


def job_configs(cfg: RunConfig) -> list[RunConfig]:
    """One configuration per job of a JOBS=J run, jobs 1..J, each with its own value of every
    per-job option; a one-job run's is itself."""
    if cfg.jobs == 1:
        return [cfg]
    out = []
    for j in range(cfg.jobs):
        own = {name: values[j] for name, values in cfg.per_job.items()}
        out.append(replace(cfg, jobs=1, per_job={}, job_id=JOB_ID + j, **own))
    return out


def warmup_stream_offset(cfg: RunConfig) -> int:
    """Where the warm-up reads the workload: a finite one (a trace) from its start, as a
    running system could profile it; a generated one far further on, so that it learns
    which keys are popular without seeing the iterations it is then measured on."""
    return 0 if workload_class(cfg.workload).finite_stream else WARMUP_STREAM_OFFSET


def measured_stream_offset(cfg: RunConfig) -> int:
    """Where the measured phases read the workload: a finite one after the iterations the
    warm-up profiled; a generated one from its start (its warm-up reads far further on)."""
    return cfg.warmup if workload_class(cfg.workload).finite_stream else 0


def freq_name(shard: int, dynamic: bool) -> str:
    """A PS shard's frequency file in a phase: where the online loop reads it while the PS
    runs, the PS's counters themselves (.live, contract/freqfile.py: rewriting a file every few
    iterations cost the PS CPU that showed in the iteration time); else a CSV."""
    return f"freq{shard}.live" if dynamic else f"freq{shard}.csv"


def say(msg: str) -> None:
    print(f"hotagg: {msg}", flush=True)
