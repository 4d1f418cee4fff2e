"""A Mininet `Topo` built from a loaded topology file: a pure graph, buildable without root.

Node classes are given as parameters so that the graph can be built and inspected anywhere;
topologies/network.py passes the real ones from topologies/nodes.py.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from mininet.link import Link as PlainLink
from mininet.link import TCIntf, TCLink
from mininet.topo import Topo

from topologies.topology import Link, Topology

HOST_INTF = "eth0"  # the tutorials' P4Host renames the host interface to eth0; so do we
IFNAMSIZ = 15  # longest Linux interface name


class HtbIntf(TCIntf):
    """TCIntf whose htb gets an r2q that fits the rate: with the default (10), rates above
    ~16 Mbit/s make tc warn "quantum of class is big" on every interface."""

    def bwCmds(self, bw: float | None = None, **params: Any) -> tuple[list[str], str]:
        plain = not any(params.get(k) for k in ("use_hfsc", "use_tbf", "enable_ecn", "enable_red"))
        if bw is None or not plain or not 0 < bw <= self.bwParamMax or params.get("speedup"):
            return super().bwCmds(bw=bw, **params)
        r2q = max(10, math.ceil(bw * 1e6 / 8 / 200_000))  # quantum = rate / r2q <= 200000 B
        return [
            f"%s qdisc add dev %s root handle 5:0 htb default 1 r2q {r2q}",
            f"%s class add dev %s parent 5:0 classid 5:1 htb rate {bw:f}Mbit burst 15k",
        ], " parent 5:1 "


class HtbLink(TCLink):
    """TCLink with HtbIntf on both ends."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("cls1", HtbIntf)
        kwargs.setdefault("cls2", HtbIntf)
        super().__init__(*args, **kwargs)


def switch_intf_name(prefix: str, switch: str, port: int) -> str:
    """Mininet's switch interface name (s1-eth1), after an optional per-run prefix."""
    return f"{prefix}{switch}-eth{port}"


class HotaggTopo(Topo):
    """Hosts, switches and links of a Topology, with per-link TCLink shaping where given."""

    def build(
        self,
        topology: Topology,
        switch_cls: type | None = None,
        host_cls: type | None = None,
        grpc_base_port: int = 50051,
        grpc_ports: dict[str, int] | None = None,
        intf_prefix: str = "",
        log_dir: Path | str = "/tmp/hotagg-logs",
        run_id: str | None = None,
        netem: bool = True,
        switch_opts: dict[str, Any] | None = None,
    ) -> None:
        """topology: the validated topology (topologies.topology.load_topology)
        switch_cls: Mininet Switch class for every switch (None: Mininet's default)
        host_cls: Mininet Host class for every host (None: Mininet's default)
        grpc_base_port: P4Runtime port of the first switch; the others count upward
        grpc_ports: explicit P4Runtime port per switch name, overriding grpc_base_port
        intf_prefix: prepended to switch interface names, to keep concurrent runs apart
        log_dir: directory for the switch logs
        run_id: tag of this run, given to the switch processes so cleanup() can find them
        netem: whether tc netem exists; if not, delay and loss are left out (see .unshaped)
        switch_opts: more keyword arguments for every switch (e.g. seed)"""
        self.topology = topology
        self.unshaped: list[str] = []  # links whose delay/loss could not be applied
        self.grpc_ports: dict[str, int] = {}
        for sw in topology.switches.values():
            port = (grpc_ports or {}).get(sw.name) or sw.grpc_port(grpc_base_port)
            self.grpc_ports[sw.name] = port
            longest = switch_intf_name(intf_prefix, sw.name, 510)
            if len(longest) > IFNAMSIZ:
                raise ValueError(
                    f"interface names like {longest!r} exceed {IFNAMSIZ} characters; "
                    "use a shorter intf_prefix or switch name"
                )
            opts: dict[str, Any] = {
                "dpid": f"{sw.index + 1:016x}",  # not derived from the name: any name works
                "grpc_port": port,
                "device_id": sw.device_id,
                "cpu_port": sw.cpu_port,
                "log_dir": str(log_dir),
                "run_id": run_id,
                **(switch_opts or {}),
            }
            if switch_cls is not None:
                opts["cls"] = switch_cls
            self.addSwitch(sw.name, **opts)

        for host in topology.hosts.values():
            opts = {"ip": host.cidr, "mac": host.mac, "arp": self._arp_for(host.name)}
            if host_cls is not None:
                opts["cls"] = host_cls
            self.addHost(host.name, **opts)

        for link in topology.links:
            self._add_link(link, intf_prefix, netem)

    def _arp_for(self, host: str) -> dict[str, str]:
        """Static ARP of `host`: every other host and every switch service address."""
        arp = {h.ip: h.mac for h in self.topology.hosts.values() if h.name != host}
        arp.update(self.topology.service_addresses())
        return arp

    def _add_link(self, link: Link, prefix: str, netem: bool) -> None:
        params: dict[str, Any] = {}
        if link.bandwidth is not None:
            params["bw"] = link.bandwidth
        if link.needs_netem:
            if netem:
                params["delay"] = link.latency
                if link.loss > 0:
                    params["loss"] = link.loss
            else:
                self.unshaped.append(_describe(link))
        if params:
            # TCIntf turns checksum offload on by default; veth + raw sockets need it off.
            params.update(cls=HtbLink, txo=False, rxo=False)
        else:
            params["cls"] = PlainLink
        if link.port1 is None:  # a host link (Link.is_host_link), written so port1 narrows
            self.addLink(
                link.node1,
                link.node2,
                port1=0,
                port2=link.port2,
                intfName1=HOST_INTF,
                intfName2=switch_intf_name(prefix, link.node2, link.port2),
                **params,
            )
        else:
            self.addLink(
                link.node1,
                link.node2,
                port1=link.port1,
                port2=link.port2,
                intfName1=switch_intf_name(prefix, link.node1, link.port1),
                intfName2=switch_intf_name(prefix, link.node2, link.port2),
                **params,
            )


def _describe(link: Link) -> str:
    a = link.node1 if link.port1 is None else f"{link.node1}-p{link.port1}"
    return f"{a} <-> {link.node2}-p{link.port2} (delay {link.latency}, loss {link.loss:g}%)"
