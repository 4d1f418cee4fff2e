"""Load and validate topology files in the P4 tutorials' topology.json format.

The format (p4lang/tutorials utils/run_exercise.py)::

    {"hosts":    {"h1": {"ip": "10.0.1.1/24", "mac": "08:00:00:00:01:11", "commands": [...]}},
     "switches": {"s1": {"runtime_json": "..."}},
     "links":    [["h1", "s1-p1"], ["s1-p2", "s2-p1", "0ms", 10], ...]}

A link is [end1, end2, latency?, bandwidth?]: a host end is the host's name, a switch end is
`<switch>-p<port>`. Latency is read as the tutorials' runner and tc read it: a JSON number
is milliseconds, a string is a tc time ("2ms", "500us", "1s"), and a string without a unit
("0") is microseconds, tc's default unit; bandwidth is in Mbit/s (Mininet TCLink's `bw`),
null for unlimited. A link may also be an object {"node1", "node2", "latency", "bandwidth",
"loss"}.

hotagg's extensions (all optional):
- link: a fifth list element (or "loss") is the loss rate in percent, 0..100.
- host "role": "worker" (default) or "ps" (a parameter server).
- switch "aggregate": true marks the switches that aggregate hot keys, "service_ip" the
  address a PS sends COLLECT/WRITEBACK to (the switch answers whatever the destination, but a
  host needs an ARP entry and a route for it), "service_mac" its MAC (default 02:00:00:00:NN:fe),
  "mac" the switch's own MAC (used by controller.forwarding for next-hop rewrites),
  "cpu_port" (default 255).
- "comment" keys are ignored everywhere (JSON has no comments).

What the tutorials' own files carry is accepted: /31 host addresses, "cpu_port" as a string,
and the switch keys "runtime_json", "program", "cli_input" and "priority_queues", which are
ignored (hotagg's controller programs the switches) with one notice. Notices (also: links
without a bandwidth) are collected in Topology.notices for the caller to print.

Instead of a file, `load_topology` takes a generator spec (`star:N`, `star:N:S`,
`leafspine:L:H`, topologies/generate.py).

Everything here is pure: no root, no network. Errors are TopologyFileError with the file and
the offending item in the message.
"""

from __future__ import annotations

import dataclasses
import difflib
import ipaddress
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contract.constants import CPU_PORT
from topologies.generate import TopologySpecError, generate, is_spec

ROLES = ("worker", "ps")
MAX_PORT = 510  # 9-bit port; 511 is BMv2's drop port
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,7}")  # short: Linux interface names have 15 chars
_MAC = re.compile(r"[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}")
# tc's time syntax (iproute2's get_time): a number and a unit, case-insensitive; a number
# without a unit is microseconds there. Links are stored with a canonical unit (us, ms, s).
_TC_TIME = re.compile(r"(\d+(?:\.\d+)?)(s|secs?|ms|msecs?|us|usecs?)?", re.IGNORECASE)
_TC_UNIT = {"s": "s", "sec": "s", "secs": "s", "ms": "ms", "msec": "ms", "msecs": "ms"}

_TOP_KEYS = {"hosts", "switches", "links", "comment"}
_HOST_KEYS = {"ip", "mac", "commands", "role", "comment"}
# The tutorials' keys are accepted (and ignored: our controller programs the switches).
_SWITCH_KEYS = {
    "runtime_json", "program", "cli_input", "priority_queues", "cpu_port",
    "aggregate", "service_ip", "service_mac", "mac", "comment",
}  # fmt: skip
_LINK_KEYS = {"node1", "node2", "latency", "bandwidth", "loss", "comment"}
_IGNORED_SWITCH_KEYS = ("runtime_json", "program", "cli_input", "priority_queues")


class TopologyFileError(ValueError):
    """The topology file is unreadable or malformed; the message says where and why."""


Fail = Callable[[str], TopologyFileError]  # builds an error that names the file


@dataclass(frozen=True)
class Host:
    name: str
    ip: str  # address without prefix, "10.0.0.1"
    prefix_len: int
    mac: str  # lower case
    role: str = "worker"
    commands: tuple[str, ...] = ()

    @property
    def cidr(self) -> str:
        return f"{self.ip}/{self.prefix_len}"


@dataclass(frozen=True)
class Switch:
    name: str
    index: int  # position in the file: gRPC port = base + index, device id = index
    cpu_port: int = CPU_PORT
    aggregate: bool = False
    service_ip: str | None = None
    service_mac: str | None = None
    mac: str | None = None
    # The MAC other switches address this one by (next-hop rewrites): "mac", else the
    # tutorials' 08:00:00:00:NN:00 with NN the number in the name.
    router_mac: str = ""

    @property
    def device_id(self) -> int:
        return self.index

    def grpc_port(self, base: int = 50051) -> int:
        """The tutorials' numbering: 50051 for the first switch, then upward."""
        return base + self.index


@dataclass(frozen=True)
class Link:
    """node1 is the host for a host link; port is None for a host end (node2 is a switch)."""

    node1: str
    port1: int | None
    node2: str
    port2: int
    latency: str = "0ms"
    bandwidth: float | None = None  # Mbit/s
    loss: float = 0.0  # percent

    @property
    def is_host_link(self) -> bool:
        return self.port1 is None

    @property
    def needs_netem(self) -> bool:
        """Delay and loss are tc netem's job (bandwidth is htb's)."""
        return self.loss > 0 or _seconds(self.latency) > 0

    @property
    def shaped(self) -> bool:
        """Whether TCLink has anything to do on this link."""
        return self.bandwidth is not None or self.needs_netem


@dataclass(frozen=True)
class Topology:
    hosts: dict[str, Host]
    switches: dict[str, Switch]  # in file order
    links: tuple[Link, ...]
    source: str = "<memory>"
    _attach: dict[str, tuple[str, int]] = field(default_factory=dict, repr=False, compare=False)
    # What the reader accepted but the user should know (ignored keys).
    ignored_keys_notices: tuple[str, ...] = ()

    @property
    def notices(self) -> tuple[str, ...]:
        """Lines to show the user once: ignored keys, and links without a bandwidth."""
        unshaped = sum(link.bandwidth is None for link in self.links)
        if not unshaped:
            return self.ignored_keys_notices
        warning = UNLIMITED_LINKS.format(source=self.source, n=unshaped, total=len(self.links))
        return (*self.ignored_keys_notices, warning)

    def attachment(self, host: str) -> tuple[str, int]:
        """(switch, port) the host is cabled to."""
        if host not in self.hosts:
            raise KeyError(f"no host {host!r} in {self.source} (have {sorted(self.hosts)})")
        return self._attach[host]

    def hosts_with_role(self, role: str) -> list[Host]:
        """Hosts of `role` in name order (h2 before h10)."""
        return sorted((h for h in self.hosts.values() if h.role == role), key=_natural)

    @property
    def workers(self) -> list[Host]:
        return self.hosts_with_role("worker")

    @property
    def parameter_servers(self) -> list[Host]:
        return self.hosts_with_role("ps")

    def service_ip_for(self, host: str) -> str | None:
        """Where `host` (a PS) sends COLLECT/WRITEBACK: the service address of the switch it
        is cabled to, if that switch aggregates; None means no in-network aggregation."""
        sw = self.switches[self.attachment(host)[0]]
        return sw.service_ip if sw.aggregate else None

    def with_bandwidth(self, mbps: float | None) -> Topology:
        """The same topology with every link's bandwidth set to `mbps` (None: unlimited)."""
        if mbps is not None and not (mbps > 0 and math.isfinite(mbps)):
            raise TopologyFileError(f"bandwidth {mbps!r} must be a positive number of Mbit/s")
        links = tuple(dataclasses.replace(link, bandwidth=mbps) for link in self.links)
        return dataclasses.replace(self, links=links)

    def with_hosts_only(self, names: list[str]) -> Topology:
        """The same topology with only the hosts `names` (and every switch): one job's view
        of a switch it shares with other jobs, as the model counts its links."""
        for name in names:
            self.attachment(name)  # KeyError naming the hosts there are
        keep = set(names)
        links = tuple(link for link in self.links if not link.is_host_link or link.node1 in keep)
        hosts = {name: host for name, host in self.hosts.items() if name in keep}
        return dataclasses.replace(self, hosts=hosts, links=links)

    def with_parameter_servers(self, names: list[str]) -> Topology:
        """The same topology with `names` as its parameter servers (every other host a
        worker) and the switch they hang off aggregating: the `PS=h4` option, for files
        without hotagg's keys. That switch keeps its service address, or gets .254 of the
        first server's subnet."""
        for name in names:
            self.attachment(name)  # KeyError naming the hosts there are
        switches = {self.attachment(n)[0] for n in names}
        if len(switches) != 1:
            raise TopologyFileError(
                f"{self.source}: parameter servers {names} hang off switches {sorted(switches)};"
                " they must share one (it aggregates)"
            )
        sw = self.switches[switches.pop()]
        service_ip = sw.service_ip
        if service_ip is None:
            first = self.hosts[names[0]]
            net = ipaddress.IPv4Interface(first.cidr).network
            taken = {h.ip for h in self.hosts.values()}
            free = [str(a) for a in reversed(list(net.hosts())) if str(a) not in taken]
            if not free:
                raise TopologyFileError(f"{self.source}: no free address in {net} for the switch")
            service_ip = free[0]
        hosts = {
            n: dataclasses.replace(h, role="ps" if n in names else "worker")
            for n, h in self.hosts.items()
        }
        switches_new = {
            n: dataclasses.replace(
                s,
                aggregate=n == sw.name,
                service_ip=service_ip if n == sw.name else s.service_ip,
                service_mac=(s.service_mac or _default_service_mac(s.index))
                if n == sw.name
                else s.service_mac,
            )
            for n, s in self.switches.items()
        }
        return dataclasses.replace(self, hosts=hosts, switches=switches_new)

    def with_leaves_aggregating(self) -> Topology:
        """The same topology with every switch that has hosts cabled to it aggregating (the
        `leaves` design, docs/design.md section 7). Each keeps its service address, or gets
        the highest free address of its first host's subnet."""
        taken = {h.ip for h in self.hosts.values()} | {
            s.service_ip for s in self.switches.values() if s.service_ip
        }
        switches = dict(self.switches)
        for name, sw in self.switches.items():
            cabled = sorted(
                (h for h in self.hosts.values() if self._attach[h.name][0] == name), key=_natural
            )
            if not cabled:
                continue
            service_ip = sw.service_ip
            if service_ip is None:
                net = ipaddress.IPv4Interface(cabled[0].cidr).network
                free = [str(a) for a in reversed(list(net.hosts())) if str(a) not in taken]
                if not free:
                    raise TopologyFileError(
                        f"{self.source}: no free address in {net} for switch {name}"
                    )
                service_ip = free[0]
                taken.add(service_ip)
            switches[name] = dataclasses.replace(
                sw,
                aggregate=True,
                service_ip=service_ip,
                service_mac=sw.service_mac or _default_service_mac(sw.index),
            )
        return dataclasses.replace(self, switches=switches)

    def remote_leaves(self) -> list[str]:
        """The aggregating switches other than the one the parameter servers hang off (the
        root), in file order: the leaves the PS flushes, in chain order."""
        roots = {self.attachment(ps.name)[0] for ps in self.parameter_servers}
        return [n for n, s in self.switches.items() if s.aggregate and n not in roots]

    def missing_hotagg_keys(self) -> str | None:
        """What a file (e.g. one of the P4 tutorials') lacks for an experiment, as one
        sentence naming the keys to add; None when nothing is missing."""
        if not self.parameter_servers:
            return (
                f'{self.source} has no parameter server: add "role": "ps" to one host '
                '(and "aggregate": true plus "service_ip" to the switch it hangs off), or '
                "name it with PS=<host> (python -m experiment run --ps <host>)"
            )
        for ps in self.parameter_servers:
            sw = self.switches[self.attachment(ps.name)[0]]
            if not sw.aggregate:
                return (
                    f"{self.source}: switch {sw.name}, which PS {ps.name} hangs off, does not "
                    'aggregate: add "aggregate": true and "service_ip" (an unused address '
                    f"of {ps.name}'s subnet) to it, or run with PS={ps.name}"
                )
        return None

    def service_addresses(self) -> dict[str, str]:
        """service IP -> service MAC of every switch that has one (hosts get static ARP)."""
        return {
            s.service_ip: s.service_mac
            for s in self.switches.values()
            if s.service_ip and s.service_mac
        }


def _natural(h: Host) -> tuple[str, int]:
    m = re.fullmatch(r"(.*?)(\d*)", h.name)
    assert m is not None
    return (m.group(1), int(m.group(2) or 0))


def _seconds(tc_time: str) -> float:
    m = _TC_TIME.fullmatch(tc_time)
    if not m:
        return 0.0
    unit = _TC_UNIT.get((m.group(2) or "us").lower(), "us")
    return float(m.group(1)) * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[unit]


def load_topology(path: str | Path) -> Topology:
    """Read and validate a topology file, or build a generator spec (star:N, ...)."""
    if is_spec(str(path)) and not Path(path).exists():
        try:
            return parse_topology(generate(str(path)), source=str(path))
        except TopologySpecError as e:
            raise TopologyFileError(str(e)) from None
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise TopologyFileError(f"cannot read topology {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise TopologyFileError(f"{path}: not valid JSON: {e}") from None
    return parse_topology(data, source=str(path))


def parse_topology(data: Any, source: str = "<memory>") -> Topology:
    """Validate a decoded topology.json document and build a Topology."""

    def fail(msg: str) -> TopologyFileError:
        return TopologyFileError(f"{source}: {msg}")

    if not isinstance(data, Mapping):
        raise fail("the top level must be an object with 'hosts', 'switches' and 'links'")
    _check_keys(data, _TOP_KEYS, "the top level", fail)
    for key in ("hosts", "switches", "links"):
        if key not in data:
            raise fail(f"missing '{key}'")
    if not isinstance(data["hosts"], Mapping) or not isinstance(data["switches"], Mapping):
        raise fail("'hosts' and 'switches' must be objects keyed by node name")
    if not isinstance(data["links"], list):
        raise fail("'links' must be a list")
    if not data["switches"]:
        raise fail("there must be at least one switch")

    hosts = {name: _parse_host(name, spec, fail) for name, spec in data["hosts"].items()}
    by_name = sorted(data["switches"])  # the tutorials' MAC numbering falls back to this order
    switches = {
        name: _parse_switch(name, i, by_name.index(name), spec, fail)
        for i, (name, spec) in enumerate(data["switches"].items())
    }
    notices = []
    ignored = sorted(
        {k for spec in data["switches"].values() if spec for k in spec} & set(_IGNORED_SWITCH_KEYS)
    )
    if ignored:
        notices.append(
            f"{source}: ignoring the switch keys {ignored} (hotagg's controller programs "
            "the switches itself)"
        )
    clash = hosts.keys() & switches.keys()
    if clash:
        raise fail(f"{sorted(clash)} name both a host and a switch")
    _check_unique([(h.ip, f"host {h.name}") for h in hosts.values()], "IP address", fail)
    _check_unique([(h.mac, f"host {h.name}") for h in hosts.values()], "MAC address", fail)
    services = [(s.service_ip, f"switch {s.name}") for s in switches.values() if s.service_ip]
    _check_unique([(h.ip, f"host {h.name}") for h in hosts.values()] + services, "IP", fail)
    _check_unique(
        [(h.mac, f"host {h.name}") for h in hosts.values()]
        + [(s.service_mac, f"switch {s.name} service") for s in switches.values() if s.service_ip],
        "MAC",
        fail,
    )

    links = tuple(_parse_link(i, raw, hosts, switches, fail) for i, raw in enumerate(data["links"]))
    attach: dict[str, tuple[str, int]] = {}
    used: dict[tuple[str, int], int] = {}
    for i, link in enumerate(links):
        for node, port in ((link.node1, link.port1), (link.node2, link.port2)):
            if port is None:
                continue
            if (node, port) in used:
                first = used[node, port]
                raise fail(f"link {i}: port {node}-p{port} is already used by link {first}")
            used[node, port] = i
        if link.is_host_link:
            if link.node1 in attach:
                raise fail(f"link {i}: host {link.node1} has a second link (one per host)")
            attach[link.node1] = (link.node2, link.port2)
    unlinked = sorted(set(hosts) - set(attach))
    if unlinked:
        raise fail(f"hosts {unlinked} have no link to a switch")
    for sw in switches.values():
        if any(port == sw.cpu_port for (name, port) in used if name == sw.name):
            raise fail(f"switch {sw.name}: port {sw.cpu_port} is its CPU port, not a link port")
    return Topology(hosts, switches, links, source, attach, tuple(notices))


# Why an unlimited link matters: with nothing to queue at, the PS link is never the
# bottleneck and the machine's CPU is (README, "Why the links are 10 Mbit/s").
UNLIMITED_LINKS = (
    "{source}: {n} of {total} links have no bandwidth, so they are unlimited and the run "
    "measures this machine's CPU rather than the network (offload measured 0.59x on the "
    "tutorials' pod topology that way); give links a bandwidth or set BW="
)


def _check_keys(obj: Mapping, allowed: set[str], where: str, fail: Fail) -> None:
    for key in obj:
        if key not in allowed:
            near = difflib.get_close_matches(str(key), sorted(allowed), n=1)
            hint = f" (did you mean '{near[0]}'?)" if near else f" (known: {sorted(allowed)})"
            raise fail(f"{where}: unknown key '{key}'{hint}")


def _check_unique(items: list[tuple[Any, str]], what: str, fail: Fail) -> None:
    seen: dict[Any, str] = {}
    for value, owner in items:
        if value in seen:
            raise fail(f"{owner} and {seen[value]} have the same {what} {value}")
        seen[value] = owner


def _check_name(name: Any, kind: str, fail: Fail) -> None:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise fail(
            f"{kind} name {name!r}: use a letter then up to 7 letters, digits or '_' "
            "(names become interface names such as s1-eth1, and '-' separates the port)"
        )


def _parse_ipv4(text: Any, what: str, fail: Fail) -> ipaddress.IPv4Interface:
    try:
        return ipaddress.IPv4Interface(text)
    except (ValueError, TypeError):
        raise fail(f"{what}: {text!r} is not an IPv4 address") from None


def _parse_mac(text: Any, what: str, fail: Fail) -> str:
    if not isinstance(text, str) or not _MAC.fullmatch(text):
        raise fail(f"{what}: {text!r} is not a MAC address like 08:00:00:00:01:11")
    if int(text[:2], 16) & 1:
        raise fail(f"{what}: {text} is a multicast MAC; use a unicast one")
    return text.lower()


def _parse_host(name: str, spec: Any, fail: Fail) -> Host:
    _check_name(name, "host", fail)
    if not isinstance(spec, Mapping):
        raise fail(f"host {name}: must be an object with 'ip' and 'mac'")
    _check_keys(spec, _HOST_KEYS, f"host {name}", fail)
    for key in ("ip", "mac"):
        if key not in spec:
            raise fail(f"host {name}: missing '{key}'")
    if not isinstance(spec["ip"], str) or "/" not in spec["ip"]:
        raise fail(f"host {name}: 'ip' must carry a prefix length, like 10.0.1.1/24")
    iface = _parse_ipv4(spec["ip"], f"host {name}", fail)
    # /31 (RFC 3021, used by some tutorials) and /32 have no network or broadcast address.
    if iface.network.prefixlen < 31 and iface.ip in (
        iface.network.network_address,
        iface.network.broadcast_address,
    ):
        raise fail(f"host {name}: {spec['ip']} is the network or broadcast address")
    role = spec.get("role", "worker")
    if role not in ROLES:
        raise fail(f"host {name}: role {role!r} is not one of {ROLES}")
    commands = spec.get("commands", [])
    if not isinstance(commands, list) or not all(isinstance(c, str) for c in commands):
        raise fail(f"host {name}: 'commands' must be a list of strings")
    return Host(
        name=name,
        ip=str(iface.ip),
        prefix_len=iface.network.prefixlen,
        mac=_parse_mac(spec["mac"], f"host {name}", fail),
        role=role,
        commands=tuple(commands),
    )


def _default_service_mac(index: int) -> str:
    return f"02:00:00:00:{index + 1 & 0xFF:02x}:fe"


def _tutorial_mac(name: str, sorted_index: int) -> str:
    digits = re.search(r"(\d+)$", name)
    n = int(digits.group(1)) if digits else sorted_index + 1
    return f"08:00:00:00:{n & 0xFF:02x}:00"


def _parse_switch(name: str, index: int, sorted_index: int, spec: Any, fail: Fail) -> Switch:
    _check_name(name, "switch", fail)
    spec = {} if spec is None else spec
    if not isinstance(spec, Mapping):
        raise fail(f"switch {name}: must be an object")
    _check_keys(spec, _SWITCH_KEYS, f"switch {name}", fail)
    cpu_port = spec.get("cpu_port", CPU_PORT)
    if isinstance(cpu_port, str) and cpu_port.isdigit():  # the tutorials write "cpu_port": "255"
        cpu_port = int(cpu_port)
    if type(cpu_port) is not int or not 1 <= cpu_port <= MAX_PORT:
        raise fail(f"switch {name}: cpu_port {cpu_port!r} must be an integer in 1..{MAX_PORT}")
    aggregate = spec.get("aggregate", False)
    if not isinstance(aggregate, bool):
        raise fail(f"switch {name}: 'aggregate' must be true or false")
    service_ip = service_mac = None
    if "service_ip" in spec:
        iface = _parse_ipv4(spec["service_ip"], f"switch {name} service_ip", fail)
        if iface.network.prefixlen != 32:
            raise fail(f"switch {name}: service_ip is one address, without a prefix length")
        service_ip = str(iface.ip)
        service_mac = _parse_mac(
            spec.get("service_mac", _default_service_mac(index)), f"switch {name} service_mac", fail
        )
    elif "service_mac" in spec:
        raise fail(f"switch {name}: 'service_mac' without 'service_ip'")
    if aggregate and service_ip is None:
        raise fail(
            f"switch {name}: an aggregating switch needs a 'service_ip' "
            "(the address its PS sends COLLECT/WRITEBACK to)"
        )
    mac = _parse_mac(spec["mac"], f"switch {name} mac", fail) if "mac" in spec else None
    router_mac = mac or _tutorial_mac(name, sorted_index)
    return Switch(name, index, cpu_port, aggregate, service_ip, service_mac, mac, router_mac)


def _parse_latency(value: Any, where: str, fail: Fail) -> str:
    if isinstance(value, bool):
        raise fail(f"{where}: latency {value!r} is not a time")
    if isinstance(value, (int, float)):
        if value < 0:
            raise fail(f"{where}: latency {value} is negative")
        return f"{value}ms"  # the tutorials' rule: a number is milliseconds
    m = _TC_TIME.fullmatch(value) if isinstance(value, str) else None
    if m:
        # The tutorials' runner hands a string to TCLink as it is, and tc reads a bare number
        # as microseconds (their ecn and mri exercises give "0").
        return m.group(1) + _TC_UNIT.get((m.group(2) or "us").lower(), "us")
    raise fail(
        f"{where}: latency {value!r} is not a time like '2ms', '500us', a number of ms, "
        "or a string number of us (tc's rule)"
    )


def _parse_link(i: int, raw: Any, hosts: dict, switches: dict, fail: Fail) -> Link:
    where = f"link {i} {json.dumps(raw)}"
    if isinstance(raw, list):
        if not 2 <= len(raw) <= 5:
            raise fail(f"{where}: [end1, end2, latency?, bandwidth?, loss?] expected")
        spec = dict(zip(("node1", "node2", "latency", "bandwidth", "loss"), raw))
    elif isinstance(raw, Mapping):
        _check_keys(raw, _LINK_KEYS, where, fail)
        if "node1" not in raw or "node2" not in raw:
            raise fail(f"{where}: a link object needs 'node1' and 'node2'")
        spec = dict(raw)
    else:
        raise fail(f"{where}: a link is a list [end1, end2, ...] or an object")
    (node1, port1), (node2, port2) = (
        _parse_end(spec[k], where, hosts, switches, fail) for k in ("node1", "node2")
    )
    if port2 is None:  # host end first, as the tutorials order it
        node1, port1, node2, port2 = node2, port2, node1, port1
    if port2 is None:
        raise fail(f"{where}: joins two hosts; hosts connect to switches")
    if node1 == node2:
        raise fail(f"{where}: both ends are on {node1}")
    latency = _parse_latency(spec.get("latency", "0ms"), where, fail)
    bw = spec.get("bandwidth")
    if bw is not None and (isinstance(bw, bool) or not isinstance(bw, (int, float)) or bw <= 0):
        raise fail(f"{where}: bandwidth {bw!r} must be a positive number of Mbit/s or null")
    loss = spec.get("loss", 0)
    if isinstance(loss, bool) or not isinstance(loss, (int, float)) or not 0 <= loss <= 100:
        raise fail(f"{where}: loss {loss!r} must be a percentage in 0..100")
    return Link(
        node1,
        port1,
        node2,
        port2,
        latency,
        None if bw is None else float(bw),
        float(loss),
    )


def _parse_end(
    text: Any, where: str, hosts: dict, switches: dict, fail: Fail
) -> tuple[str, int | None]:
    if not isinstance(text, str):
        raise fail(f"{where}: end {text!r} is not a string")
    if text in hosts:
        return text, None
    name, sep, port = text.rpartition("-p")
    if sep and name in switches:
        if not port.isdigit() or not 1 <= int(port) <= MAX_PORT:
            raise fail(f"{where}: {text}: switch ports are numbered 1..{MAX_PORT}")
        return name, int(port)
    if text in switches:
        raise fail(f"{where}: switch end {text!r} needs a port, like {text}-p1")
    raise fail(f"{where}: {text!r} names no host and no '<switch>-p<port>' of this topology")
