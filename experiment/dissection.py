"""Where a request's time goes (the IMC 2020 study's dissection), from the workers' and the
PS shards' request logs (hosts/worker.py and hosts/ps_log.py LOG_COLUMNS).

Every process of a run lives on one machine, so the worker's send and reply times, the PS's
kernel receive time (SO_TIMESTAMPNS), its start and its reply time are all read off one
clock, CLOCK_REALTIME (the worker moves its monotonic times onto it once; its summary's
`wall_clock_drift_us` says how far the two clocks moved apart by the end). A request's
timestamps therefore telescope into these components, which add up to its time from ready
to reply:

- window: ready (handed to the reliable channel) -> first send, measured at the worker;
- to_switch: the request's serialization on the worker's link (its wire bytes * 8 / the
  link rate), derived, where the links serialize: a link shaped by tc htb with a burst
  (Mininet's 15 kB) passes a packet at once while it has tokens, and a run shows which
  applies by its fastest switch-answered requests (their 5th percentile), which either
  took their serialization both ways or came back sooner (then to_switch is 0: the
  veth's transfer, microseconds, stays in the switch's share). A switch slower than the
  serialization (BMv2) also passes that test: the split between to_switch and switch is
  then uncertain by the serialization, their sum is not;
- switch: one pass through the switch, derived per kind: the median latency of the run's
  unresent requests the switch answered (less their serialization where the links
  serialize). What it holds beside the switch's own time, the transfer over the idle
  worker link and the worker's wake-up, makes it an upper bound; the switch's time
  cannot be read off its packets;
- ps_link: the rest of the way to the PS's kernel receive: the PS link's queue, the
  request's own transmission there, and any further switch on the path;
- ps_socket: kernel receive -> the PS begins handling it (the socket buffer and the batch
  ahead of it), measured;
- ps_held: a pull the PS held until its iteration was applied (ssp), measured (0 in BSP);
- ps_service: start -> reply sent, measured;
- back: the PS's reply sent -> the worker read it, measured (for a request the switch
  answered: the rest of its latency after to_switch and switch);
- unsplit: a resent request's time after its first send (which copy got through is not
  known), and that of a request with no PS record.

The PS's requests in flight over time: at the PS, PUSHes and PULLs it received and has not
answered yet (DONEs wait for the barrier and are left out); toward the PS, requests the
workers sent that the PS (not the switch) answered, from the first send to the reply.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from contract.constants import ENTRY_LEN
from experiment.model import PACKET_OVERHEAD
from experiment.schema import DissectionBasis, InFlight, LatencySplit

KINDS = ("push", "pull")
COMPONENTS = (
    "window",
    "to_switch",
    "switch",
    "ps_link",
    "ps_socket",
    "ps_held",
    "ps_service",
    "back",
    "unsplit",
)
MEASURED_SEGMENTS = ("window", "ps_socket", "ps_held", "ps_service", "back")
IN_FLIGHT_BINS = 200  # points of the in-flight series (summary.json stays small)
_ANSWERED = ("replied", "accepted")  # PS log results of a first-time answer


def wire_bytes(entries: int) -> int:
    """Bytes of one hotagg packet of `entries` entries as the links' shapers count them."""
    return PACKET_OVERHEAD + ENTRY_LEN * entries


def serialization_us(wire: int, mbps: float | None) -> float:
    """Microseconds a link of `mbps` takes to send `wire` bytes (0: no rate)."""
    return wire * 8 / mbps if mbps else 0.0


def reply_bytes(kind: str, entries: int) -> int:
    """A PULL_REPLY is as large as its PULL; a PUSH_ACK is a header alone."""
    return wire_bytes(entries if kind == "pull" else 0)


def _switch_answered(rows: Iterable[Mapping[str, str]], kind: str) -> list[Mapping[str, str]]:
    return [
        r
        for r in rows
        if r["kind"] == kind and r["from_switch"] == "1" and r["retransmits"] in ("0", "")
    ]


def _round_trip_serialization(r: Mapping[str, str], mbps: float | None) -> float:
    entries = int(r["entries"])
    return serialization_us(wire_bytes(entries), mbps) + serialization_us(
        reply_bytes(r["kind"], entries), mbps
    )


def link_serializes(wrows: Sequence[Mapping[str, str]], mbps: float | None) -> bool | None:
    """Whether the worker links delay a packet by its serialization: the fastest 5% of the
    requests the switch answered took at least that both ways (None: no such request; False
    without a link rate)."""
    if not mbps:
        return False
    rows = [r for kind in KINDS for r in _switch_answered(wrows, kind)]
    if not rows:
        return None
    spare = [float(r["latency_us"]) - _round_trip_serialization(r, mbps) for r in rows]
    return bool(np.percentile(spare, 5) >= 0)


def switch_pass_us(
    wrows: Sequence[Mapping[str, str]], mbps: float | None, serializes: bool | None
) -> dict[str, tuple[float, int]]:
    """Per kind: (estimated µs of one pass through the switch, requests it is from), the
    median latency of unresent requests the switch answered, less their serialization
    both ways where the links serialize ((0, 0): none answered)."""
    out = {}
    for kind in KINDS:
        rows = _switch_answered(wrows, kind)
        rate = mbps if serializes else None
        samples = [float(r["latency_us"]) - _round_trip_serialization(r, rate) for r in rows]
        out[kind] = (max(float(np.median(samples)), 0.0), len(samples)) if samples else (0.0, 0)
    return out


class _PSRecord:
    """A request's PS timestamps: kernel receive, first handling, the answer's start and
    reply (a held pull has two rows: `held`, then `replied`)."""

    __slots__ = ("arrival", "read", "reply", "start")

    def __init__(self, arrival: float, read: float) -> None:
        self.arrival, self.read = arrival, read
        self.start: float | None = None
        self.reply: float | None = None


def ps_records(prows: Iterable[Mapping[str, str]]) -> dict[tuple[str, str, str], _PSRecord]:
    """(op, worker, seq) -> its first arrival and handling, and its first answer."""
    out: dict[tuple[str, str, str], _PSRecord] = {}
    for r in prows:
        if r["op"] not in ("PUSH", "PULL"):
            continue
        key = (r["op"], r["worker"], r["seq"])
        rec = out.get(key)
        if rec is None:
            rec = out[key] = _PSRecord(float(r["arrival"]), float(r["start"]))
        if rec.reply is None and r["result"] in _ANSWERED and r["reply"]:
            rec.start, rec.reply = float(r["start"]), float(r["reply"])
    return out


def split_request(
    w: Mapping[str, str],
    ps: _PSRecord | None,
    mbps: float | None,
    switch_us: float,
) -> dict[str, float]:
    """One worker request's components (µs, COMPONENTS); they add up to reply - ready."""
    sent, reply = float(w["sent"]), float(w["reply"])
    ready = float(w.get("ready") or w["sent"])  # logs without `ready`: no window measured
    c = dict.fromkeys(COMPONENTS, 0.0)
    c["window"] = (sent - ready) * 1e6
    latency = (reply - sent) * 1e6
    if w["retransmits"] not in ("0", ""):
        c["unsplit"] = latency
        return c
    up = serialization_us(wire_bytes(int(w["entries"])), mbps)
    if w["from_switch"] == "1":
        c["to_switch"] = min(up, latency)
        c["switch"] = min(switch_us, latency - c["to_switch"])
        c["back"] = latency - c["to_switch"] - c["switch"]
        return c
    if ps is None or ps.reply is None or ps.start is None:
        c["unsplit"] = latency
        return c
    to_ps = (ps.arrival - sent) * 1e6
    c["to_switch"] = min(up, max(to_ps, 0.0))
    c["switch"] = min(switch_us, max(to_ps - c["to_switch"], 0.0))
    c["ps_link"] = to_ps - c["to_switch"] - c["switch"]
    c["ps_socket"] = (ps.read - ps.arrival) * 1e6
    c["ps_held"] = (ps.start - ps.read) * 1e6
    c["ps_service"] = (ps.reply - ps.start) * 1e6
    c["back"] = (reply - ps.reply) * 1e6
    return c


def _means(rows: Sequence[Mapping[str, float]]) -> dict[str, float | None]:
    return {
        name: round(float(np.mean([r[name] for r in rows])), 1) if rows else None
        for name in COMPONENTS
    }


def extend(
    split: LatencySplit,
    kind: str,
    wrows: Sequence[Mapping[str, str]],
    records: Mapping[tuple[str, str, str], _PSRecord],
    mbps: float | None,
    switch_us: float,
) -> LatencySplit:
    """`split` (one kind's LatencySplit) with the components of each of its requests."""
    parts, ps_served = [], []
    resent = unmatched = negative = 0
    for w in (r for r in wrows if r["kind"] == kind):
        ps = records.get((kind.upper(), w["worker"], w["seq"]))
        c = split_request(w, ps, mbps, switch_us)
        parts.append(c)
        if w["retransmits"] not in ("0", ""):
            resent += 1
        elif w["from_switch"] != "1":
            if c["unsplit"]:
                unmatched += 1
            else:
                ps_served.append(c)
                # a measured segment below zero: the clocks disagree (or rows were mismatched)
                negative += any(c[name] < -1.0 for name in (*MEASURED_SEGMENTS, "ps_link"))
    ready_to_reply = [sum(c.values()) for c in parts]
    return {
        **split,
        "resent": resent,
        "unmatched": unmatched,
        "negative_segments": negative,
        "mean_ready_to_reply_us": round(float(np.mean(ready_to_reply)), 1) if parts else None,
        "components_us": _means(parts),
        "ps_served_components_us": _means(ps_served),
    }


def _occupancy(starts: np.ndarray, ends: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Mean count of intervals [start, end) open in each bin between `edges`: the
    integral of the count up to each edge, differenced, over the bin width."""
    a, b = np.sort(starts), np.sort(ends)
    ca, cb = np.concatenate(([0.0], np.cumsum(a))), np.concatenate(([0.0], np.cumsum(b)))
    na, nb = np.searchsorted(a, edges), np.searchsorted(b, edges)
    integral = (na * edges - ca[na]) - (nb * edges - cb[nb])
    return np.diff(integral) / np.diff(edges)


def _peak(starts: np.ndarray, ends: np.ndarray) -> int:
    """The most intervals open at once (an end at the same time as a start comes first)."""
    if not len(starts):
        return 0
    times = np.concatenate((ends, starts))
    steps = np.concatenate((-np.ones(len(ends)), np.ones(len(starts))))
    order = np.lexsort((steps, times))
    return int(np.cumsum(steps[order]).max())


def in_flight(
    wrows: Sequence[Mapping[str, str]],
    records: Mapping[tuple[str, str, str], _PSRecord],
    bins: int = IN_FLIGHT_BINS,
) -> InFlight | None:
    """The PS's requests in flight over the phase (module doc), as mean counts per bin."""
    at = [(r.arrival, r.reply) for r in records.values() if r.reply is not None]
    to = [
        (float(w["sent"]), float(w["reply"]))
        for w in wrows
        if w["kind"] in KINDS and w["from_switch"] != "1"
    ]
    if not at and not to:
        return None
    at_s, at_e = (np.array(x, float) for x in zip(*at)) if at else (np.empty(0),) * 2
    to_s, to_e = (np.array(x, float) for x in zip(*to)) if to else (np.empty(0),) * 2
    begin = float(min(np.min(at_s, initial=np.inf), np.min(to_s, initial=np.inf)))
    end = float(max(np.max(at_e, initial=-np.inf), np.max(to_e, initial=-np.inf)))
    span = max(end - begin, 1e-6)
    edges = np.linspace(begin, begin + span, bins + 1)
    at_series, to_series = _occupancy(at_s, at_e, edges), _occupancy(to_s, to_e, edges)
    return {
        "start": round(begin, 6),
        "bin_s": round(span / bins, 6),
        "at_ps": [round(float(x), 2) for x in at_series],
        "to_ps": [round(float(x), 2) for x in to_series],
        "mean_at_ps": round(float(np.sum(at_e - at_s)) / span, 3),
        "max_at_ps": _peak(at_s, at_e),
        "mean_to_ps": round(float(np.sum(to_e - to_s)) / span, 3),
        "max_to_ps": _peak(to_s, to_e),
    }


def basis(
    mbps: float | None,
    serializes: bool | None,
    switch_pass: Mapping[str, tuple[float, int]],
    drifts: Iterable[float],
) -> DissectionBasis:
    """What a mode's dissection rests on (summary.json `latency_dissection_basis`)."""
    drift = [abs(d) for d in drifts]
    return {
        "clock": "CLOCK_REALTIME, shared by every process of the run (one machine); the PS's "
        "receive time from SO_TIMESTAMPNS",
        "link_mbps": mbps,
        "link_serializes": serializes,
        "switch_pass_us": {kind: round(us, 1) for kind, (us, _) in switch_pass.items()},
        "switch_pass_samples": {kind: n for kind, (_, n) in switch_pass.items()},
        "max_wall_clock_drift_us": round(max(drift), 1) if drift else None,
    }


def basis_text(b: DissectionBasis) -> str:
    """One sentence on what the derived components rest on (report.md and the figure)."""
    if b["link_serializes"]:
        wire = f"to_switch is serialization at {b['link_mbps']:g} Mbit/s"
    elif b["link_mbps"] and b["link_serializes"] is False:
        wire = (
            f"to_switch is 0: the fastest switch-answered requests came back sooner than "
            f"their serialization at {b['link_mbps']:g} Mbit/s (the shaper's burst)"
        )
    else:
        wire = "to_switch is 0 (no link rate, or no request to tell by)"
    passes = ", ".join(
        f"{kind} {b['switch_pass_us'][kind]:.0f} µs of {b['switch_pass_samples'][kind]}"
        for kind in b["switch_pass_us"]
    )
    return (
        f"{wire}; one switch pass is the median switch-answered latency ({passes} "
        "requests); the PS link is the rest of the way to the PS's kernel receive."
    )


def link_rate(rates: Sequence[float | None] | None) -> float | None:
    """The rate serialization is derived at: the links' one rate (the lowest if several,
    which makes to_switch an upper bound), None when no link has one."""
    known = [r for r in rates or () if r]
    return min(known) if known else None
