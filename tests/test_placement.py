"""Placement of a topology's nodes on servers (experiment/placement.py) and the pure parts of
the links between them (topologies/remote_links.py): no ssh, no root."""

from __future__ import annotations

import pytest

from experiment.placement import (
    PlacementError,
    auto_placement,
    crossing_links,
    parse_overrides,
    place,
)
from topologies.cluster import Server, parse_servers
from topologies.generate import generate
from topologies.topology import Topology, parse_topology

TWO = parse_servers("host2")
THREE = parse_servers("host2,alice@host3")
HERE, HOST2, HOST3 = THREE


def topology(spec: str) -> Topology:
    return parse_topology(generate(spec), spec)


def by_server(where: dict[str, Server]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for node, server in where.items():
        grouped.setdefault(str(server), []).append(node)
    return grouped


def test_leafspine_puts_one_rack_per_server_and_the_ps_rack_with_the_spine_here() -> None:
    # leafspine:4:2: leaves s1..s4 (the PS h2 on s1), spine s5
    where = auto_placement(topology("leafspine:4:2"), THREE)
    assert by_server(where) == {
        "localhost": ["s1", "s4", "s5", "h1", "h2", "h7", "h8"],
        "root@host2": ["s2", "h3", "h4"],
        "alice@host3": ["s3", "h5", "h6"],
    }
    links = crossing_links(topology("leafspine:4:2"), where)
    assert [(lk.node1, lk.node2) for lk in links] == [("s2", "s5"), ("s3", "s5")]
    assert all(not lk.is_host_link for lk in links)  # only switch-to-switch links cross


def test_the_ps_rack_goes_first_wherever_it_is_in_the_file() -> None:
    ls = topology("leafspine:2:2").with_parameter_servers(["h3"])  # h3 hangs off s2
    assert by_server(auto_placement(ls, TWO)) == {
        "localhost": ["s2", "s3", "h3", "h4"],
        "root@host2": ["s1", "h1", "h2"],
    }


def test_a_star_spreads_its_workers_and_keeps_switch_and_ps_here() -> None:
    star = topology("star:5")  # h1..h5 workers, h6 the PS
    where = auto_placement(star, THREE)
    assert by_server(where) == {
        "localhost": ["s1", "h3", "h6"],
        "root@host2": ["h1", "h4"],
        "alice@host3": ["h2", "h5"],
    }
    assert {lk.node1 for lk in crossing_links(star, where)} == {"h1", "h2", "h4", "h5"}


def test_one_server_keeps_everything_here() -> None:
    where = auto_placement(topology("leafspine:2:2"), [HERE])
    assert set(where.values()) == {HERE} and len(where) == 7
    assert crossing_links(topology("leafspine:2:2"), where) == []


def test_overrides_move_single_nodes() -> None:
    ls = topology("leafspine:2:2")
    where = place(ls, THREE, "h1@host3, s3@root@host2,h4@localhost")
    assert (where["h1"], where["s3"], where["h4"]) == (HOST3, HOST2, HERE)
    assert where["s1"] == HERE and where["h2"] == HERE  # the rest as automatic
    assert place(ls, THREE, "") == auto_placement(ls, THREE)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("h9@host2", "has no host or switch 'h9'"),
        ("h1@host9", r"'host9' is not one of the servers \(localhost, root@host2, alice@host3\)"),
        ("h1@bob@host3", "'bob@host3' is not one of the servers"),
        ("h1@", "is not node@server"),
        ("h1", "is not node@server"),
        ("h1@host2,,h2@host2", "empty entry"),
        ("h1@host2,h1@host3", "names h1 twice"),
        ("h1@host;x", "'host;x' is not one of the servers"),
    ],
)
def test_a_bad_override_is_refused_in_one_line(text: str, says: str) -> None:
    with pytest.raises(PlacementError, match=says) as e:
        parse_overrides(text, topology("leafspine:2:2"), THREE)
    assert "\n" not in str(e.value)


def test_the_largest_hotagg_packet_fits_the_tunnel_mtu() -> None:
    pytest.importorskip("mininet")
    from topologies import remote_links
    from topologies.cluster import DEBIAN_CLUSTER

    if not DEBIAN_CLUSTER.exists():
        pytest.skip(f"{DEBIAN_CLUSTER} is missing (Debian package mininet)")
    assert remote_links.VXLAN_MTU == 1450
    assert remote_links.LARGEST_PACKET == 20 + 8 + 20 + 12 * 8  # IPv4, UDP, header, 8 entries
    assert remote_links.mtu_problem() is None
    assert "exceeds the cross-server tunnels' MTU (1450" in str(remote_links.mtu_problem(1451))


def test_a_plan_gives_each_link_its_own_vni_and_names() -> None:
    from topologies.cluster import DEBIAN_CLUSTER

    if not DEBIAN_CLUSTER.exists():
        pytest.skip(f"{DEBIAN_CLUSTER} is missing (Debian package mininet)")
    from topologies.remote_links import VNI_LIMIT, VNI_TRIES, VxlanPlan

    plan = VxlanPlan(tag="ab1", vni_base=VNI_LIMIT - 2)
    firsts = [next(plan.vnis(plan.next_link())) for _ in range(3)]
    assert firsts == [VNI_LIMIT - 2, VNI_LIMIT - 1, 1]  # wraps, never 0
    tries = list(plan.vnis(5))
    assert len(tries) == VNI_TRIES and all(0 < v < VNI_LIMIT for v in tries)
    assert plan.vxlan_name(12) == "hxab112" and len(plan.veth_name(99999)) <= 15
    with pytest.raises(ValueError, match="1-4 characters"):
        VxlanPlan(tag="toolong")
