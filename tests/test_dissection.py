"""The latency dissection (experiment/dissection.py): its arithmetic on synthetic logs, and
on a real run that its components add up to the latency the workers measured."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from experiment import dissection
from experiment.dissection import COMPONENTS, serialization_us, wire_bytes
from experiment.report import dissection_lines
from experiment.summary import dissect

MBPS = 2.0  # the links' rate in these logs
SWITCH_US = 300.0  # one pass through the switch, as if estimated


def wrow(kind: str, seq: int, ready: float, sent: float, reply: float, **extra: str) -> dict:
    """A worker log row as experiment.results reads it (strings), of 8 entries."""
    row = {"kind": kind, "worker": "0", "seq": str(seq), "entries": "8", "retransmits": "0"}
    row |= {"from_switch": "0", "ready": f"{ready:.6f}", "sent": f"{sent:.6f}"}
    row |= {"reply": f"{reply:.6f}", "latency_us": f"{(reply - sent) * 1e6:.1f}"}
    return row | extra


def prow(op: str, seq: int, arrival: float, start: float, reply: float | None, result: str) -> dict:
    """A PS log row of worker 0's request `seq`."""
    return {"op": op, "worker": "0", "seq": str(seq), "arrival": f"{arrival:.6f}",
            "start": f"{start:.6f}", "reply": "" if reply is None else f"{reply:.6f}",
            "result": result}  # fmt: skip


def test_a_ps_served_push_splits_into_its_measured_and_derived_parts() -> None:
    w = wrow("push", 1, ready=10.0, sent=10.002, reply=10.020)
    records = dissection.ps_records([prow("PUSH", 1, 10.012, 10.0125, 10.0128, "accepted")])
    c = dissection.split_request(w, records["PUSH", "0", "1"], MBPS, SWITCH_US)
    up = serialization_us(wire_bytes(8), MBPS)
    assert c["window"] == pytest.approx(2000.0)
    assert c["to_switch"] == pytest.approx(up)
    assert c["switch"] == pytest.approx(SWITCH_US)
    # the PS link is the rest of the way to the PS's kernel receive
    assert c["ps_link"] == pytest.approx(10_000.0 - up - SWITCH_US)
    assert c["ps_socket"] == pytest.approx(500.0)
    assert c["ps_held"] == pytest.approx(0.0, abs=1e-6)
    assert c["ps_service"] == pytest.approx(300.0)
    assert c["back"] == pytest.approx(7200.0)
    assert sum(c.values()) == pytest.approx(20_000.0)  # ready -> reply


def test_a_held_pull_counts_its_hold_apart_from_the_socket_queue() -> None:
    rows = [
        prow("PULL", 4, 5.000, 5.001, None, "held"),  # handled at 5.001, held
        prow("PULL", 4, 5.000, 5.050, 5.0502, "replied"),  # answered at the release
    ]
    w = wrow("pull", 4, ready=4.990, sent=4.990, reply=5.060)
    c = dissection.split_request(w, dissection.ps_records(rows)["PULL", "0", "4"], MBPS, 0.0)
    assert c["ps_socket"] == pytest.approx(1000.0)
    assert c["ps_held"] == pytest.approx(49_000.0)
    assert c["ps_service"] == pytest.approx(200.0)
    assert sum(c.values()) == pytest.approx(70_000.0)


def test_a_switch_answered_request_has_no_ps_part_and_a_resent_one_is_not_split() -> None:
    by_switch = wrow("pull", 1, ready=1.0, sent=1.001, reply=1.003, from_switch="1")
    c = dissection.split_request(by_switch, None, MBPS, SWITCH_US)
    assert all(c[n] == 0 for n in ("ps_link", "ps_socket", "ps_service", "unsplit"))
    assert c["to_switch"] + c["switch"] + c["back"] == pytest.approx(2000.0)
    assert c["switch"] == SWITCH_US
    resent = wrow("push", 2, ready=1.0, sent=1.0, reply=1.5, retransmits="1")
    record = dissection.ps_records([prow("PUSH", 2, 1.2, 1.2, 1.2001, "accepted")])
    c = dissection.split_request(resent, record["PUSH", "0", "2"], MBPS, SWITCH_US)
    assert c["unsplit"] == pytest.approx(500_000.0) and c["ps_link"] == 0


def test_derived_parts_never_exceed_the_measured_way_to_the_ps() -> None:
    # a link with no queue: the way to the PS is shorter than serialization + switch pass
    w = wrow("push", 1, ready=1.0, sent=1.0, reply=1.01)
    records = dissection.ps_records([prow("PUSH", 1, 1.0003, 1.0003, 1.0004, "accepted")])
    c = dissection.split_request(w, records["PUSH", "0", "1"], 0.5, SWITCH_US)
    assert c["to_switch"] == pytest.approx(300.0) and c["switch"] == 0 and c["ps_link"] == 0


def test_the_switch_pass_is_the_median_switch_answer() -> None:
    latencies = [900.0, 1000.0, 5000.0]  # a slow outlier does not move the median
    rows = [
        wrow("push", i, 1.0, 1.0, 1.0 + us / 1e6, from_switch="1") for i, us in enumerate(latencies)
    ]
    rows.append(wrow("push", 9, 1.0, 1.0, 1.1))  # answered by the PS: not a sample
    rows.append(wrow("pull", 10, 1.0, 1.0, 1.1, from_switch="1", retransmits="1"))  # resent
    passes = dissection.switch_pass_us(rows, MBPS, False)
    assert passes["push"] == (pytest.approx(1000.0), 3)
    assert passes["pull"] == (0.0, 0)
    # where the links serialize, their serialization both ways is not the switch's
    serialized = serialization_us(wire_bytes(8), MBPS) + serialization_us(wire_bytes(0), MBPS)
    passes = dissection.switch_pass_us(rows, MBPS, True)
    assert passes["push"][0] == pytest.approx(1000.0 - serialized)


def test_the_run_tells_whether_its_links_serialize() -> None:
    serialized = serialization_us(wire_bytes(8), MBPS) + serialization_us(wire_bytes(0), MBPS)

    def answered(extra_us: float) -> list[dict]:
        return [
            wrow("push", i, 1.0, 1.0, 1.0 + (serialized + extra_us + i) / 1e6, from_switch="1")
            for i in range(20)
        ]

    assert dissection.link_serializes(answered(50.0), MBPS) is True
    # back sooner than the serialization: the shaper's burst passed them at once
    assert dissection.link_serializes(answered(-serialized / 2), MBPS) is False
    assert dissection.link_serializes([wrow("push", 1, 1.0, 1.0, 1.1)], MBPS) is None
    assert dissection.link_serializes(answered(50.0), None) is False


def test_in_flight_counts_open_requests_per_bin() -> None:
    starts, ends = np.array([0.0, 0.5, 1.0]), np.array([1.0, 1.5, 2.0])
    occupancy = dissection._occupancy(starts, ends, np.linspace(0.0, 2.0, 5))
    assert occupancy == pytest.approx([1.0, 2.0, 2.0, 1.0])
    assert dissection._peak(starts, ends) == 2  # one ends at 1.0 as another starts


def test_dissect_means_add_up_and_keep_the_old_fields() -> None:
    wrows, prows = [], []
    rng = np.random.default_rng(7)
    for seq in range(1, 41):
        ready = seq * 0.1
        sent = ready + rng.uniform(0, 0.005)
        arrival = sent + rng.uniform(0.002, 0.02)
        start = arrival + rng.uniform(0, 0.001)
        done = start + rng.uniform(0.0001, 0.0005)
        reply = done + rng.uniform(0.001, 0.003)
        switch = seq % 4 == 0
        wrows.append(wrow("push", seq, ready, sent, reply, from_switch=str(int(switch))))
        if not switch:
            prows.append(prow("PUSH", seq, arrival, start, done, "accepted"))
    out = dissect(wrows, prows, MBPS, {"push": SWITCH_US})["push"]
    comps = out["components_us"]
    assert list(comps) == list(COMPONENTS)
    assert sum(v or 0.0 for v in comps.values()) == pytest.approx(
        out["mean_ready_to_reply_us"], abs=0.1 * len(COMPONENTS)
    )
    window = np.mean([(float(r["sent"]) - float(r["ready"])) * 1e6 for r in wrows])
    assert out["mean_ready_to_reply_us"] == pytest.approx(out["mean_total_us"] + window, abs=1.0)
    served = out["ps_served_components_us"]
    assert served["ps_socket"] == pytest.approx(
        np.mean([(float(p["start"]) - float(p["arrival"])) * 1e6 for p in prows]), abs=0.1
    )
    assert out["answered_by_switch"] == 10 and out["resent"] == 0
    assert out["negative_segments"] == 0
    assert out["mean_ps_queueing_us"] is not None  # the three-part split is still there


def test_in_flight_summary_and_report_lines() -> None:
    wrows = [wrow("push", i, i * 0.01, i * 0.01, i * 0.01 + 0.03) for i in range(1, 21)]
    prows = [prow("PUSH", i, i * 0.01 + 0.01, i * 0.01 + 0.011, i * 0.01 + 0.012, "accepted")
             for i in range(1, 21)]  # fmt: skip
    flight = dissection.in_flight(wrows, dissection.ps_records(prows), bins=10)
    assert flight is not None
    assert flight["max_to_ps"] == 3 and flight["max_at_ps"] == 1
    # the means are the series' time-weighted mean
    assert np.mean(flight["to_ps"]) == pytest.approx(flight["mean_to_ps"], rel=0.01)
    split = dissect(wrows, prows, MBPS, {"push": 0.0})
    mode = {"latency_dissection": split, "ps_in_flight": flight,
            "latency_dissection_basis": dissection.basis(
                MBPS, False, {"push": (120.0, 4), "pull": (0.0, 0)}, [1.5])}  # fmt: skip
    lines = dissection_lines({"modes": {"server": mode, "offload": mode}})
    table = [line for line in lines if line.startswith("| server-only | push")]
    assert table and f"| {split['push']['mean_ready_to_reply_us']:,.0f} |" in table[0]
    assert any("CLOCK_REALTIME" in line and "push 120 µs of 4" in line for line in lines)
    assert (
        dissection_lines({"modes": {m: {"latency_dissection": {}} for m in ("server", "offload")}})
        == []
    )


# --- a real run ---


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.root
@pytest.mark.e2e
def test_a_real_runs_components_add_up_to_the_measured_latency(tmp_path: Path) -> None:
    """Every PS-served request's PS timestamps fall inside the worker's send -> reply, and
    the components' means add up to the measured mean latency plus the window wait.

    Tolerance: each logged time is rounded to 1 µs (6 decimals) and the worker's times are
    its monotonic clock moved onto the wall clock once, so a segment may be off by 2 µs plus
    the drift between the two clocks, which the worker measures at its end
    (`wall_clock_drift_us`). A mean of components that each carry that error is off by at
    most their count times it."""
    from tests.test_e2e import run_experiment

    proc, summary = run_experiment(tmp_path, "--seed", "11", "--bw", "2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    run_dir = (tmp_path / "runs" / "latest").resolve()
    for mode in ("server", "offload"):
        m = summary["modes"][mode]
        drift = m["latency_dissection_basis"]["max_wall_clock_drift_us"]
        tol_us = 2.0 + drift
        for kind in ("push", "pull"):
            d = m["latency_dissection"][kind]
            assert d["requests"] > 0 and d["negative_segments"] == 0, (mode, kind, d)
            comps = sum(v or 0.0 for v in d["components_us"].values())
            assert comps == pytest.approx(d["mean_ready_to_reply_us"], abs=len(COMPONENTS) * tol_us)
            window = d["components_us"]["window"]
            assert d["mean_ready_to_reply_us"] == pytest.approx(
                d["mean_total_us"] + window, abs=len(COMPONENTS) * tol_us
            )
        # the raw logs: the PS's receive and reply of each request sent once lie within
        # the worker's send and reply (one clock); the matching is the dissection's own
        records = dissection.ps_records(_rows(run_dir / mode / "ps0.csv"))
        checked = 0
        for i in range(summary["workers"]):
            for w in _rows(run_dir / mode / f"w{i}.csv"):
                if w["kind"] not in ("push", "pull") or w["from_switch"] == "1":
                    continue
                if w["retransmits"] != "0":
                    continue
                rec = records[w["kind"].upper(), str(i), w["seq"]]
                assert rec.reply is not None
                assert float(w["sent"]) - tol_us / 1e6 <= rec.arrival <= rec.reply
                assert rec.reply <= float(w["reply"]) + tol_us / 1e6
                checked += 1
        assert checked > 0
        assert m["ps_in_flight"]["max_at_ps"] >= 1
    # offload's switch answered requests: the switch pass came from them
    samples = summary["modes"]["offload"]["latency_dissection_basis"]["switch_pass_samples"]
    assert samples["push"] > 0 and samples["pull"] > 0
    assert (run_dir / "latency_dissection.png").stat().st_size > 0
    assert "## Where a request's time goes" in (run_dir / "report.md").read_text()
