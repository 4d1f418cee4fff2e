"""summary.json's schema: one typed description of what a run's summary holds, the one
the run writes it from (experiment/summary.py) and the report, the sweep and the plots read
it through (load_summary checks the version).

One name per concept: `warmup_hot_set` is the hot set the warm-up chose (its size and the
share of the warm-up's updates it covers), `offload_hot_set` the hot set during the offload
phase, iteration by iteration (its coverage against the oracle, and the online loop's
moves). config.json's options keep their option names (`hotset` is HOTSET=, the mode).

Links: a directed link is named "<sender>-<receiver>" (directed_link): on leafspine:4:4
"s5-s1" carries what the spine s5 sends into leaf s1, "s1-h4" what s1 sends to the PS h4,
"h4-s1" what the PS sends. A topology link's own name is "<node1>-<node2>" as its file
lists it (the fidelity verdict's `links` rows), which is also its node1 -> node2 direction.

SCHEMA_VERSION counts changes that rename or remove a field; a reader refuses any other
version, with a message that says so, instead of reading a field that means something else.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypedDict, cast

from hosts.stats import dumps_strict

# 2: `hot_set` became `warmup_hot_set`, `hotset` became `offload_hot_set`, and the version
# itself was added (a summary without one is version 1).
# 3: the model counts every link (`model.<mode>.links`, `bottleneck`, `bound_ms`,
# `model.bound_speedup`), each mode records `link_bytes_per_iteration`, and a phase's
# bottleneck may be `link:<directed link>`.
SCHEMA_VERSION = 3


def directed_link(sender: str, receiver: str) -> str:
    """The name of the direction `sender` -> `receiver` of a link: "s5-s1"."""
    return f"{sender}-{receiver}"


class SummaryError(ValueError):
    """A summary.json this hotagg cannot read: another schema version, or fields missing."""


class Quantiles(TypedDict):
    """Milliseconds over a phase's requests of one kind (None: no request of that kind)."""

    p50: float | None
    p99: float | None
    mean: float | None


class _LatencySplit(TypedDict):
    requests: int
    answered_by_switch: int
    mean_total_us: float | None  # first send -> reply
    mean_ps_queueing_us: float | None  # kernel receive -> start of the answer
    mean_ps_service_us: float | None
    mean_network_and_switch_us: float | None  # the rest of mean_total_us


class LatencySplit(_LatencySplit, total=False):
    """Where a request kind's mean time went (the IMC 2020 split), in microseconds; the
    components are experiment/dissection.py's (its module doc says how each is measured or
    derived). Means are over all the kind's requests, so the components add up to
    mean_ready_to_reply_us."""

    resent: int  # requests sent more than once: their time after the first send is `unsplit`
    unmatched: int  # requests the PS answered with no PS record of it (also `unsplit`)
    negative_segments: int  # PS-served requests with a measured segment below -1 µs
    mean_ready_to_reply_us: float | None  # mean_total_us plus the wait for the window
    components_us: dict[str, float | None]  # dissection.COMPONENTS -> mean
    # the same over the requests the PS answered, sent once: the PS path alone
    ps_served_components_us: dict[str, float | None]


class DissectionBasis(TypedDict):
    """What a mode's dissection rests on: the clock, the link rate serialization is derived
    at, and the estimate of one pass through the switch."""

    clock: str
    link_mbps: float | None
    # the worker links delay a packet by its serialization (None: no request to tell by)
    link_serializes: bool | None
    switch_pass_us: dict[str, float]  # per kind: median over switch-answered requests
    switch_pass_samples: dict[str, int]  # per kind (0: none answered, the pass counted 0)
    max_wall_clock_drift_us: float | None  # the workers' monotonic vs wall clock by the end


class InFlight(TypedDict):
    """The PS's requests in flight over a phase, as mean counts per bin of `bin_s` from
    `start` (wall clock, s): at the PS (received, not yet answered) and toward it (sent by
    a worker, not yet answered by the PS)."""

    start: float
    bin_s: float
    at_ps: list[float]
    to_ps: list[float]
    mean_at_ps: float
    max_at_ps: int
    mean_to_ps: float
    max_to_ps: int


class LinkBytes(TypedDict):
    """A directed link's bytes per measured iteration in one phase."""

    # its sender's interface's bytes over the phase / iterations (None: no verdict)
    measured: float | None
    model: float | None  # experiment/model.py's count (None: no bound, unlimited links)


class _ModeSummary(TypedDict):
    seconds: float
    updates_total: int
    updates_in_switch: int
    ps_packets_in: int
    ps_control_exchanges: int
    retransmissions: int
    pulls_answered_by_switch: int
    ps_packets_per_iteration: list[int]
    latency_dissection: dict[str, LatencySplit]  # "push", "pull"
    switch_stats: dict[str, dict[str, int]]  # switch -> stat name -> packets
    iteration_ms: Quantiles
    push_ms: Quantiles
    pull_ms: Quantiles
    # directed link ("<sender>-<receiver>") -> bytes per iteration, measured and modelled
    link_bytes_per_iteration: dict[str, LinkBytes]


class ModeSummary(_ModeSummary, total=False):
    """One measured phase: `modes.server` or `modes.offload`."""

    loss_curve: list[float]  # mean training loss per iteration (workloads that have one)
    # pulls the PS answered, by staleness: iterations whose sums the value lacked (0 in BSP;
    # up to S under SYNC=ssp:S; docs/design.md section 8)
    staleness: dict[str, int]
    latency_dissection_basis: DissectionBasis
    ps_in_flight: InFlight | None  # None: no request reached the PS


class WarmupHotSet(TypedDict):
    """The hot set the warm-up's update counts chose (controller/hotset.py choose)."""

    keys: int  # how many keys it holds (at most HOT_SLOTS)
    coverage: float  # the share of the warm-up's updates on them
    covered: int
    total: int
    candidates: int  # keys updated in the warm-up


class HotSetMove(TypedDict):
    """One re-selection of the online loop."""

    step: int
    iteration: int | None
    added: int
    removed: int
    hot: int


class OffloadHotSet(TypedDict):
    """The offload phase's hot set per measured iteration (experiment/hotset.py, its
    module doc and docs/experiment.md say what each field means)."""

    mode: str  # HOTSET=
    drift: str | None
    budget: int
    every: int | None  # dynamic: iterations between re-selections
    source: str | None  # dynamic: HOTSET_SOURCE=
    coverage: list[float]
    oracle_coverage: list[float]
    updates: list[int]
    summed: list[int]
    coverage_mean: float
    oracle_coverage_mean: float
    coverage_ratio: float | None
    expected_oracle_coverage: list[float] | None
    expected_oracle_coverage_mean: float | None
    coverage_ratio_expected: float | None
    coverage_ratio_by_epoch_offset: list[float | None] | None
    moves: list[HotSetMove]
    reselections: int
    keys_moved: int


class ModeLoad(TypedDict):
    """One mode's modelled bytes per iteration (experiment/model.py LinkLoad)."""

    to_ps: float  # bytes per iteration on the busiest PS link, toward the PS
    from_ps: float  # ... and from the PS
    links: dict[str, float]  # every directed link "<sender>-<receiver>" -> bytes
    bottleneck: str  # the directed link whose bytes take longest at its rate
    bound_ms: float  # that time: the mode's bound over every link
    # the bound with the barrier's steps in order after the other bytes (model._serial_ms)
    serial_ms: float


class _IterationTimes(TypedDict):
    p50_ms: float
    p99_ms: float
    mean_ms: float
    communication_ms: float  # mean, the same iterations without compute


class IterationTimes(_IterationTimes, total=False):
    """One mode's modelled iteration with compute (experiment/model.py iteration_ms; under
    ssp:S and async worker_timelines, over every worker's iterations)."""

    period_ms: float  # ssp, async: the modelled run's time over its iterations
    staleness_mean: float | None  # ssp, async: per pull, iterations not yet applied


class _IterationBound(TypedDict):
    slowest_compute_ms: float  # mean over iterations of the slowest worker's compute
    server: IterationTimes
    offload: IterationTimes
    speedup: float | None  # server p50_ms / offload p50_ms


class IterationBound(_IterationBound, total=False):
    """The model with compute: iteration = compute + communication for the run's own
    compute draws (COMPUTE=, STRAGGLERS=): in BSP the critical path through the slowest
    worker, in ssp:S and async each worker's own iterations (`sync` names which)."""

    sync: str  # the SYNC= mode modelled
    switch_summed: float | None  # offload: the share of pushed entries the switch sums


class _ModelBound(TypedDict):
    aggregate: str  # the aggregation design counted (AGGREGATE=)
    server: ModeLoad
    offload: ModeLoad
    mbps: float  # the busiest PS link's rate
    hot_keys: int
    hot_coverage: float
    server_ms: float
    offload_ms: float
    speedup: float
    bound_speedup: float  # server.bound_ms / offload.bound_ms


class ModelBound(_ModelBound, total=False):
    """The bound of the run's configuration (experiment/model.py Prediction): over every
    link (`<mode>.bound_ms`, `bound_speedup`) and over the PS link alone (`server_ms`,
    `offload_ms`, `speedup`; on a star the two agree); with COMPUTE=, the iteration model
    (`iteration`), which the run's speed-up is compared with (model_speedup)."""

    iteration: IterationBound
    serial_speedup: float  # server.serial_ms / offload.serial_ms


def model_speedup(model: ModelBound | None) -> float | None:
    """The speed-up the model predicts: the iteration model's with compute, else the
    busiest links' bound's."""
    if not model:
        return None
    iteration = model.get("iteration")
    return iteration["speedup"] if iteration else model["bound_speedup"]


class Fidelity(TypedDict):
    """Which resource set each measured phase's pace (experiment/fidelity.py)."""

    faithful: bool
    # "ps_link", "link:<directed link>", "cpu", "switch", "none"; "mixed" where phases differ
    bottleneck: str
    bottlenecks: dict[str, str]  # phase -> bottleneck
    warning: str | None
    # phase -> its verdict as measured, judged (`faithful`) against `model_bottleneck`
    details: dict[str, dict[str, Any]]


class ComputeMode(TypedDict):
    """One measured phase's compute as the workers slept it (ms, from each pull's reply)."""

    mean_ms: float | None  # over every worker and iteration
    slowest_mean_ms: float | None  # mean over iterations of the slowest worker's
    per_worker_mean_ms: list[float | None]


class ComputeSummary(TypedDict):
    """COMPUTE=, STRAGGLERS= and the time scale, as set and as the workers slept them."""

    compute: str  # as given (normal form)
    emulated: str  # in the run's emulated time (a real: one times time_scale)
    stragglers: str | None
    real_bw_mbps: float | None  # REAL_BW=: the real link rate the links stand for
    time_scale: float | None  # emulated seconds per real second (REAL_BW / PS link rate)
    modes: dict[str, ComputeMode]


class KeyDifference(TypedDict):
    """A key whose final parameter is not its initial one with every pushed update applied
    once (experiment/conservation.py)."""

    key: int
    expected: int  # initial minus every update pushed to it (the PS subtracts, in int64)
    actual: int  # as the PS wrote it
    reading: str  # which update was lost or counted twice, where one single update explains it


class PhaseConservation(TypedDict):
    """One phase's conservation check (experiment/conservation.py)."""

    status: str  # conserved | violated | unchecked (a file missing or cut short: `why`)
    why: str
    workers: int
    updates: int  # entries the workers pushed (once each, however often resent)
    keys: int  # distinct keys they touched
    differing_keys: int
    lost: int  # differing keys one update applied too few times explains
    doubled: int  # ... one update applied twice explains
    first_differences: list[KeyDifference]  # the lowest keys that differ


class Conservation(TypedDict):
    """Each phase's conservation check (the warm-up and the measured ones) and how exactness
    is judged: where both modes push the same updates, their parameters must also be equal
    (`params_compared`)."""

    params_compared: bool
    why: str  # why the modes' parameters are or are not compared
    modes: dict[str, PhaseConservation]


class _Summary(TypedDict):
    schema_version: int
    target: str
    topology: str  # the topology file's name
    workers: int
    iterations: int
    seed: int
    workload: str
    loss: float
    hot_slots: int  # the budget; warmup_hot_set.keys is what was used
    link_bandwidth_mbps: list[float | None] | None
    # the modes' parameters are equal where compared, and no phase lost or doubled an update
    # (conservation; where the parameters are not compared, every phase conserved them)
    exact: bool
    params_sha256: dict[str, str]  # mode -> sha256 of its final parameters
    warmup_hot_set: WarmupHotSet
    config: dict[str, Any]  # config.json: the options, and what the run learnt
    modes: dict[str, ModeSummary]  # "server", "offload"
    speedup: dict[str, float | None]  # server-only p50 over offload's, per latency kind
    ps_packet_reduction: float | None
    offloaded_update_share: float | None
    model: ModelBound | None
    offload_hot_set: OffloadHotSet | None
    fidelity: Fidelity


class Summary(_Summary, total=False):
    """summary.json."""

    compute: ComputeSummary  # with COMPUTE=
    # every pushed update applied once, per measured phase, recomputed from the raw pushes;
    # `exact` takes it in (experiment/conservation.py)
    conservation: Conservation


def dumps_summary(summary: Summary) -> str:
    """summary.json's text: strict JSON (no NaN), indented."""
    return dumps_strict(summary, indent=2) + "\n"


def check_summary(data: object, where: str = "summary") -> Summary:
    """`data` as a Summary: SummaryError unless it is this schema version with every field."""
    if not isinstance(data, dict):
        raise SummaryError(f"{where}: not a JSON object")
    version = data.get("schema_version", 1)
    if version != SCHEMA_VERSION:
        raise SummaryError(
            f"{where}: summary schema version {version}, this hotagg reads version "
            f"{SCHEMA_VERSION} (experiment/schema.py); run it again to write it anew"
        )
    missing = sorted(Summary.__required_keys__ - data.keys())
    if missing:
        raise SummaryError(f"{where}: fields missing: {', '.join(missing)}")
    return cast(Summary, data)


def load_summary(path: Path) -> Summary:
    """A run's summary.json, checked (check_summary)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise SummaryError(f"{path}: {e}") from None
    return check_summary(data, str(path))


# -- a run of several jobs on one switch (JOBS=J): experiment/jobs_summary.py -------------


class PsLinkBytes(TypedDict):
    """A job's PS link, both directions summed ("<ps>-<sw>" and "<sw>-<ps>"), in bytes per
    iteration of each measured mode and what offload saved against server-only."""

    server: LinkBytes
    offload: LinkBytes
    saved: LinkBytes  # server - offload


class JobSplit(TypedDict):
    """One job under one way of sharing the switch's slots (a split)."""

    slots: int  # the slots the split gave the job
    hot_keys: int  # the keys its hot set holds (at most `slots`)
    warmup_coverage: float  # the share of its warm-up's updates on them
    speedup: float | None  # its server-only p50 iteration over its offload p50
    model_speedup: float | None  # the model's (bound_speedup; None: no bound)
    exact: bool
    faithful: bool
    bottleneck: str  # its Summary's fidelity bottleneck
    ps_link_bytes: PsLinkBytes


class JobResult(TypedDict):
    """One job of the run and its numbers under every split."""

    job_id: int
    ps_host: str
    switch: str
    ps_links: list[str]  # the two directed links counted: "<ps>-<sw>", "<sw>-<ps>"
    config: dict[str, Any]  # its own settings (skew, seed, workers, keys, workload)
    splits: dict[str, JobSplit]  # split name -> numbers


class SplitTotals(TypedDict):
    """Over the jobs under one split, measured and the model's (None: a job's is missing)."""

    speedup_sum: float | None
    model_speedup_sum: float | None
    ps_link_saved: float | None  # bytes per iteration, the jobs' PS links summed
    model_ps_link_saved: float | None
    jain: float | None  # Jain's fairness index of the jobs' speed-ups
    model_jain: float | None


class SavingsCheck(TypedDict):
    """Check 1: does `split` save more PS-link bytes in total than `baseline`, measured?"""

    split: str
    baseline: str
    passed: bool | None  # None: a measurement missing, or the two gave every job equal slots
    measured: float | None  # total PS-link bytes saved per iteration under `split`
    baseline_measured: float | None
    model: float | None
    baseline_model: float | None
    model_passed: bool | None  # what the model says of the same comparison
    same_slots: bool  # every job got as many slots under both: nothing to compare
    why: str


class JobRatio(TypedDict):
    """Check 2 for one job: its speed-up under `split` over its speed-up under `baseline`
    (the baseline's offload p50 over the split's), measured against the model's."""

    job_id: int
    measured: float | None
    model: float | None
    floor: float | None  # the least measured ratio that passes
    passed: bool | None


class WorseCheck(TypedDict):
    """Check 2: no job does worse under `split` than under `baseline` by more than the
    model says, within `tolerance`."""

    split: str
    baseline: str
    tolerance: float
    passed: bool | None  # None: a job's ratio could not be measured or modelled
    jobs: list[JobRatio]


class JobFidelity(TypedDict):
    job_id: int
    faithful: bool
    bottleneck: str
    warning: str | None


class SplitFidelity(TypedDict):
    """Every job's fidelity verdict under one split (each its Summary's `fidelity`)."""

    faithful: bool
    jobs: list[JobFidelity]


class JobsChecks(TypedDict):
    """What issue 30 asks of a run of several jobs, each with its numbers beside it."""

    beats_baseline: list[SavingsCheck]  # one per split other than the baseline
    no_job_worse: list[WorseCheck]  # likewise
    exact: bool  # every job exact under every split
    fidelity: dict[str, SplitFidelity]  # split name -> verdicts


class JobSummaries(TypedDict):
    job_id: int
    summaries: dict[str, Summary]  # split name -> Summary of (server, that split's offload)


class JobsSummary(TypedDict):
    """jobs.json: a run of several jobs on one switch, its slots shared between them in
    several ways (splits), each job's own Summary per split kept whole."""

    schema_version: int
    kind: str  # "jobs"
    config: dict[str, Any]  # the run's config.json
    switch: str
    baseline: str  # the split the others are compared with ("equal")
    splits: list[str]  # split names, the baseline last
    jobs: list[JobResult]
    totals: dict[str, SplitTotals]  # split name -> totals
    checks: JobsChecks
    exact: bool
    faithful: bool  # every job faithful under every split
    job_summaries: list[JobSummaries]
