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


class LatencySplit(TypedDict):
    """Where a request kind's mean time went (the IMC 2020 split), in microseconds."""

    requests: int
    answered_by_switch: int
    mean_total_us: float | None
    mean_ps_queueing_us: float | None
    mean_ps_service_us: float | None
    mean_network_and_switch_us: float | None


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


class ModelBound(TypedDict):
    """The bound of the run's configuration (experiment/model.py Prediction): over every
    link (`<mode>.bound_ms`, `bound_speedup`) and over the PS link alone (`server_ms`,
    `offload_ms`, `speedup`; on a star the two agree)."""

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


class Fidelity(TypedDict):
    """Which resource set each measured phase's pace (experiment/fidelity.py)."""

    faithful: bool
    # "ps_link", "link:<directed link>", "cpu", "switch", "none"; "mixed" where phases differ
    bottleneck: str
    bottlenecks: dict[str, str]  # phase -> bottleneck
    warning: str | None
    # phase -> its verdict as measured, judged (`faithful`) against `model_bottleneck`
    details: dict[str, dict[str, Any]]


class Summary(TypedDict):
    """summary.json."""

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
