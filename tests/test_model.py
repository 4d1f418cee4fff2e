"""The analytical bound (experiment/model.py) on workloads small enough to count: the PS
link's, and every link's along the routes the controller installs."""

from __future__ import annotations

import numpy as np
import pytest

from experiment import model
from experiment.model import (
    PACKET_OVERHEAD,
    Aggregation,
    Paths,
    packet_bytes,
    predict,
    warmup_hot_set,
    workload_of,
)
from hosts.workloads import Step, Workload
from topologies.topology import Topology, load_topology


class FixedKeys(Workload):
    """Every worker pulls and pushes the same keys every iteration."""

    def __init__(self, keys: list[int]) -> None:
        self.keys = np.array(keys, dtype=np.uint64)
        self.key_space = max(keys) + 1

    def pull_keys(self, worker: int, iteration: int) -> np.ndarray:
        return self.keys

    def step(self, worker: int, iteration: int, keys: np.ndarray, pulled: np.ndarray) -> Step:
        return Step(keys, np.ones(len(keys), np.int32))

    def describe(self) -> dict:
        return {}


def test_packet_bytes() -> None:
    assert packet_bytes(0) == (0, 0)
    assert packet_bytes(8) == (1, PACKET_OVERHEAD + 8 * 12)
    assert packet_bytes(9) == (2, 2 * PACKET_OVERHEAD + 9 * 12)
    assert PACKET_OVERHEAD == 62  # Ethernet 14 + IPv4 20 + UDP 8 + hotagg 20


def test_counts_by_hand() -> None:
    """2 workers, 10 keys each, keys 0..3 hot, one PS at 1 Mbit/s."""
    wl = FixedKeys(list(range(10)))
    p = predict(wl, workers=2, iterations=3, mbps=1.0, hot={0, 1, 2, 3})
    pull_push = 2 * PACKET_OVERHEAD + 10 * 12  # 10 keys: 2 packets
    # server: per worker PULL + PUSH + DONE toward the PS; PULL_REPLY + PUSH_ACKs + DONE_ACK.
    assert p.server.to_ps == 2 * (2 * pull_push + PACKET_OVERHEAD)
    assert p.server.from_ps == 2 * (pull_push + 2 * PACKET_OVERHEAD + PACKET_OVERHEAD)
    cold = PACKET_OVERHEAD + 6 * 12  # the 6 cold keys: 1 packet
    collect = PACKET_OVERHEAD + 4 * 12  # 4 hot slots: 1 COLLECT each way
    assert p.offload.to_ps == 2 * (2 * cold + PACKET_OVERHEAD) + collect
    assert p.offload.from_ps == 2 * (cold + 2 * PACKET_OVERHEAD) + collect
    assert p.server_ms == pytest.approx(p.server.to_ps * 8 / 1e6 * 1e3)
    assert p.speedup == pytest.approx(p.server.to_ps / p.offload.to_ps)


def test_shards_split_the_load() -> None:
    wl = FixedKeys(list(range(32)))
    one = predict(wl, workers=4, iterations=2, mbps=10.0, hot=set())
    two = predict(wl, workers=4, iterations=2, mbps=10.0, hot=set(), shards=2)
    assert two.server.to_ps < one.server.to_ps  # each shard's link carries half the keys


def test_warmup_hot_set_uses_the_floor() -> None:
    """Keys every worker pushes every warm-up iteration are hot; the budget caps them."""
    wl = FixedKeys([5, 6, 7])
    hot, coverage = warmup_hot_set(wl, workers=2, warmup=4, budget=2)
    assert len(hot) == 2 and hot <= {5, 6, 7} and coverage == pytest.approx(2 / 3)


def test_more_skew_means_a_higher_bound() -> None:
    """A sanity property of the zipf workload, as the experiment builds it."""
    speedups = []
    for skew in (0.8, 1.4):
        config = {"workload": "zipf", "keys": 20000, "skew": skew, "seed": 1, "keys_per_iter": 128}
        wl = workload_of(config)
        hot, cov = warmup_hot_set(wl, workers=8, warmup=5, budget=256)
        speedups.append(predict(wl, 8, 10, 10.0, hot, cov).speedup)
    assert 1.0 <= speedups[0] < speedups[1]


# -- every link --------------------------------------------------------------------------


def zipf(skew: float = 1.1) -> Workload:
    config = {"workload": "zipf", "keys": 20000, "skew": skew, "seed": 3, "keys_per_iter": 128}
    return workload_of(config)


@pytest.mark.parametrize(("workers", "shards"), [(4, 1), (8, 1), (6, 2)])
def test_on_a_star_the_busiest_link_is_the_ps_link(workers: int, shards: int) -> None:
    """A star's every-link bound is the PS-link bound, to the last digit, in both modes."""
    wl = zipf()
    hot, cov = warmup_hot_set(wl, workers, warmup=5, budget=256)
    p = predict(wl, workers, 10, 5.0, hot, cov, shards)
    ps_links = {f"s1-h{workers + i}" for i in range(1, shards + 1)}
    for load, ps_ms in ((p.server, p.server_ms), (p.offload, p.offload_ms)):
        assert load.bound_ms == ps_ms
        assert load.bottleneck in ps_links  # into a PS: the requests outweigh the replies
    assert p.bound_speedup == p.speedup
    d = p.as_dict()
    assert d["server"]["bound_ms"] == d["server_ms"] and d["bound_speedup"] == d["speedup"]


def leafspine(mbps: float = 1.0) -> Topology:
    """leafspine:2:2: h1 (worker) and h2 (the PS) under s1, workers h3 and h4 under s2, the
    spine s3."""
    return load_topology("leafspine:2:2").with_bandwidth(mbps)


def test_paths_follow_the_controllers_routes() -> None:
    paths = Paths(leafspine())
    assert paths.between("h3", "h2") == ["h3", "s2", "s3", "s1", "h2"]
    assert paths.between("h2", "h4") == ["h2", "s1", "s3", "s2", "h4"]
    assert paths.between("h2", "s1") == ["h2", "s1"]  # a PS to its switch (COLLECT)
    assert paths.between("s1", "h3") == ["s1", "s3", "s2", "h3"]  # the switch's replies
    with pytest.raises(ValueError, match="no host is cabled to switch s3"):
        paths.between("h1", "s3")


def test_hot_packets_of_remote_workers_cross_the_spine_and_stop_at_the_ps_leaf() -> None:
    """Counted by hand: 10 keys per worker and iteration, 0..5 hot, one PS (h2) at s1."""
    wl = FixedKeys(list(range(10)))
    p = predict(wl, workers=3, iterations=2, mbps=None, hot=set(range(6)), topology=leafspine())
    all_keys = 2 * PACKET_OVERHEAD + 10 * 12  # one direction of a PULL or PUSH: 2 packets
    cold = PACKET_OVERHEAD + 4 * 12  # the 4 cold keys: 1 packet
    hot = PACKET_OVERHEAD + 6 * 12  # the 6 hot keys: 1 packet
    collect = hot  # 6 hot slots: 1 COLLECT each way
    remote = 2  # h3 and h4 reach the PS through the spine
    # server-only: every worker's PULL, PUSH and DONE reach the PS.
    assert p.server.links["s3-s1"] == remote * (2 * all_keys + PACKET_OVERHEAD)
    assert p.server.links["s1-h2"] == 3 * (2 * all_keys + PACKET_OVERHEAD)
    # offload: the hot PULL and PUSH cross the spine into s1 ...
    assert p.offload.links["s3-s1"] == remote * (2 * cold + PACKET_OVERHEAD + 2 * hot)
    # ... and stop there: the PS's link carries the cold ones, DONE and the COLLECT_REPLY.
    assert p.offload.links["s1-h2"] == 3 * (2 * cold + PACKET_OVERHEAD) + collect
    assert p.offload.links["h2-s1"] == 3 * (cold + 2 * PACKET_OVERHEAD) + collect
    # s1 answers the hot PULL (its size) and acks the hot PUSH (a header) back to h3, h4.
    replies = cold + PACKET_OVERHEAD + PACKET_OVERHEAD  # PULL_REPLY, PUSH_ACK, DONE_ACK
    assert p.offload.links["s1-s3"] == remote * (replies + hot + PACKET_OVERHEAD)
    # The spine into s1 is the offload bottleneck, the PS's link the server-only one.
    assert p.offload.bottleneck == "s3-s1" and p.server.bottleneck == "s1-h2"
    assert p.offload.bound_ms == pytest.approx(p.offload.links["s3-s1"] * 8 / 1e6 * 1e3)
    assert p.offload_ms < p.offload.bound_ms  # the PS link alone would promise too much


@pytest.mark.parametrize("mode", ["server", "offload"])
def test_bytes_are_conserved_along_the_paths(mode: str) -> None:
    """What enters a switch that answers nothing leaves it: the leaf s2 and the spine."""
    wl = zipf()
    hot, _ = warmup_hot_set(wl, 3, warmup=5, budget=64)
    p = predict(wl, 3, 8, None, hot, topology=leafspine())
    links = (p.server if mode == "server" else p.offload).links
    assert links["s2-s3"] == pytest.approx(links["h3-s2"] + links["h4-s2"], abs=0.2)
    assert links["s3-s2"] == pytest.approx(links["s2-h3"] + links["s2-h4"], abs=0.2)
    assert links["s3-s1"] == links["s2-s3"] and links["s1-s3"] == links["s3-s2"]
    if mode == "server":  # nothing stops at s1 either: the PS gets every request
        assert links["s1-h2"] == pytest.approx(links["h1-s1"] + links["s3-s1"], abs=0.2)
        assert links["h2-s1"] == pytest.approx(links["s1-h1"] + links["s1-s3"], abs=0.2)
    assert len(links) == 2 * len(leafspine().links)  # every link, each way


def test_a_second_design_is_one_function(monkeypatch: pytest.MonkeyPatch) -> None:
    """A design that stops hot packets at the worker's own switch and sends nothing else:
    the spine then carries the cold keys only."""

    def own_leaf(topology: Topology, hot_keys_of: object) -> Aggregation:
        return Aggregation(stop=lambda path: 1, control=())

    monkeypatch.setitem(model.DESIGNS, "own-leaf", own_leaf)
    wl = FixedKeys(list(range(10)))
    p = predict(wl, 3, 2, None, {0, 1, 2, 3}, topology=leafspine(), aggregate="own-leaf")
    cold = PACKET_OVERHEAD + 6 * 12
    assert p.offload.links["s3-s1"] == 2 * (2 * cold + PACKET_OVERHEAD)
    assert p.as_dict()["aggregate"] == "own-leaf"


def test_what_the_model_cannot_count_is_an_error() -> None:
    wl = FixedKeys([1, 2])
    with pytest.raises(ValueError, match="designs are"):
        predict(wl, 3, 1, None, set(), topology=leafspine(), aggregate="everywhere")
    with pytest.raises(ValueError, match="4 workers, but leafspine:2:2 has 3"):
        predict(wl, 4, 1, None, set(), topology=leafspine())
    with pytest.raises(ValueError, match="has no rate"):
        predict(wl, 3, 1, None, set(), topology=load_topology("leafspine:2:2").with_bandwidth(None))
    with pytest.raises(ValueError, match="2 shards"):
        predict(wl, 3, 1, None, set(), 0.0, 2, topology=leafspine())


def test_the_serial_bound_puts_the_collect_and_the_done_acks_after_the_busiest_links_bytes() -> (
    None
):
    """ps-leaf on leafspine:2:2 counted by hand (200 keys a worker, 0..159 hot): the spine
    into s1 carries the remote workers' bytes before the barrier; then the 20 COLLECTs
    (3160 bytes each way) and the 3 DONE_ACKs cross the PS link, each after the shaper's
    burst, so the iteration takes at least both."""
    wl = FixedKeys(list(range(200)))
    p = predict(wl, workers=3, iterations=2, mbps=None, hot=set(range(160)), topology=leafspine())
    burst, collect = model.SHAPER_BURST_BYTES, 20 * PACKET_OVERHEAD + 160 * 12
    spine = p.offload.links["s3-s1"]  # none of the barrier's steps crosses it
    after = collect + 3 * PACKET_OVERHEAD  # h2-s1: the COLLECTs, then the DONE_ACKs
    expected = (spine - burst) * 8 / 1e3 + (after - burst) * 8 / 1e3
    assert p.offload.serial_ms == pytest.approx(expected)
    assert p.offload.serial_ms > p.offload.bound_ms  # the steps do not overlap the pushes
    # server-only has no steps but the DONE_ACKs, fewer bytes than a burst: its link bound
    assert p.server.serial_ms == p.server.bound_ms
    d = p.as_dict()
    assert d["offload"]["serial_ms"] == round(p.offload.serial_ms, 3)
    assert d["serial_speedup"] == pytest.approx(p.server.serial_ms / p.offload.serial_ms, 1e-3)
