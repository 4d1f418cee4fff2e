"""Tenancy (p4src/include/tenancy.p4): where each job's workers and PS may send from.

`HotaggIngress.worker_admission` (job_id, worker_id, ingress_port, src_addr) and
`HotaggIngress.ps_admission` (job_id, ingress_port, src_addr), action `admit`, default
`refuse`: the switch processes a worker op (PUSH, PULL, DONE ...) of a job only from a (port,
IPv4 source) admitted for that (job, worker id), a COLLECT or WRITEBACK only from one
admitted as the job's PS, and passes a PUSH_ACK, PULL_REPLY or DONE_ACK of the job only from
one admitted as its PS; everything else is dropped and counted FOREIGN_WORKER, FOREIGN_PS or
FOREIGN_REPLY. A job without admissions is served to no one, so whoever adds a job admits its
hosts too (`admissions_from_topology`, or `hotagg-ctl tenancy install`).

The switch's tables are the only record, read on every call, as for jobs and hot keys.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from p4.v1 import p4runtime_pb2

from contract import names
from contract.constants import MAX_WORKERS
from controller.client import SwitchClient
from controller.errors import BadInput
from controller.forwarding import Route, TopologyError, compute_routes
from controller.p4info import P4Info
from topologies.topology import Topology

WORKER_TABLE = names.TABLE_WORKER_ADMISSION
PS_TABLE = names.TABLE_PS_ADMISSION
ADMIT = names.ACTION_ADMIT
PORT_MAX = (1 << 9) - 1  # v1model port_t


@dataclass(frozen=True, order=True)
class Admission:
    """One (port, address) a job's worker (worker_id set) or PS (worker_id None) may use."""

    job_id: int
    worker_id: int | None
    port: int
    addr: int  # IPv4 address as an int

    @property
    def is_ps(self) -> bool:
        return self.worker_id is None

    @property
    def who(self) -> str:
        return "ps" if self.is_ps else f"worker {self.worker_id}"

    def __str__(self) -> str:
        return f"job {self.job_id} {self.who}: port {self.port}, {ipaddress.IPv4Address(self.addr)}"

    def as_dict(self) -> dict[str, object]:
        return {
            "job_id": self.job_id,
            "role": "ps" if self.is_ps else "worker",
            "worker_id": self.worker_id,
            "port": self.port,
            "addr": str(ipaddress.IPv4Address(self.addr)),
        }


def parse_addr(text: str) -> int:
    try:
        return int(ipaddress.IPv4Address(text))
    except ValueError:
        raise BadInput(f"{text!r} is not an IPv4 address") from None


def admission(job_id: int, worker_id: int | None, port: int, addr: int | str) -> Admission:
    """A checked Admission; `worker_id` None admits the job's PS."""
    if not 0 <= job_id <= 0xFFFF:
        raise BadInput(f"job id {job_id} is not in 0..65535")
    # A worker id the switch refuses anyway (BAD_WORKER) is a mistake, not an admission.
    if worker_id is not None and not 0 <= worker_id < MAX_WORKERS:
        raise BadInput(f"worker id {worker_id} is not in 0..{MAX_WORKERS - 1}")
    if not 0 <= port <= PORT_MAX:
        raise BadInput(f"port {port} is not in 0..{PORT_MAX}")
    value = parse_addr(addr) if isinstance(addr, str) else addr
    if not 0 <= value < 1 << 32:
        raise BadInput(f"address {addr!r} is not an IPv4 address")
    return Admission(job_id, worker_id, port, value)


Peers = dict[tuple[str, int], tuple[str, int | None]]


def _peers(topo: Topology) -> Peers:
    """(switch, port) -> (node, port) at the link's other end; port None for a host."""
    peer: Peers = {}
    for link in topo.links:
        if link.port1 is None:  # a host link (Link.is_host_link), written so port1 narrows
            peer[(link.node2, link.port2)] = (link.node1, None)
        else:
            peer[(link.node1, link.port1)] = (link.node2, link.port2)
            peer[(link.node2, link.port2)] = (link.node1, link.port1)
    return peer


def _hops(
    topo: Topology, peers: Peers, routes: dict[str, list[Route]], src: str, dst: str
) -> list[tuple[str, int]]:
    """(switch, ingress port) of every switch a packet from host `src` to host `dst` crosses,
    following the routes the controller installs (controller/forwarding.py)."""
    return _walk(topo, peers, routes, *topo.attachment(src), topo.hosts[dst].ip)


def _walk(
    topo: Topology,
    peers: Peers,
    routes: dict[str, list[Route]],
    here: str,
    port: int | None,
    dst: str,
) -> list[tuple[str, int]]:
    """(switch, ingress port) of every switch a packet that enters switch `here` by `port`
    crosses on its way to address `dst` (`here` first; port None: the packet starts at
    `here`, which is then not listed). `dst` is a host's address, or a switch's service
    address, where the walk ends with that switch."""
    dst_ip = int(ipaddress.IPv4Address(dst))
    src = here if port is None else f"{here} port {port}"
    hops = []
    for _ in range(len(topo.switches)):
        if port is not None:
            hops.append((here, port))
        if topo.switches[here].service_ip == dst:
            return hops  # the switch the packet is addressed to
        if here not in routes:
            routes[here] = compute_routes(topo, here)
        route = next((r for r in routes[here] if r.prefix == dst_ip), None)
        if route is None:
            raise TopologyError(f"{here} has no route toward {dst} (from {src})")
        nxt, nxt_port = peers.get((here, route.port), (None, None))
        if nxt is None:
            raise TopologyError(f"{here} port {route.port} (toward {dst}) is not cabled")
        if nxt_port is None:
            return hops  # reached a host: dst, by construction of the routes
        here, port = nxt, nxt_port
    raise TopologyError(f"the routes from {src} to {dst} loop")


def admissions_from_topology(
    topo: Topology, switch: str, job_id: int, workers: Sequence[str], ps: Sequence[str]
) -> list[Admission]:
    """What `switch` admits for `job_id`: worker i (host workers[i]) on each port it reaches
    `switch` by on its way to every PS (its requests), and each PS host on the switch it is
    cabled to (which answers its COLLECT and WRITEBACK), on each port it reaches `switch` by
    on its way to every worker (its replies), and on each port by which the replies a switch
    on the worker's way to the PS makes for it reach `switch` (they carry the PS's address;
    in a tree these are the same ports). Sorted, without duplicates."""
    if switch not in topo.switches:
        raise TopologyError(f"no switch {switch!r} in {topo.source} (have {sorted(topo.switches)})")
    for host in (*workers, *ps):
        if host not in topo.hosts:
            raise TopologyError(f"no host {host!r} in {topo.source} (have {sorted(topo.hosts)})")
    peers: Peers = _peers(topo)
    routes: dict[str, list[Route]] = {}
    out: set[Admission] = set()
    for worker_id, host in enumerate(workers):
        addr = topo.hosts[host].ip
        for server in ps:
            for sw, port in _hops(topo, peers, routes, host, server):
                if sw == switch:
                    out.add(admission(job_id, worker_id, port, addr))
    for server in ps:
        addr = topo.hosts[server].ip
        sw, port = topo.attachment(server)
        if sw == switch:
            out.add(admission(job_id, None, port, addr))
        for host in workers:
            hops = _hops(topo, peers, routes, server, host)
            for answering, port in _hops(topo, peers, routes, host, server):
                # A switch's reply leaves it by egress: from the next switch on it is checked.
                hops += _walk(topo, peers, routes, answering, port, topo.hosts[host].ip)[1:]
            for sw, port in hops:
                if sw == switch:
                    out.add(admission(job_id, None, port, addr))
    return sorted(out, key=_order)


def _order(a: Admission) -> tuple:
    return (a.job_id, a.worker_id is not None, a.worker_id or 0, a.port, a.addr)


class Tenancy:
    """The two admission tables of one switch."""

    def __init__(self, client: SwitchClient, p4info: P4Info) -> None:
        self.client = client
        self.p4info = p4info

    def _entry(self, a: Admission, with_action: bool = True) -> p4runtime_pb2.TableEntry:
        match: dict[str, int] = {"job_id": a.job_id, "ingress_port": a.port, "src_addr": a.addr}
        if a.worker_id is None:  # a PS (Admission.is_ps), written so worker_id narrows
            table = PS_TABLE
        else:
            table = WORKER_TABLE
            match["worker_id"] = a.worker_id
        return self.p4info.table_entry(table, match, ADMIT if with_action else None, {})

    def list(self, job_id: int | None = None) -> list[Admission]:
        out = []
        for table in (PS_TABLE, WORKER_TABLE):
            for entry in self.client.read_table(self.p4info.wildcard(table)):
                m = self.p4info.decode_entry(entry).match
                # every field is exact, so each decodes to int (MatchValue's tuple is lpm's)
                worker = int(m["worker_id"]) if "worker_id" in m else None  # type: ignore[arg-type]
                job, port, addr = int(m["job_id"]), int(m["ingress_port"]), int(m["src_addr"])  # type: ignore[arg-type]
                a = Admission(job, worker, port, addr)
                if job_id is None or a.job_id == job_id:
                    out.append(a)
        return sorted(out, key=_order)

    def admit(self, admissions: Iterable[Admission]) -> int:
        """Insert the admissions the switch lacks; returns how many were inserted."""
        have = set(self.list())
        new = sorted(set(admissions) - have, key=_order)
        self.client.write_entries("insert", [self._entry(a) for a in new])
        return len(new)

    def revoke(self, admissions: Iterable[Admission]) -> int:
        """Delete those of `admissions` the switch has; returns how many were deleted."""
        have = set(self.list())
        gone = sorted(set(admissions) & have, key=_order)
        self.client.write_entries("delete", [self._entry(a, False) for a in gone])
        return len(gone)

    def install(
        self, job_id: int, admissions: Iterable[Admission], replace: bool = False
    ) -> dict[str, int]:
        """Make the switch admit `admissions` (all of job `job_id`); with `replace`, also
        revoke the job's other admissions. Idempotent."""
        wanted = set(admissions)
        if any(a.job_id != job_id for a in wanted):
            raise BadInput(f"admissions for another job than {job_id}")
        have = set(self.list(job_id))
        stale = sorted(have - wanted, key=_order) if replace else []
        new = sorted(wanted - have, key=_order)
        self.client.write_entries("delete", [self._entry(a, False) for a in stale])
        self.client.write_entries("insert", [self._entry(a) for a in new])
        return {"inserted": len(new), "kept": len(wanted & have), "deleted": len(stale)}

    def clear(self, job_id: int | None = None) -> int:
        """Revoke every admission (of one job); returns how many."""
        gone = self.list(job_id)
        self.client.write_entries("delete", [self._entry(a, False) for a in gone])
        return len(gone)


def leaf_admissions(
    topo: Topology, switch: str, job_id: int, ps: str, first_pseudo_worker: int
) -> list[Admission]:
    """Aggregation at every leaf (docs/design.md section 7): what `switch` admits besides
    the job's hosts. Remote leaf i (Topology.remote_leaves) sends partial PUSHes as
    pseudo-worker `first_pseudo_worker + i` from its service address, checked at every
    switch on their way to the PS; each remote leaf takes the PS's FLUSHes, and the chained
    WRITEBACK (sent on from the previous leaf with the PS's address), on the port they
    arrive by."""
    peers: Peers = _peers(topo)
    routes: dict[str, list[Route]] = {}
    ps_ip = topo.hosts[ps].ip
    remote = topo.remote_leaves()
    out: set[Admission] = set()
    for i, leaf in enumerate(remote):
        service = topo.switches[leaf].service_ip
        if service is None:
            raise TopologyError(f"remote leaf {leaf} has no service address")
        for sw, port in _walk(topo, peers, routes, leaf, None, ps_ip):
            if sw == switch:
                out.add(admission(job_id, first_pseudo_worker + i, port, service))
    senders: list[tuple[str, int | None]] = [topo.attachment(ps), *((r, None) for r in remote)]
    for sender, leaf in zip(senders, remote):  # the FLUSHes from the PS, then the chain
        for start in {sender, senders[0]}:
            service = str(topo.switches[leaf].service_ip)
            hops = _walk(topo, peers, routes, *start, service)
            if hops and hops[-1][0] == leaf == switch:
                out.add(admission(job_id, None, hops[-1][1], ps_ip))
    return sorted(out, key=_order)
