"""Replies to workers across two switches (docs/design.md §2, "Tenancy"; docs/trust.md).

Two switch processes of one target, each on veth pairs (tests/conftest.py running_switch),
cabled by the test: whatever one sends out of its port 4 is sent into the other's port 4.
They are configured as `TOPOLOGY` says, through the controller: routes from
controller/forwarding.py, admissions from controller/tenancy.py's admissions_from_topology
(so the PS is admitted on s2's uplink, where its replies and the replies s1 makes for it
arrive), jobs, and hot keys on s1 only, which aggregates (the PS's leaf).

    s1 (aggregates)                   s2
      port 1  h1 (job 1 worker 0)       port 1  h4 (job 2 worker 0)
      port 3  h3 (job 1 and 2 PS)       port 2  h2 (job 1 worker 1)
      port 4  ---------------------- port 4
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from scapy.layers.inet import IP

from contract.constants import FLAG_FROM_SWITCH, HOTAGG_PORT, Op, Stat
from contract.frames import CLIENT_SPORT
from controller.forwarding import Forwarding, compute_routes
from controller.jobs import Jobs
from controller.tenancy import Tenancy, admission, admissions_from_topology
from tests.conftest import SwitchUnderTest, running_switch
from tests.packet_harness import Received, frame, host_ip
from topologies.topology import parse_topology

pytestmark = [pytest.mark.root]

UPLINK = 4


def _host(i: int, role: str) -> dict:
    return {"ip": f"10.0.0.{i}/24", "mac": f"02:00:00:00:00:{i:02x}", "role": role}


TOPOLOGY = parse_topology(
    {
        "hosts": {"h1": _host(1, "worker"), "h2": _host(2, "worker"), "h3": _host(3, "ps"),
                  "h4": _host(4, "worker")},
        "switches": {"s1": {"aggregate": True, "service_ip": "10.0.0.254"}, "s2": {}},
        "links": [["h1", "s1-p1"], ["h3", "s1-p3"], ["h4", "s2-p1"], ["h2", "s2-p2"],
                  ["s1-p4", "s2-p4"]],
    },
    "two switches (tests/test_replies.py)",
)  # fmt: skip
JOB, OTHER_JOB = 1, 2
JOBS = {JOB: ["h1", "h2"], OTHER_JOB: ["h4"]}  # job -> worker hosts (worker id = index)
PS = ["h3"]
H1, H2, H3, H4 = 1, 2, 3, 4  # host numbers (addresses 10.0.0.<n>)
PORT = {"s1": {H1: 1, H3: 3}, "s2": {H4: 1, H2: 2}}  # switch -> host -> port


@dataclass
class Pair:
    s1: SwitchUnderTest
    s2: SwitchUnderTest

    def switch(self, name: str) -> SwitchUnderTest:
        return self.s1 if name == "s1" else self.s2

    def send(self, name: str, host: int, data: bytes) -> dict[str, list[Received]]:
        """`data` from `host` into its switch; each frame out of an uplink goes into the
        other switch's uplink, until nothing crosses. Returns what each switch sent to its
        hosts (the uplinks' frames left out)."""
        got: dict[str, list[Received]] = {"s1": [], "s2": []}
        todo = [(name, PORT[name][host], data)]
        while todo:
            here, port, frame_in = todo.pop(0)
            other = "s2" if here == "s1" else "s1"
            for out in self.switch(here).ports.exchange(port, frame_in):
                if out.port == UPLINK:
                    todo.append((other, UPLINK, out.data))
                else:
                    got[here].append(out)
        return got

    def stats(self) -> dict[str, dict[Stat, int]]:
        return {"s1": self.s1.stats(), "s2": self.s2.stats()}


def configure(pair: Pair) -> None:
    for name in ("s1", "s2"):
        sut = pair.switch(name)
        sut.client.set_pipeline(sut.p4info.message, sut.device_config)
        Forwarding(sut.client, sut.p4info).install(compute_routes(TOPOLOGY, name))
        jobs = Jobs(sut.client, sut.p4info)
        sut.jobs = {job: jobs.add(job, 64) for job in JOBS}
        tenancy = Tenancy(sut.client, sut.p4info)
        for job, workers in JOBS.items():
            tenancy.admit(admissions_from_topology(TOPOLOGY, name, job, workers, PS))
        sut.ports.drain()
    pair.s1.hot(JOB, {10: 0, 11: 1})


@pytest.fixture(scope="module", params=["embedded", "bmv2"])
def switches(request) -> Iterator[Pair]:
    with running_switch(request.param, "a") as a, running_switch(request.param, "b") as b:
        pair = Pair(SwitchUnderTest(*a), SwitchUnderTest(*b))
        try:
            yield pair
        finally:
            pair.s1.close()
            pair.s2.close()


@pytest.fixture
def pair(switches: Pair) -> Pair:
    configure(switches)
    return switches


def changed(before: dict[str, dict[Stat, int]], after: dict[str, dict[Stat, int]]) -> dict:
    return {
        (name, s.name): after[name][s] - before[name][s]
        for name in after
        for s in Stat
        if after[name][s] != before[name][s]
    }


def test_the_controller_admits_the_ps_where_its_replies_arrive(pair):
    """s2 admits the PS (of both jobs) on its uplink, s1 on the PS's own port."""
    for name, port in (("s1", 3), ("s2", UPLINK)):
        got = set(Tenancy(pair.switch(name).client, pair.s1.p4info).list())
        for job in JOBS:
            assert admission(job, None, port, host_ip(H3)) in got, (name, sorted(map(str, got)))


def test_a_reply_the_first_switch_makes_passes_the_second(pair):
    push = frame(H2, H3, Op.PUSH, [(10, 5), (11, 6)], seq=1, iteration=1, job_id=JOB,
                 worker_id=1)  # fmt: skip
    before = pair.stats()
    got = pair.send("s2", H2, push)
    assert got["s1"] == [] and len(got["s2"]) == 1
    ack = got["s2"][0]
    assert ack.port == PORT["s2"][H2] and ack.agg.op == Op.PUSH_ACK and ack.agg.mask == 0b11
    assert ack.agg.flags & FLAG_FROM_SWITCH and ack.pkt[IP].src == host_ip(H3)
    assert ack.pkt[IP].ttl == 64 - 3  # request: s2, s1; reply: s1 (with the request's), s2
    assert changed(before, pair.stats()) == {
        ("s2", "PUSH"): 1, ("s2", "COLD_FORWARDED"): 2,  # no hot keys on s2
        ("s1", "PUSH"): 1, ("s1", "HOT_APPLIED"): 2, ("s1", "PUSH_SWITCH_ACK"): 1,
    }  # fmt: skip
    # The PS writes key 10 back; s1 answers h2's pull from its cache, across s2.
    wb = frame(H3, H1, Op.WRITEBACK, [(10, 99)], seq=1, iteration=2, job_id=JOB)
    assert [r.agg.op for r in pair.send("s1", H3, wb)["s1"]] == [Op.WRITEBACK_ACK]
    pull = frame(H2, H3, Op.PULL, [(10, 0)], seq=1, iteration=2, job_id=JOB, worker_id=1)
    [hit] = pair.send("s2", H2, pull)["s2"]
    assert hit.agg.op == Op.PULL_REPLY and [(e.key, e.value) for e in hit.agg.entries] == [(10, 99)]


@pytest.mark.parametrize("op", [Op.PUSH_ACK, Op.PULL_REPLY, Op.DONE_ACK])
def test_the_ps_replies_pass_and_forged_ones_are_dropped_where_they_enter(pair, op):
    def reply(src: int, job: int = JOB) -> bytes:
        return frame(src, H2, op, [(10, 1)], sport=HOTAGG_PORT, dport=CLIENT_SPORT + H2, seq=1,
                     iteration=1, job_id=job, worker_id=1)  # fmt: skip

    genuine = reply(H3)
    [got] = pair.send("s1", H3, genuine)["s2"]
    assert got.port == PORT["s2"][H2] and bytes(got.agg) == genuine[42:]
    # job 2's worker h4 (on s2) with the PS's address and with its own, and job 1's worker
    # h1 (on s1) with the PS's address: each is dropped by the switch it enters.
    for switch, host, data in (("s2", H4, genuine), ("s2", H4, reply(H4)), ("s1", H1, genuine),
                               ("s2", H4, reply(H3, job=OTHER_JOB))):  # fmt: skip
        before = pair.stats()
        assert pair.send(switch, host, data) == {"s1": [], "s2": []}
        assert changed(before, pair.stats()) == {(switch, "FOREIGN_REPLY"): 1}


def test_without_the_transit_admission_the_second_switch_refuses_the_reply(pair):
    """What the controller's PS admissions on transit switches are for."""
    Tenancy(pair.s2.client, pair.s2.p4info).revoke([admission(JOB, None, UPLINK, host_ip(H3))])
    push = frame(H2, H3, Op.PUSH, [(10, 5)], seq=1, iteration=1, job_id=JOB, worker_id=1)
    before = pair.stats()
    assert pair.send("s2", H2, push) == {"s1": [], "s2": []}
    assert changed(before, pair.stats())[("s2", "FOREIGN_REPLY")] == 1
