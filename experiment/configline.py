"""The configuration line: what ran, in one line (target and its build, topology, workers,
iterations, workload, the link rate and how it was chosen, the seed, then what is not at its
default), as the table, report.md, every figure's title and the sweep's report say it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiment.config import HotSetSource, RunConfig
from hosts.compute import ComputeSpec
from hosts.workloads import WORKLOADS, Workload
from topologies.targets import TARGETS
from topologies.topology import Topology


@dataclass(frozen=True)
class ConfigPart:
    """One item of the configuration line: its text in the table and report, and a short
    one for figure titles."""

    name: str
    text: str
    short: str


def _config(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The run's configuration: config.json's fields, over summary.json's top level."""
    return {**summary, **(summary.get("config") or {})}


def topology_shape(topology: Topology) -> str:
    """What the topology is, for the config line: a star (one switch) or how many switches,
    and the PS shards where there are several."""
    switches = len(topology.switches)
    shape = "star" if switches == 1 else f"{switches} switches"
    shards = len(topology.parameter_servers)
    return shape + (f", {shards} PS shards" if shards > 1 else "")


def _mbps(rates: list[float | None]) -> str:
    limited = sorted({r for r in rates if r})
    text = " and ".join(f"{r:g}" for r in limited) + " Mbit/s" if limited else ""
    if None in rates or not rates:
        text += " and unlimited" if text else "unlimited"
    return text


def links_part(config: Mapping[str, Any]) -> ConfigPart:
    """The link rate and how it was chosen: BW=auto's calibration, BW=N, or the topology's."""
    rates = config.get("link_bandwidth_mbps") or []
    bw = config.get("bw")
    if bw == "auto":
        auto = config.get("bw_auto") or {}
        if not auto:  # the run stopped before the calibration ended
            how = "BW=auto: not calibrated"
        elif any(t.get("saturated") for t in auto.get("trials", [])):
            how = "BW=auto: calibrated, highest rate at which a link saturated in both modes"
        else:
            how = "BW=auto: calibrated, no rate tried saturated the PS link, so the lowest"
        short = "BW=auto"
    elif bw is not None:
        how, short = f"BW={bw:g}: set", f"BW={bw:g}"
    else:
        how, short = "the topology's own", "topology's"
    return ConfigPart("links", f"links {_mbps(rates)} ({how})", f"{_mbps(rates)} ({short})")


def workload_part(config: Mapping[str, Any]) -> ConfigPart:
    """The workload, in its class's words (hosts/workloads/); a workload no longer registered
    in the default words."""
    defaults = RunConfig().as_dict()
    values = {**defaults, **config}
    cls = WORKLOADS.get(str(values["workload"]), Workload)
    text, short = cls.config_words(values, defaults)
    return ConfigPart("workload", text, short)


def target_detail(config: Mapping[str, Any]) -> str | None:
    """The build of the run's target that its config.json names (BMv2's binary), if any."""
    cls = TARGETS.get(str(config.get("target")))
    return cls.detail_of(config) if cls is not None else None


def config_parts(summary: Mapping[str, Any]) -> list[ConfigPart]:
    """The configuration line's items, in its order; the ones at their defaults (hot set,
    drift, loss, slots) are left out. `summary`: a summary.json (experiment/schema.py), or
    any part of one that has its `config`."""
    config = _config(summary)
    target = str(config.get("target", "?"))
    binary = target_detail(config)
    topology = Path(str(config.get("topo") or config.get("topology") or "?")).name
    shape = config.get("topology_shape")
    parts = [
        ConfigPart(
            "target",
            f"{target} target" + (f" ({binary})" if binary else ""),
            target + (f" ({binary})" if binary else ""),
        ),
        ConfigPart("topology", f"topology {topology}" + (f" ({shape})" if shape else ""), topology),
        ConfigPart("workers", f"{config.get('workers', '?')} workers", ""),
        ConfigPart("iterations", f"{config.get('iterations', '?')} iterations", ""),
        workload_part(config),
        links_part(config),
        ConfigPart("seed", f"seed {config.get('seed', '?')}", ""),
    ]
    if config.get("aggregate", RunConfig.aggregate) != RunConfig.aggregate:
        parts.append(ConfigPart("aggregate", "aggregation at every leaf", "every leaf"))
    slots = config.get("hot_slots", RunConfig.hot_slots)
    if slots != RunConfig.hot_slots:
        parts.append(ConfigPart("hot_slots", f"{slots} hot slots", ""))
    if config.get("hotset", RunConfig.hotset) != RunConfig.hotset:
        every = config.get("hotset_every")
        switch = config.get("hotset_source") == HotSetSource.SWITCH
        source = "the switch" if switch else "the PS's counters"
        pace = f"every {every} iteration{'s' if every != 1 else ''}, " if every else ""
        parts.append(
            ConfigPart(
                "hotset",
                f"{config['hotset']} hot set ({pace}from {source})",
                f"{config['hotset']} hot set",
            )
        )
    parts += compute_parts(config)
    if config.get("sync", "bsp") != "bsp":
        parts.append(ConfigPart("sync", f"SYNC={config['sync']}", config["sync"]))
    if config.get("drift"):
        parts.append(ConfigPart("drift", f"drift {config['drift']}", ""))
    if config.get("loss"):
        parts.append(ConfigPart("loss", f"loss {config['loss']:g}", ""))
    return parts


def rate_text(mbps: float) -> str:
    """A link rate in the unit that reads best: 10 Gbit/s, 100 Mbit/s."""
    for unit, size in (("Tbit/s", 1e6), ("Gbit/s", 1e3)):
        if mbps >= size:
            return f"{mbps / size:g} {unit}"
    return f"{mbps:g} Mbit/s"


def compute_parts(config: Mapping[str, Any]) -> list[ConfigPart]:
    """COMPUTE= (and what a real-time one is in the run's time), STRAGGLERS= and the time
    scale REAL_BW= gives, where set."""
    parts = []
    if spec := ComputeSpec.parse(config.get("compute") or ""):
        scale = config.get("time_scale")
        emulated = f" = {spec.scaled(scale)} emulated" if spec.real and scale else ""
        parts.append(ConfigPart("compute", f"compute {spec}{emulated}", f"compute {spec}"))
    if config.get("stragglers"):
        parts.append(ConfigPart("stragglers", f"stragglers {config['stragglers']}", ""))
    if scale := config.get("time_scale"):
        real = rate_text(float(config["real_bw"]))
        parts.append(
            ConfigPart(
                "time_scale",
                f"time scale 1:{scale:.4g} (the links stand for {real})",
                f"time 1:{scale:.4g}",
            )
        )
    return parts


def join_config(parts: list[ConfigPart], short: bool = False) -> str:
    """The configuration line of `parts` (a run's, or a sweep's grid), or its short form."""
    if short:
        return ", ".join(p.short or p.text for p in parts)
    return "config: " + ", ".join(p.text for p in parts)


def config_line(summary: Mapping[str, Any]) -> str:
    """The one line that says what ran: target (and its build), topology, workers,
    iterations, workload, the link rate and how it was chosen, the seed, then HOT_SLOTS,
    HOTSET, COMPUTE, STRAGGLERS, the time scale, DRIFT and LOSS where set."""
    return join_config(config_parts(summary))


def short_config(summary: Mapping[str, Any]) -> str:
    """The configuration line shortened for a figure's title."""
    return join_config(config_parts(summary), short=True)
