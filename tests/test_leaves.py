"""Aggregation at every leaf (AGGREGATE=leaves, docs/design.md section 7): the options, the
admissions and routes the controller derives, the model's bytes, and real runs on a
leaf-spine (Mininet, both targets) that must end exact, also under loss."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from controller.tenancy import admissions_from_topology, leaf_admissions
from experiment.config import RunConfig
from experiment.model import PACKET_OVERHEAD, predict, warmup_hot_set, workload_of
from experiment.schema import load_summary
from tests.test_e2e import SMALL, missing_prerequisites, run_cli
from topologies.switches import REPO_ROOT, bmv2_missing
from topologies.topology import load_topology


def leaves_topology(spec: str = "leafspine:3:2"):
    return load_topology(spec).with_leaves_aggregating()


def test_leaves_is_refused_where_it_cannot_work(tmp_path: Path) -> None:
    for topo, words in (
        ("star:4", "hosts on one switch only"),
        ("star:4:2", "to one PS"),
    ):
        proc = run_cli("--topo", topo, "--aggregate", "leaves", "--runs-dir", str(tmp_path))
        assert proc.returncode == 2 and "AGGREGATE=leaves" in proc.stderr, proc.stderr
        assert words in proc.stderr, proc.stderr


def test_each_remote_leaf_admits_the_ps_and_every_switch_up_admits_its_pseudo_worker() -> None:
    topo = leaves_topology()
    [ps] = topo.parameter_servers
    ps_ip = ps.ip
    remote = topo.remote_leaves()
    assert remote == ["s2", "s3"]
    workers = len(topo.workers)
    by_switch = {sw: leaf_admissions(topo, sw, 1, ps.name, workers) for sw in topo.switches}
    for i, leaf in enumerate(remote):
        service = topo.switches[leaf].service_ip
        pseudo = workers + i
        # the root and the spine admit the pseudo-worker from the leaf's service address
        for sw in ("s1", "s4"):
            assert any(a.worker_id == pseudo and str(a).endswith(str(service))
                       for a in by_switch[sw]), (sw, by_switch[sw])  # fmt: skip
        # the leaf admits the PS (FLUSH, chain) on its uplink, and no pseudo-worker
        uplink = topo.attachment(next(h for h in topo.hosts if topo.attachment(h)[0] == leaf))
        ps_entries = [a for a in by_switch[leaf] if a.is_ps]
        assert len(ps_entries) == 1 and str(ps_entries[0]).endswith(ps_ip)
        assert ps_entries[0].port not in {uplink[1]}  # the uplink, not a host's port
    # nothing of the kind where the design is not used: the hosts' own admissions only
    assert all(a.worker_id is None or a.worker_id < workers
               for a in admissions_from_topology(topo, "s1", 1, [h.name for h in topo.workers],
                                                 [ps.name]))  # fmt: skip


@pytest.mark.parametrize("spec", ["leafspine:4:4", "leafspine:2:4"])
def test_the_model_moves_hot_traffic_off_the_spine_and_adds_flushes_to_the_ps_link(spec) -> None:
    base = load_topology(spec)
    workers = len(base.workers)
    config = RunConfig().as_dict() | {"workers": workers}
    workload = workload_of(config)
    hot, coverage = warmup_hot_set(workload, workers, 5, 256)
    args = (workload, workers, 10, 10, hot, coverage)
    ps_leaf = predict(*args, topology=base, aggregate="ps-leaf").offload
    leaves = predict(*args, topology=base.with_leaves_aggregating(), aggregate="leaves").offload
    spine = f"s{len(base.switches)}-s1"  # from the spine into the PS's leaf
    assert leaves.links[spine] < ps_leaf.links[spine]
    # toward the PS the same cold traffic, one COLLECT_REPLY pass and each worker's DONE
    # flagged HOT_PUSHED; from it, the FLUSHes and the chain on top of ps-leaf's
    ps = base.parameter_servers[0].name
    hot_pushed = workers * PACKET_OVERHEAD
    assert leaves.links[f"s1-{ps}"] == pytest.approx(
        ps_leaf.links[f"s1-{ps}"] + hot_pushed, rel=0.05
    )
    assert leaves.links[f"{ps}-s1"] > ps_leaf.links[f"{ps}-s1"]


def test_the_serial_bound_counts_the_steps_after_the_pushes_in_both_designs() -> None:
    """With the barrier in order (model._serial_ms) at skew 1.2 each design's busiest link
    has its bytes before the barrier, and then ps-leaf's COLLECT pass, and the leaves
    design's COLLECT pass and chained WRITEBACK, cross the PS link one after the other."""
    base = load_topology("leafspine:4:4")
    workers = len(base.workers)
    config = RunConfig().as_dict() | {"workers": workers, "skew": 1.2, "seed": 9}
    workload = workload_of(config)
    hot, coverage = warmup_hot_set(workload, workers, 5, 256)
    args = (workload, workers, 10, 1, hot, coverage)
    ps_leaf = predict(*args, topology=base, aggregate="ps-leaf").offload
    leaves = predict(*args, topology=base.with_leaves_aggregating(), aggregate="leaves").offload
    assert ps_leaf.bottleneck == "s5-s1" and leaves.bottleneck == "s1-h4"
    for load in (ps_leaf, leaves):
        assert load.bound_ms + 10 < load.serial_ms < 1.1 * load.bound_ms


def run_leaves(tmp_path: Path, *extra: str) -> dict:
    if why := missing_prerequisites():
        pytest.skip(why)
    runs = tmp_path / "runs"
    proc = subprocess.run(
        [sys.executable, "-m", "experiment", "run", *SMALL, "--topo", "leafspine:2:2",
         "--aggregate", "leaves", "--runs-dir", str(runs), "--grpc-base-port", "0",
         "--intf-prefix", f"l{os.getpid() % 1000}", *extra],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    summary_path = runs / "latest" / "summary.json"
    assert summary_path.exists(), proc.stdout[-2000:] + proc.stderr[-2000:]
    return dict(load_summary(summary_path))


@pytest.mark.parametrize(
    "extra",
    [(), ("--loss", "0.02"), ("--hotset", "dynamic"), ("--target", "bmv2")],
    ids=["embedded", "embedded-loss", "embedded-dynamic", "bmv2"],
)
def test_leaves_run_is_exact_and_every_leaf_takes_hot_updates(tmp_path: Path, extra) -> None:
    if "bmv2" in extra and (why := bmv2_missing()):
        pytest.skip(why)
    summary = run_leaves(tmp_path, *extra)
    assert summary["exact"], summary["params_sha256"]
    offload = summary["modes"]["offload"]
    assert 0 < offload["updates_in_switch"] < offload["updates_total"]
    stats = offload["switch_stats"]
    # the remote leaf flushed, the root absorbed, the spine only routed
    assert stats["s2"]["FLUSH"] > 0 and stats["s2"]["HOT_APPLIED"] > 0
    assert stats["s1"]["FLUSH_ABSORBED"] > 0
    assert stats["s3"]["HOT_APPLIED"] == 0 and stats["s3"]["TRANSIT"] > 0
    assert summary["config"]["aggregate"] == "leaves"
