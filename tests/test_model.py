"""The analytical PS-link bound (experiment/model.py) on workloads small enough to count."""

from __future__ import annotations

import numpy as np
import pytest

from experiment.model import PACKET_OVERHEAD, packet_bytes, predict, warmup_hot_set, workload_of
from hosts.workloads import Step, Workload


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
