"""Generated topologies: `star:N`, `star:N:S` and `leafspine:L:H`, so a run with 32 workers
needs no hand-written file.

Each spec becomes the same topology.json document a file would hold (and goes through the
same reader, topologies.topology), with the conventions of topologies/star.json and
leafspine.json: workers first (h1..), then the parameter servers; links of 10 Mbit/s and
0.1 ms (README, "Why the links are 10 Mbit/s"); the switch the parameter servers hang off
aggregates, with the service address .254 of their subnet.

- `star:N[:S]`: one switch s1; N workers and S parameter servers (shards, default 1), one
  port each, h<i> at 10.0.0.<i>/24 (as in star.json).
- `leafspine:L:H`: L leaves (s1..sL) with H hosts each under one spine s<L+1>; the
  parameter server is the last host of the first leaf, every other host is a worker. Leaf i
  is 10.0.i.0/24.
"""

from __future__ import annotations

import re
from typing import Any

from contract.constants import CPU_PORT, MAX_WORKERS

DEFAULT_BANDWIDTH_MBPS = 10
DEFAULT_LATENCY = "0.1ms"
SPEC = re.compile(r"(star|leafspine):(\d+)(?::(\d+))?")
# Ports stay below the CPU port, and host numbers below the service address .254.
MAX_PORTS = min(CPU_PORT - 1, 253)


class TopologySpecError(ValueError):
    """A generator spec that names no topology we can build; the message says why."""


def is_spec(text: str) -> bool:
    """Whether `text` is meant as a generator spec (a word, a colon, numbers: star:8, but
    also ring:4, which generate() then refuses with the specs there are)."""
    return re.fullmatch(r"[A-Za-z]+:[\d:]*", text) is not None


def generate(spec: str) -> dict[str, Any]:
    """The topology.json document of a generator spec."""
    m = SPEC.fullmatch(spec)
    if not m:
        raise TopologySpecError(
            f"{spec!r} is not a topology spec: use star:N, star:N:S (S parameter servers) or "
            "leafspine:L:H (L leaves, H hosts each)"
        )
    kind, first, second = m.group(1), int(m.group(2)), m.group(3)
    if kind == "star":
        return star(first, 1 if second is None else int(second))
    if second is None:
        raise TopologySpecError(f"{spec!r}: leafspine needs both L and H, as in leafspine:2:3")
    return leafspine(first, int(second))


def _host(ip: str, mac: str, role: str) -> dict[str, str]:
    return {"ip": ip, "mac": mac, "role": role}


def _link(a: str, b: str) -> list[Any]:
    return [a, b, DEFAULT_LATENCY, DEFAULT_BANDWIDTH_MBPS]


def star(workers: int, shards: int = 1) -> dict[str, Any]:
    """One aggregating switch, `workers` workers and `shards` parameter servers."""
    if not 1 <= workers <= MAX_WORKERS:
        raise TopologySpecError(f"star: {workers} workers; the switch takes 1..{MAX_WORKERS}")
    if shards < 1:
        raise TopologySpecError(f"star: {shards} parameter servers; use 1 or more")
    if workers + shards > MAX_PORTS:
        raise TopologySpecError(
            f"star: {workers} workers and {shards} parameter server(s) need "
            f"{workers + shards} ports; the switch has {MAX_PORTS} for hosts"
        )
    hosts: dict[str, Any] = {}
    links = []
    for i in range(1, workers + shards + 1):
        role = "worker" if i <= workers else "ps"
        hosts[f"h{i}"] = _host(f"10.0.0.{i}/24", f"08:00:00:00:00:{i:02x}", role)
        links.append(_link(f"h{i}", f"s1-p{i}"))
    return {
        "comment": f"generated: star:{workers}:{shards}",
        "hosts": hosts,
        "switches": {"s1": {"aggregate": True, "service_ip": "10.0.0.254"}},
        "links": links,
    }


def leafspine(leaves: int, hosts_per_leaf: int) -> dict[str, Any]:
    """`leaves` leaves with `hosts_per_leaf` hosts each under one spine; the PS is the last
    host of the first leaf, whose switch aggregates."""
    if not 1 <= leaves <= MAX_PORTS:
        raise TopologySpecError(f"leafspine: {leaves} leaves; use 1..{MAX_PORTS}")
    if not 1 <= hosts_per_leaf < MAX_PORTS:  # one leaf port goes up to the spine
        raise TopologySpecError(
            f"leafspine: {hosts_per_leaf} hosts per leaf; use 1..{MAX_PORTS - 1}"
        )
    if leaves * hosts_per_leaf < 2:
        raise TopologySpecError("leafspine: needs at least two hosts (a worker and the PS)")
    if leaves * hosts_per_leaf - 1 > MAX_WORKERS:
        raise TopologySpecError(
            f"leafspine:{leaves}:{hosts_per_leaf} has {leaves * hosts_per_leaf - 1} workers; "
            f"the switch takes at most {MAX_WORKERS}"
        )
    spine = f"s{leaves + 1}"
    hosts: dict[str, Any] = {}
    links = []
    n = 0
    for leaf in range(1, leaves + 1):
        for port in range(1, hosts_per_leaf + 1):
            n += 1
            role = "ps" if (leaf, port) == (1, hosts_per_leaf) else "worker"
            hosts[f"h{n}"] = _host(
                f"10.0.{leaf}.{port}/24", f"08:00:00:00:{leaf:02x}:{port:02x}", role
            )
            links.append(_link(f"h{n}", f"s{leaf}-p{port}"))
        links.append(_link(f"s{leaf}-p{hosts_per_leaf + 1}", f"{spine}-p{leaf}"))
    switches: dict[str, Any] = {f"s{leaf}": {} for leaf in range(1, leaves + 1)}
    switches["s1"] = {"aggregate": True, "service_ip": "10.0.1.254"}
    switches[spine] = {}
    return {
        "comment": f"generated: leafspine:{leaves}:{hosts_per_leaf}",
        "hosts": hosts,
        "switches": switches,
        "links": links,
    }
