"""Is a phase's result about the network, or about this machine? A verdict per phase.

As Mininet-HiFi checks its network invariants, the runner samples what the machine did while
a phase ran and says which resource limited it:

- the machine's CPU: busy share of all cores (/proc/stat);
- each process the run started (switches, PS shards, workers): its CPU time as a share of
  one core (/proc/<pid>/stat), since each is single-threaded where it matters (the embedded
  switch, the agents; BMv2's ingress pipeline runs in one thread too);
- each link: the bytes its switch-side interface carried each way (/sys/class/net), as
  Mbit/s and as a share of the configured rate, and the packets its shaper dropped;
- the links into the parameter servers, whose utilisation says whether they were the
  bottleneck, as they are in the systems hotagg emulates (README, "Why the links are
  10 Mbit/s"), and each direction of every link ("<sender>-<receiver>",
  experiment/schema.py directed_link), so that a saturated link elsewhere is named.

The rules, in order (thresholds below):

1. `ps_link`: a PS link, the busiest link, ran at >= 80% of its rate in one direction: the
   link set the pace, whatever else was busy (the emulated regime). `link:<direction>`
   (`link:s5-s1`): another link was the busiest and ran at >= 80% of its rate in that
   direction.
2. `cpu`: the cores were busy for >= 90% of the phase: processes waited for a core, so
   times measure the machine's scheduling, not the network. The details say how much of
   that was this run's own processes, and how long each waited for a core (schedstat).
3. `switch`: a switch process used >= 90% of a core: the switch, not a link, set the pace
   (e.g. BMv2's standard build at 10 Mbit/s).
4. `ps_link`: the busiest link is a PS link at >= 50% of its rate.
5. `none`: nothing was saturated (the phase waited on timeouts or on the agents' own work).

A phase is faithful when its bottleneck is `ps_link`, or `link:<direction>` where the
model (experiment/model.py) names that direction as the mode's bottleneck too (is_faithful;
summarize() knows the model, a phase's own verdict does not). Averages over a whole phase
hide short saturation, so the CPU and link shares are also taken over every SAMPLE_SECONDS
window and the verdict reads the 90th percentile of the windows.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from experiment.schema import Fidelity, directed_link

SAMPLE_SECONDS = 0.25
CPU_BUSY = 0.90  # of all cores: the machine is the bottleneck
SWITCH_BUSY = 0.90  # of one core: the switch process is the bottleneck
LINK_SATURATED = 0.80  # of the configured rate: the busiest link set the pace, whatever else
PS_LINK_SATURATED = LINK_SATURATED  # what BW=auto asks of the PS link
PS_LINK_BUSY = 0.50  # of the configured rate: the PS link is the busiest resource
LINK_REGIME = "link:"  # + a directed link: the regime of a saturated link other than a PS's
WINDOW_PERCENTILE = 90
# With compute (with_compute): the share of the model's busy time the PS link must reach,
# 1/1.15: the link carried its bytes no more than 15% slower than the model has it.
COMPUTE_LINK_BUSY = 1 / 1.15
_CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class LinkProbe:
    """A link, seen from its switch-side interface (in the root namespace)."""

    name: str  # the topology's "<node1>-<node2>": "h5-s1" or "s1-s3"
    ifname: str
    mbps: float | None  # configured rate; None = unlimited
    to_ps: bool = False  # a link into a parameter server
    at: str = ""  # the node `ifname` belongs to; "" for node2 (a host link's switch)
    between_switches: bool = False

    def directions(self) -> tuple[str, str] | None:
        """(sent, received): the directed links the interface sends and receives on; None
        for a name that is not two nodes."""
        ends = self.name.split("-")
        if len(ends) != 2:
            return None
        at = self.at or ends[1]
        other = ends[0] if at == ends[1] else ends[1]
        return directed_link(at, other), directed_link(other, at)


def link_regime(direction: str) -> str:
    """The bottleneck of a phase a link other than a PS's saturated: "link:s5-s1"."""
    return LINK_REGIME + direction


def is_faithful(bottleneck: str, model_bottleneck: str | None = None) -> bool:
    """Whether a phase's numbers are about the network the model describes: a PS link set
    the pace, or the link the model names as the mode's bottleneck did."""
    if bottleneck == "ps_link":
        return True
    return model_bottleneck is not None and bottleneck == link_regime(model_bottleneck)


def _machine_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies over all cores since boot."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already counted in user
    return total - idle, total


def _runqueue_wait_ns(pid: int) -> int | None:
    """Nanoseconds `pid` has spent runnable but waiting for a core (/proc/<pid>/schedstat)."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _process_jiffies(pid: int) -> int | None:
    """utime + stime of `pid` (and its waited-for children), or None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # the command may contain spaces
    return sum(int(x) for x in fields[11:15])  # utime stime cutime cstime


def _link_bytes(ifname: str) -> tuple[int, int, int]:
    """(received, sent, dropped on receive) by the interface, 0s once it is gone."""
    base = Path("/sys/class/net") / ifname / "statistics"
    try:
        return (
            int((base / "rx_bytes").read_text()),
            int((base / "tx_bytes").read_text()),
            int((base / "rx_dropped").read_text()),
        )
    except OSError:
        return (0, 0, 0)


@dataclass
class _Sample:
    t: float
    machine: tuple[int, int]
    procs: dict[str, int | None]
    links: dict[str, tuple[int, int, int]]
    waits: dict[str, int | None] = field(default_factory=dict)  # runqueue wait, ns


@dataclass
class PhaseMonitor:
    """Samples the machine while a phase runs: start(), then stop() returns the verdict."""

    procs: Mapping[str, int]  # label ("switch s1", "ps0", "w3") -> pid
    links: list[LinkProbe]
    interval: float = SAMPLE_SECONDS
    _samples: list[_Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _sample(self) -> _Sample:
        return _Sample(
            time.monotonic(),
            _machine_jiffies(),
            {label: _process_jiffies(pid) for label, pid in self.procs.items()},
            {p.name: _link_bytes(p.ifname) for p in self.links},
            {label: _runqueue_wait_ns(pid) for label, pid in self.procs.items()},
        )

    def start(self) -> PhaseMonitor:
        self._samples = [self._sample()]
        self._thread = threading.Thread(target=self._run, name="fidelity", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._samples.append(self._sample())

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._samples.append(self._sample())
        return verdict(self._samples, self.links)

    def verdict_for(self, hosts: Collection[str]) -> dict[str, Any]:
        """After stop(): the verdict of one job of several, judged on the links its hosts
        are on and the links between switches, which its traffic may cross. Another job's
        saturated PS link does not set this job's pace; the machine and the switches are
        everyone's."""
        mine = [
            p
            for p in self.links
            if not set(p.name.split("-")).isdisjoint(hosts) or p.between_switches
        ]
        return verdict(self._samples, mine)


def _share(a: int | None, b: int | None, seconds: float) -> float | None:
    if a is None or b is None or seconds <= 0:
        return None
    return (b - a) / _CLK_TCK / seconds


def _windows(samples: list[_Sample]) -> list[tuple[_Sample, _Sample]]:
    return [(a, b) for a, b in zip(samples, samples[1:]) if b.t > a.t]


def verdict(samples: list[_Sample], links: list[LinkProbe]) -> dict[str, Any]:
    """The phase's measurements and its bottleneck (rules in the module docstring)."""
    first, last = samples[0], samples[-1]
    seconds = last.t - first.t
    windows = _windows(samples)

    def machine_busy(a: _Sample, b: _Sample) -> float:
        busy, total = b.machine[0] - a.machine[0], b.machine[1] - a.machine[1]
        return busy / total if total else 0.0

    cpu_mean = machine_busy(first, last)
    cpu_high = _high([machine_busy(a, b) for a, b in windows])
    processes: dict[str, dict[str, Any]] = {}
    for label in first.procs:
        # A worker exits when its iterations are done, before the phase's last sample (and
        # may start after its first): count it between the first and last samples it was
        # seen in, as a share of the whole phase (it used no CPU while it was not there).
        jiffies = [j for s in samples if (j := s.procs.get(label)) is not None]
        waits = [w for s in samples if (w := s.waits.get(label)) is not None]
        used = _share(jiffies[0], jiffies[-1], seconds) if len(jiffies) > 1 else None
        peaks = [_share(a.procs[label], b.procs[label], b.t - a.t) for a, b in windows]
        processes[label] = {
            "cpu_mean": None if used is None else round(used, 3),
            "cpu_p90": round(_high([p for p in peaks if p is not None]), 3),
            # Share of the phase it was runnable but waiting for a core.
            "runqueue_wait": round((waits[-1] - waits[0]) / 1e9 / seconds, 3)
            if len(waits) > 1 and seconds
            else None,
        }
    link_rows = [_link_row(probe, first, last, windows, seconds) for probe in links]
    switch_busy = max(
        (p["cpu_p90"] for label, p in processes.items() if label.startswith("switch")),
        default=0.0,
    )
    shaped = [r for r in link_rows if "utilization_p90" in r]
    busiest = max(shaped, key=lambda r: r["utilization_p90"], default=None)
    busiest_util = busiest["utilization_p90"] if busiest is not None else 0.0
    busiest_link = _busier_direction(busiest) if busiest is not None else None
    ps_links = [r for r in shaped if r["to_ps"]]
    ps_util = max((r["utilization_p90"] for r in ps_links), default=0.0)
    ours = sum(p["cpu_mean"] or 0.0 for p in processes.values())
    run_waits = [p["runqueue_wait"] for p in processes.values() if p["runqueue_wait"] is not None]
    ps_is_busiest = busiest is not None and busiest["to_ps"]
    busy_too = f" (the cores were {cpu_high:.0%} busy too)" if cpu_high >= CPU_BUSY else ""
    if ps_is_busiest and ps_util >= LINK_SATURATED:
        bottleneck, why = "ps_link", f"the PS link ran at {ps_util:.0%} of its rate{busy_too}"
    elif busiest_link is not None and busiest_util >= LINK_SATURATED:
        # A link that is not a PS's set the pace (the spine into the PS's leaf, say).
        bottleneck = link_regime(busiest_link)
        why = (
            f"the link {busiest_link} ran at {busiest_util:.0%} of its rate, the PS link at "
            f"{ps_util:.0%}{busy_too}"
        )
    elif cpu_high >= CPU_BUSY:
        # Our processes' share tells a saturated run from a machine busy with other work.
        bottleneck = "cpu"
        why = (
            f"the cores were {cpu_high:.0%} busy (p90 of windows); this run's processes "
            f"used {ours:.2f} of {os.cpu_count()} cores and waited for one up to "
            f"{max(run_waits, default=0.0):.0%} of the time"
        )
    elif switch_busy >= SWITCH_BUSY:
        bottleneck, why = "switch", f"a switch process used {switch_busy:.0%} of a core"
    elif ps_is_busiest and ps_util >= PS_LINK_BUSY:
        bottleneck, why = "ps_link", f"the PS link ran at {ps_util:.0%} of its rate"
    else:
        bottleneck = "none"
        if not shaped:
            why = "no link has a rate (unlimited links), and neither CPU nor switch saturated"
        else:
            elsewhere = (
                f"busiest link {busiest_link} {busiest_util:.0%}, "
                if busiest_link is not None and not ps_is_busiest
                else ""
            )
            why = (
                f"nothing saturated: {elsewhere}PS link {ps_util:.0%} of its rate, cores "
                f"{cpu_high:.0%}, switch {switch_busy:.0%} of a core"
            )
    return {
        "faithful": is_faithful(bottleneck),  # summarize() judges link: regimes by the model
        "bottleneck": bottleneck,
        "why": why,
        "seconds": round(seconds, 3),
        "machine_cpu_busy_mean": round(cpu_mean, 3),
        "machine_cpu_busy_p90": round(cpu_high, 3),
        "ps_link_utilization": round(ps_util, 3),  # p90 of windows, the busiest PS link
        # the busiest direction of the busiest link (None: no link has a rate), p90
        "busiest_link": busiest_link,
        "busiest_link_utilization": round(busiest_util, 3),
        "run_processes_cores": round(ours, 3),
        "cores": os.cpu_count(),
        "processes": processes,
        "links": link_rows,
        "rx_dropped": sum(r["rx_dropped"] for r in link_rows),
    }


def _link_row(
    probe: LinkProbe,
    first: _Sample,
    last: _Sample,
    windows: list[tuple[_Sample, _Sample]],
    seconds: float,
) -> dict[str, Any]:
    """A link's bytes and rates over the phase, each way, and its utilisation (p90 of the
    windows, the busier direction of each window)."""
    rx0, tx0, drop0 = first.links[probe.name]
    rx1, tx1, drop1 = last.links[probe.name]

    def mbps(n_bytes: int) -> float:
        return round(n_bytes * 8 / seconds / 1e6, 3) if seconds else 0.0

    row: dict[str, Any] = {
        "link": probe.name,
        "configured_mbps": probe.mbps,
        # The interface at `probe.at` sends toward the other end and receives from it.
        "to_host_mbps": mbps(tx1 - tx0),
        "from_host_mbps": mbps(rx1 - rx0),
        "rx_dropped": drop1 - drop0,
        "to_ps": probe.to_ps,
    }
    directions = probe.directions()
    if directions is not None:
        row["directions"] = {
            name: {"bytes": n, "mbps": mbps(n)}
            for name, n in zip(directions, (tx1 - tx0, rx1 - rx0))
        }
    if probe.mbps:
        rate = probe.mbps

        def share(a: _Sample, b: _Sample, i: int) -> float:
            return (b.links[probe.name][i] - a.links[probe.name][i]) * 8 / (b.t - a.t) / 1e6 / rate

        per_window = [max(share(a, b, 0), share(a, b, 1)) for a, b in windows]
        peak_mean = max(row["to_host_mbps"], row["from_host_mbps"]) / rate
        row["utilization_mean"] = round(peak_mean, 3)
        row["utilization_p90"] = round(_high(per_window), 3)
        if directions is not None:
            sent, received = directions
            row["directions"][sent]["utilization_p90"] = round(
                _high([share(a, b, 1) for a, b in windows]), 3
            )
            row["directions"][received]["utilization_p90"] = round(
                _high([share(a, b, 0) for a, b in windows]), 3
            )
    return row


def _high(values: list[float]) -> float:
    """The WINDOW_PERCENTILE of the windows' values (0 without windows)."""
    return float(np.percentile(values, WINDOW_PERCENTILE)) if values else 0.0


def _busier_direction(row: dict[str, Any]) -> str:
    """The direction of a link row that ran the busier (its name where it has none)."""
    directions = row.get("directions") or {}
    return max(
        directions, key=lambda d: directions[d].get("utilization_p90", 0.0), default=row["link"]
    )


def with_compute(v: dict[str, Any], duty: float) -> dict[str, Any]:
    """A phase's verdict when its workers compute (COMPUTE=): the links idle while the
    workers sleep, so the PS link's utilisation is read against `duty`, the share of the
    phase the model has it busy (its time per iteration over the iteration's, with compute),
    and over the whole phase (the mean: a window may fall in a compute pause). Rule 1 of
    the module doc applies to that reading, with COMPUTE_LINK_BUSY for its 80%; rule 4 does
    not. While the links idle, each packet's own delay in the switch and the agents shows,
    and nothing else measures it: BMv2 runs on a busy machine whose PS link reached 79% and
    82% of the model's share measured 35% and 22% above the model. So a phase is `ps_link`
    only when its link kept within 15% of the model's pace; below that, a cpu or switch
    verdict stands and any other is none. A saturated link other than a PS's stands."""
    if not 0 < duty < 1 or v["bottleneck"].startswith(LINK_REGIME):
        return v
    ps = [r["utilization_mean"] for r in v["links"] if r["to_ps"] and "utilization_mean" in r]
    if not ps:
        return v
    busy = max(ps) / duty
    why = (
        f"the PS link ran at {max(ps):.0%} of its rate over the phase, {busy:.0%} of the "
        f"{duty:.0%} the model has it busy between the workers' compute"
    )
    cpu = v.get("machine_cpu_busy_p90", 0.0)
    if busy >= COMPUTE_LINK_BUSY:  # rule 1
        bottleneck = "ps_link"
    elif v["bottleneck"] in ("cpu", "switch"):  # rules 2 and 3 stand
        return v
    elif cpu >= CPU_BUSY:  # a rule-1 verdict of the busiest windows: rule 2 comes first
        bottleneck, why = "cpu", f"the cores were {cpu:.0%} busy (p90 of windows); {why}"
    else:
        bottleneck, why = "none", f"{why}, below the {COMPUTE_LINK_BUSY:.0%} it must reach"
    return {**v, "bottleneck": bottleneck, "faithful": bottleneck == "ps_link", "why": why}


def summarize(
    phases: Mapping[str, dict[str, Any]],
    model_bottlenecks: Mapping[str, str] | None = None,
    duty: Mapping[str, float] | None = None,
) -> Fidelity:
    """The run's fidelity block: faithful when every measured phase was (is_faithful, with
    the model's bottleneck link of the phase's mode, `model_bottlenecks`: phase -> directed
    link); the bottleneck of each phase; the details as measured, with that judgement.
    `duty`: with compute, the share of each phase the model has the PS link busy
    (with_compute)."""
    expected = dict(model_bottlenecks or {})
    phases = {name: with_compute(v, (duty or {}).get(name, 1.0)) for name, v in phases.items()}
    details = {
        name: {
            **v,
            "faithful": is_faithful(v["bottleneck"], expected.get(name)),
            "model_bottleneck": expected.get(name),
        }
        for name, v in phases.items()
    }
    unfaithful = {name: v for name, v in details.items() if not v["faithful"]}
    bottlenecks = {name: v["bottleneck"] for name, v in details.items()}
    kinds = set(bottlenecks.values())
    elsewhere = [
        f"{name}: {v['bottleneck']} ({v['why']}; the model's bottleneck: "
        f"{v['model_bottleneck'] or 'none, no bound'})"
        for name, v in unfaithful.items()
        if v["bottleneck"].startswith(LINK_REGIME)
    ]
    machine = [
        f"{name}: {v['bottleneck']} ({v['why']})"
        for name, v in unfaithful.items()
        if not v["bottleneck"].startswith(LINK_REGIME)
    ]
    warnings = []
    if machine:
        warnings.append("not network-bound: " + "; ".join(machine))
    if elsewhere:
        warnings.append("bound by a link the model does not name: " + "; ".join(elsewhere))
    return {
        "faithful": not unfaithful,
        "bottleneck": kinds.pop() if len(kinds) == 1 else "mixed",
        "bottlenecks": bottlenecks,
        "warning": "; ".join(warnings) or None,
        "details": details,
    }
