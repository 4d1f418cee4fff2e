"""Topology files: loading, validation errors, and the Mininet Topo graph (no root needed)."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from contract.constants import MAX_WORKERS
from topologies.generate import generate
from topologies.topo import HotaggTopo
from topologies.topology import TopologyFileError, load_topology, parse_topology

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"

# The shape of the P4 tutorials' exercises/basic/pod-topo/topology.json (two of its hosts).
TUTORIAL = {
    "hosts": {
        "h1": {
            "ip": "10.0.1.1/24",
            "mac": "08:00:00:00:01:11",
            "commands": [
                "route add default gw 10.0.1.10 dev eth0",
                "arp -i eth0 -s 10.0.1.10 08:00:00:00:01:00",
            ],
        },
        "h3": {"ip": "10.0.3.3/24", "mac": "08:00:00:00:03:33", "commands": []},
    },
    "switches": {"s1": {"runtime_json": "pod-topo/s1-runtime.json"}, "s2": {}},
    "links": [["h1", "s1-p1"], ["s1-p3", "s2-p1", "2ms", 10], ["s2-p2", "h3", 5]],
}


def parse(doc: dict):
    return parse_topology(copy.deepcopy(doc), source="t.json")


def test_tutorial_format_loads() -> None:
    topo = parse(TUTORIAL)
    assert list(topo.switches) == ["s1", "s2"]
    assert topo.switches["s2"].device_id == 1 and topo.switches["s2"].grpc_port() == 50052
    h1 = topo.hosts["h1"]
    assert (h1.ip, h1.prefix_len, h1.role) == ("10.0.1.1", 24, "worker")
    assert h1.commands[0].startswith("route add")
    s2s = topo.links[1]
    assert (s2s.node1, s2s.port1, s2s.node2, s2s.port2) == ("s1", 3, "s2", 1)
    assert (s2s.latency, s2s.bandwidth, s2s.loss) == ("2ms", 10.0, 0.0)
    # A host end given second is put first, and a bare number of latency means ms.
    h3 = topo.links[2]
    assert (h3.node1, h3.port1, h3.node2, h3.port2, h3.latency) == ("h3", None, "s2", 2, "5ms")
    assert topo.attachment("h3") == ("s2", 2)


@pytest.mark.parametrize("name", ["star.json", "leafspine.json"])
def test_shipped_topologies(name: str) -> None:
    topo = load_topology(TOPOLOGIES / name)
    [ps] = topo.parameter_servers
    assert len(topo.workers) == 4
    ps_switch, _ = topo.attachment(ps.name)
    assert topo.switches[ps_switch].aggregate
    assert topo.service_ip_for(ps.name) == topo.switches[ps_switch].service_ip
    assert [s.name for s in topo.switches.values() if s.aggregate] == [ps_switch]
    # Workers sit on more than one leaf in the leaf-spine topology.
    leaves = {topo.attachment(w.name)[0] for w in topo.workers}
    assert len(leaves) == (2 if name == "leafspine.json" else 1)


def test_extensions_and_link_object() -> None:
    doc = copy.deepcopy(TUTORIAL)
    doc["hosts"]["h3"]["role"] = "ps"
    doc["switches"]["s2"] = {"aggregate": True, "service_ip": "10.0.3.254", "comment": "x"}
    doc["links"][1] = {"node1": "s1-p3", "node2": "s2-p1", "latency": "100us", "loss": 1.5}
    topo = parse(doc)
    assert topo.service_ip_for("h3") == "10.0.3.254"
    assert topo.service_ip_for("h1") is None  # s1 does not aggregate
    assert topo.service_addresses() == {"10.0.3.254": "02:00:00:00:02:fe"}
    link = topo.links[1]
    assert link.needs_netem and link.loss == 1.5 and link.bandwidth is None
    assert not topo.links[0].shaped


def mutate(path: tuple, value: object, delete: bool = False) -> dict:
    doc = copy.deepcopy(TUTORIAL)
    target = doc
    for key in path[:-1]:
        target = target[key]
    if delete:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return doc


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("hosts", "h1", "ip"), "10.0.1.1", "prefix length"),
        (("hosts", "h1", "ip"), "10.0.1.300/24", "not an IPv4 address"),
        (("hosts", "h1", "ip"), "10.0.3.3/24", "same IP"),
        (("hosts", "h1", "mac"), "08:00:00:00:03:33", "same MAC"),
        (("hosts", "h1", "mac"), "01:00:00:00:00:01", "multicast"),
        (("hosts", "h1", "mac"), "08-00-00-00-01-11", "not a MAC"),
        (("hosts", "h1", "role"), "server", "role 'server'"),
        (("hosts", "h1", "rol"), "ps", "did you mean 'role'"),
        (("hosts", "h1", "commands"), "ls", "list of strings"),
        (("switches", "s1", "agregate"), True, "did you mean 'aggregate'"),
        (("switches", "s1", "aggregate"), True, "needs a 'service_ip'"),
        (("switches", "s1", "service_ip"), "10.0.1.1", "same IP"),
        (("switches", "s1", "service_ip"), "10.0.9.0/24", "without a prefix length"),
        (("switches", "s1", "cpu_port"), 511, "cpu_port"),
        (("switches", "s1", "cpu_port"), 3, "CPU port"),
        (("switches", "s-1"), {}, "switch name 's-1'"),
        (("links", 0), ["h1", "s1"], "needs a port"),
        (("links", 0), ["h1", "s9-p1"], "names no host"),
        (("links", 0), ["h1", "s1-p0"], "numbered 1..510"),
        (("links", 0), ["h1", "h3"], "joins two hosts"),
        (("links", 0), ["h1", "s1-p3"], "already used"),
        (("links", 0), ["h1", "s1-p1", "fast"], "not a time"),
        (("links", 0), ["h1", "s1-p1", "1ms", -5], "positive number"),
        (("links", 0), ["h1", "s1-p1", "1ms", None, 101], "percentage"),
        (("links", 0), ["h1"], "expected"),
        (("links", 0), {"node1": "h1"}, "'node1' and 'node2'"),
        (("links",), {}, "must be a list"),
        (("switches",), {}, "at least one switch"),
    ],
)
def test_validation_errors(path: tuple, value: object, message: str) -> None:
    with pytest.raises(TopologyFileError, match=r"^t\.json: ") as info:
        parse(mutate(path, value))
    assert message in str(info.value)


def test_missing_pieces() -> None:
    with pytest.raises(TopologyFileError, match="missing 'links'"):
        parse(mutate(("links",), None, delete=True))
    with pytest.raises(TopologyFileError, match="missing 'mac'"):
        parse(mutate(("hosts", "h1", "mac"), None, delete=True))
    second = mutate(("links",), [*TUTORIAL["links"], ["h1", "s2-p5"]])
    with pytest.raises(TopologyFileError, match="second link"):
        parse(second)
    lonely = mutate(("hosts", "h9"), {"ip": "10.0.9.9/24", "mac": "08:00:00:00:09:99"})
    with pytest.raises(TopologyFileError, match=r"\['h9'\] have no link"):
        parse(lonely)
    with pytest.raises(TopologyFileError, match="both a host and a switch"):
        parse(mutate(("switches", "h1"), {}))


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(TopologyFileError, match="cannot read"):
        load_topology(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{ hosts: }")
    with pytest.raises(TopologyFileError, match="not valid JSON"):
        load_topology(bad)
    bad.write_text(json.dumps([1, 2]))
    with pytest.raises(TopologyFileError, match="top level"):
        load_topology(bad)


def test_topo_graph() -> None:
    topo = load_topology(TOPOLOGIES / "leafspine.json")
    graph = HotaggTopo(topo, grpc_base_port=60000, intf_prefix="t9", netem=True)
    assert graph.hosts() == ["h1", "h2", "h3", "h4", "h5"]
    assert graph.switches() == ["s1", "s2", "s3"]
    assert graph.grpc_ports == {"s1": 60000, "s2": 60001, "s3": 60002}
    s2 = graph.nodeInfo("s2")
    assert (s2["grpc_port"], s2["device_id"], s2["cpu_port"]) == (60001, 1, 255)
    h5 = graph.nodeInfo("h5")
    assert h5["ip"] == "10.0.1.5/24" and h5["mac"] == "08:00:00:00:01:05"
    # Static ARP: every other host and the aggregating switch's service address.
    assert set(h5["arp"]) == {"10.0.1.1", "10.0.1.2", "10.0.2.3", "10.0.2.4", "10.0.1.254"}
    links = {(a, b): info for a, b, info in graph.links(withInfo=True)}
    spine = links["s2", "s3"]
    assert (spine["port1"], spine["port2"]) == (3, 2)
    assert (spine["intfName1"], spine["intfName2"]) == ("t9s2-eth3", "t9s3-eth2")
    assert spine["delay"] == "0.1ms" and spine["bw"] == 10.0
    assert links["h3", "s2"]["intfName1"] == "eth0"
    assert graph.unshaped == []


def test_topo_without_netem_drops_delay_and_loss() -> None:
    doc = mutate(("links", 1), ["s1-p3", "s2-p1", "2ms", 10, 5])
    graph = HotaggTopo(parse(doc), netem=False)
    info = next(i for a, b, i in graph.links(withInfo=True) if (a, b) == ("s1", "s2"))
    assert "delay" not in info and "loss" not in info and info["bw"] == 10
    assert graph.unshaped == [
        "s1-p3 <-> s2-p1 (delay 2ms, loss 5%)",
        "h3 <-> s2-p2 (delay 5ms, loss 0%)",
    ]
    plain = next(i for a, b, i in graph.links(withInfo=True) if a == "h1")
    assert plain["cls"].__name__ == "Link"  # no shaping asked: no TCLink


def test_topo_rejects_long_interface_names() -> None:
    with pytest.raises(ValueError, match="15 characters"):
        HotaggTopo(parse(TUTORIAL), intf_prefix="verylongpfx")


@pytest.mark.parametrize(("bw", "r2q"), [(1000.0, 625), (100.0, 63), (10.0, 10)])
def test_htb_r2q_keeps_tc_quiet(bw: float, r2q: int) -> None:
    """tc warns "quantum of class is big" when rate / r2q > 200000 bytes."""
    from topologies.topo import HtbIntf

    intf = object.__new__(HtbIntf)  # bwCmds only builds command templates
    cmds, parent = intf.bwCmds(bw=bw)
    assert cmds[0].endswith(f"htb default 1 r2q {r2q}") and parent == " parent 5:1 "
    assert bw * 1e6 / 8 / r2q <= 200_000
    assert f"rate {bw:f}Mbit" in cmds[1]


def test_with_bandwidth_overrides_every_link() -> None:
    topo = load_topology(TOPOLOGIES / "leafspine.json")
    slow = topo.with_bandwidth(2.5)
    assert {link.bandwidth for link in slow.links} == {2.5}
    assert len(slow.links) == len(topo.links) and slow.hosts == topo.hosts
    assert [(x.node1, x.node2, x.latency) for x in slow.links] == [
        (x.node1, x.node2, x.latency) for x in topo.links
    ]
    assert all(link.bandwidth is None for link in topo.with_bandwidth(None).links)
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(TopologyFileError, match="positive number of Mbit/s"):
            topo.with_bandwidth(bad)


# ---- what the tutorials' files carry, and what they lack ----


def test_tutorial_extras_are_accepted_with_notices() -> None:
    doc = copy.deepcopy(TUTORIAL)
    doc["hosts"]["h1"]["ip"] = "10.0.1.0/31"  # RFC 3021: both addresses of a /31 are hosts
    doc["hosts"]["h3"]["ip"] = "10.0.3.1/31"
    doc["switches"]["s1"].update(program="build/basic.json", cpu_port="255")
    topo = parse(doc)
    assert topo.hosts["h1"].cidr == "10.0.1.0/31" and topo.switches["s1"].cpu_port == 255
    [ignored, unshaped] = topo.notices
    assert "['program', 'runtime_json']" in ignored
    assert "2 of 3 links have no bandwidth" in unshaped
    assert topo.with_bandwidth(10).notices == (ignored,)  # BW= shapes every link
    # The notice is said once, not per switch, and a fully shaped file has none.
    assert parse(json.loads((TOPOLOGIES / "star.json").read_text())).notices == ()


def test_cpu_port_string_must_still_be_a_port() -> None:
    doc = copy.deepcopy(TUTORIAL)
    doc["switches"]["s1"]["cpu_port"] = "cpu"
    with pytest.raises(TopologyFileError, match="cpu_port 'cpu' must be an integer"):
        parse(doc)


def test_missing_hotagg_keys_are_named_and_ps_option_fills_them() -> None:
    topo = parse(TUTORIAL)
    missing = topo.missing_hotagg_keys()
    assert missing is not None and '"role": "ps"' in missing and "PS=<host>" in missing
    with_ps = topo.with_parameter_servers(["h3"])
    assert with_ps.missing_hotagg_keys() is None
    assert [h.name for h in with_ps.parameter_servers] == ["h3"]
    assert [h.name for h in with_ps.workers] == ["h1"]
    s2 = with_ps.switches["s2"]
    assert s2.aggregate and s2.service_ip == "10.0.3.254" and s2.service_mac
    assert not with_ps.switches["s1"].aggregate
    assert with_ps.service_ip_for("h3") == "10.0.3.254"
    with pytest.raises(KeyError, match="no host 'h9'"):
        topo.with_parameter_servers(["h9"])
    with pytest.raises(TopologyFileError, match="must share one"):
        topo.with_parameter_servers(["h1", "h3"])


def test_ps_on_a_switch_that_does_not_aggregate_is_named() -> None:
    doc = copy.deepcopy(TUTORIAL)
    doc["hosts"]["h3"]["role"] = "ps"
    missing = parse(doc).missing_hotagg_keys()
    assert missing is not None and "switch s2" in missing and "PS=h3" in missing


# ---- generated topologies ----


@pytest.mark.parametrize(("spec", "workers", "servers"), [("star:4", 4, 1), ("star:32:2", 32, 2)])
def test_generated_star(spec: str, workers: int, servers: int) -> None:
    topo = load_topology(spec)
    assert topo.source == spec and topo.notices == ()
    assert [h.name for h in topo.workers] == [f"h{i}" for i in range(1, workers + 1)]
    assert len(topo.parameter_servers) == servers
    assert list(topo.switches) == ["s1"] and topo.switches["s1"].aggregate
    assert topo.missing_hotagg_keys() is None
    assert {link.bandwidth for link in topo.links} == {10.0}
    assert sorted(topo.attachment(h)[1] for h in topo.hosts) == list(
        range(1, workers + servers + 1)
    )


def test_generated_star_matches_the_shipped_file() -> None:
    """star:4 is star.json: the same hosts, switch and links (the comment aside)."""
    shipped, generated = load_topology(TOPOLOGIES / "star.json"), load_topology("star:4")
    assert shipped.hosts == generated.hosts
    assert shipped.switches == generated.switches
    assert shipped.links == generated.links


def test_generated_leafspine_routes_reach_every_host() -> None:
    from controller.forwarding import compute_routes

    topo = load_topology("leafspine:3:4")
    assert list(topo.switches) == ["s1", "s2", "s3", "s4"]
    [ps] = topo.parameter_servers
    assert topo.attachment(ps.name) == ("s1", 4)
    assert len(topo.workers) == 11 and topo.switches["s1"].aggregate
    for switch in topo.switches:
        routes = compute_routes(topo, switch)
        # every host, and s1's service address from every other switch
        assert len(routes) == len(topo.hosts) + (switch != "s1")
    # From leaf s2, a host on s3 is two hops away, through the spine s4 (port 5 of s2).
    by_ip = {str(r).split("/")[0]: r for r in compute_routes(topo, "s2")}
    assert by_ip["10.0.3.1"].port == 5 and by_ip["10.0.2.1"].port == 1


SQUARE = math.isqrt(MAX_WORKERS + 1) + 1  # SQUARE * SQUARE - 1 > MAX_WORKERS


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("star:0", f"1..{MAX_WORKERS}"),
        (f"star:{MAX_WORKERS + 1}", f"1..{MAX_WORKERS}"),
        ("star:4:0", "parameter servers"),
        ("star:250:4", "250 workers and 4 parameter server"),
        ("leafspine:2", "needs both L and H"),
        ("leafspine:1:1", "at least two hosts"),
        # the smallest square leaf-spine with more workers than the switch takes
        (f"leafspine:{SQUARE}:{SQUARE}", f"{SQUARE * SQUARE - 1} workers"),
        ("ring:4", "not a topology"),
    ],
)
def test_bad_specs_say_why(spec: str, message: str) -> None:
    with pytest.raises(TopologyFileError, match=message):
        load_topology(spec)


def test_controller_and_experiment_read_files_alike(tmp_path: Path) -> None:
    """One reader: a file the experiment rejects is rejected by the controller too."""
    from controller.forwarding import TopologyError, load_routes_topology

    doc = copy.deepcopy(TUTORIAL)
    doc["links"].append(["h1", "s2-p9"])  # a second link for h1
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TopologyFileError, match="second link"):
        load_topology(path)
    with pytest.raises(TopologyError, match="second link"):
        load_routes_topology(path)


# The p4lang/tutorials ecn and mri exercises give a switch-to-switch link's latency as the
# string "0"; their runner passes a string to TCLink unchanged, and tc reads a number without
# a unit as microseconds.
@pytest.mark.parametrize(
    ("latency", "stored", "seconds"),
    [
        ("0", "0us", 0.0),
        ("250", "250us", 250e-6),
        ("1.5", "1.5us", 1.5e-6),
        (0, "0ms", 0.0),
        (5, "5ms", 5e-3),
        ("2MS", "2ms", 2e-3),
        ("3msec", "3ms", 3e-3),
        ("7usecs", "7us", 7e-6),
        ("1sec", "1s", 1.0),
    ],
)
def test_latency_is_read_as_the_tutorials_runner_and_tc_read_it(
    latency: object, stored: str, seconds: float
) -> None:
    doc = mutate(("links",), [["h1", "s1-p1"], ["s1-p3", "s2-p1", latency, 0.5], ["s2-p2", "h3"]])
    link = parse(doc).links[1]
    assert link.latency == stored
    assert link.needs_netem == (seconds > 0)
    assert link.bandwidth == 0.5


@pytest.mark.parametrize("latency", ["", "fast", "2 ms", "-1", "1e3", "5 days", [2]])
def test_latency_that_is_not_a_tc_time_is_an_error(latency: object) -> None:
    doc = mutate(("links",), [["h1", "s1-p1"], ["s1-p3", "s2-p1", latency], ["s2-p2", "h3"]])
    with pytest.raises(TopologyFileError, match="latency"):
        parse(doc)


def test_every_tutorials_topology_file_loads() -> None:
    """All of p4lang/tutorials' exercises/**/topology.json, where a checkout of the tutorials
    is named by HOTAGG_TUTORIALS (their files are not shipped with hotagg)."""
    import os

    root = os.environ.get("HOTAGG_TUTORIALS")
    if not root:
        pytest.skip("set HOTAGG_TUTORIALS to a p4lang/tutorials checkout to load its files")
    files = sorted(Path(root).glob("exercises/**/topology.json"))
    assert files, f"no exercises/**/topology.json under {root}"
    for path in files:
        topo = load_topology(path)
        assert topo.hosts and topo.switches and topo.links, path


def test_with_leaves_aggregating_marks_every_switch_with_hosts_and_gives_each_an_address() -> None:
    topo = parse_topology(generate("leafspine:3:2")).with_leaves_aggregating()
    leaves = {n: s for n, s in topo.switches.items() if s.aggregate}
    assert sorted(leaves) == ["s1", "s2", "s3"] and not topo.switches["s4"].aggregate
    addresses = [s.service_ip for s in leaves.values()]
    assert len(set(addresses)) == 3 and not set(addresses) & {h.ip for h in topo.hosts.values()}
    for name, sw in leaves.items():  # each in its own rack's subnet
        rack = [h for h in topo.hosts.values() if topo.attachment(h.name)[0] == name]
        assert sw.service_ip.rsplit(".", 1)[0] == rack[0].ip.rsplit(".", 1)[0]
    assert topo.remote_leaves() == ["s2", "s3"]


def test_with_every_leaf_aggregating_each_service_address_is_routed_toward_its_leaf() -> None:
    from controller.forwarding import compute_routes

    topo = load_topology("leafspine:3:2").with_leaves_aggregating()
    services = {n: s.service_ip for n, s in topo.switches.items() if s.aggregate}
    for switch in topo.switches:
        by_ip = {str(r).split("/")[0]: r for r in compute_routes(topo, switch)}
        for leaf, address in services.items():
            if leaf == switch:
                assert address not in by_ip  # processed there, never routed on
            else:
                # toward the leaf: the port of a route to one of its hosts
                host = next(h for h in topo.hosts if topo.attachment(h)[0] == leaf)
                assert by_ip[address].port == by_ip[topo.hosts[host].ip].port
