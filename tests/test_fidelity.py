"""The fidelity verdict's rules, on synthetic samples (the runner feeds it /proc and /sys)."""

from __future__ import annotations

import os

import pytest

from experiment import fidelity
from experiment.fidelity import LinkProbe, PhaseMonitor, _Sample, summarize, verdict

HZ = os.sysconf("SC_CLK_TCK")
LINKS = [LinkProbe("h1-s1", "x1", 10.0), LinkProbe("h5-s1", "x5", 10.0, to_ps=True)]


def samples(
    seconds: float,
    machine_busy: float,
    switch_cores: float,
    ps_link_mbps: float,
    worker_link_mbps: float = 1.0,
    n: int = 9,
) -> list[_Sample]:
    """n evenly spaced samples of a phase that kept these rates the whole time."""
    out = []
    for i in range(n):
        t = seconds * i / (n - 1)
        total = int(2 * HZ * t)  # two cores
        out.append(
            _Sample(
                t,
                (int(total * machine_busy), total),
                {"switch s1": int(HZ * t * switch_cores), "ps0": int(HZ * t * 0.2)},
                {
                    "h1-s1": (int(worker_link_mbps * 1e6 / 8 * t), 0, 0),
                    "h5-s1": (0, int(ps_link_mbps * 1e6 / 8 * t), 0),
                },
            )
        )
    return out


@pytest.mark.parametrize(
    ("busy", "switch", "ps_mbps", "bottleneck"),
    [
        (0.97, 0.5, 9.0, "ps_link"),  # a saturated PS link sets the pace, busy cores or not
        (0.97, 0.5, 4.0, "cpu"),  # the cores are saturated and the link is not
        (0.6, 0.95, 6.0, "switch"),  # a switch process at a full core
        (0.6, 0.5, 6.0, "ps_link"),  # the busiest resource is the PS link
        (0.3, 0.2, 2.0, "none"),  # nothing saturated
    ],
)
def test_rules(busy: float, switch: float, ps_mbps: float, bottleneck: str) -> None:
    v = verdict(samples(4.0, busy, switch, ps_mbps), LINKS)
    assert v["bottleneck"] == bottleneck
    assert v["faithful"] is (bottleneck == "ps_link")
    ps_link = next(r for r in v["links"] if r["to_ps"])
    assert ps_link["to_host_mbps"] == pytest.approx(ps_mbps, rel=0.01)
    assert ps_link["utilization_p90"] == pytest.approx(ps_mbps / 10, rel=0.02)
    # what BW=auto's calibration asks of the PS link besides the verdict (saturated)
    assert v["ps_link_utilization"] == ps_link["utilization_p90"]
    assert v["processes"]["switch s1"]["cpu_mean"] == pytest.approx(switch, abs=0.02)
    assert v["machine_cpu_busy_mean"] == pytest.approx(busy, abs=0.01)


def test_a_busier_worker_link_is_not_the_ps_link() -> None:
    v = verdict(samples(4.0, 0.5, 0.3, ps_link_mbps=6.0, worker_link_mbps=9.0), LINKS)
    assert v["bottleneck"] == "none"


def test_unlimited_links_say_so() -> None:
    links = [LinkProbe("h5-s1", "x5", None, to_ps=True)]
    v = verdict(samples(2.0, 0.4, 0.3, ps_link_mbps=50.0), links)
    assert v["bottleneck"] == "none" and "unlimited" in v["why"]


def test_summary_warns_once_per_unfaithful_phase() -> None:
    ok = verdict(samples(2.0, 0.5, 0.4, 9.0), LINKS)
    assert "busy too" not in ok["why"]
    assert "busy too" in verdict(samples(2.0, 0.99, 0.4, 9.0), LINKS)["why"]
    cpu = verdict(samples(2.0, 0.99, 0.4, 3.0), LINKS)
    s = summarize({"server": ok, "offload": cpu})
    assert s["faithful"] is False and s["bottleneck"] == "mixed"
    assert s["warning"].startswith("not network-bound: offload: cpu")
    assert "server" not in s["warning"]
    both = summarize({"server": ok, "offload": ok})
    assert both["faithful"] and both["bottleneck"] == "ps_link" and both["warning"] is None


def test_monitor_reads_this_machine() -> None:
    """The real readers: this process's CPU and loopback's counters, over a short busy loop."""
    mon = PhaseMonitor({"self": os.getpid()}, [LinkProbe("lo", "lo", None)], interval=0.05)
    cpu0, t0 = fidelity.time.process_time(), fidelity.time.monotonic()
    mon.start()
    while fidelity.time.process_time() - cpu0 < 0.3:  # 0.3 s of CPU, however long it takes
        pass
    v = mon.stop()
    cpu_share = (fidelity.time.process_time() - cpu0) / (fidelity.time.monotonic() - t0)
    assert v["seconds"] > 0.2  # about the 0.3 s of CPU (the sampler thread counts too)
    # /proc's accounting agrees with Python's own (to the clock tick and the sampler thread).
    assert v["processes"]["self"]["cpu_mean"] == pytest.approx(cpu_share, abs=0.1)
    assert 0 <= v["processes"]["self"]["runqueue_wait"] <= 1
    assert 0 < v["machine_cpu_busy_mean"] <= 1


def test_a_worker_that_exits_before_the_last_sample_still_counts() -> None:
    # The workers end their iterations, and exit, before the runner takes the phase's last
    # sample: their CPU must still count in what "this run's processes used", or a
    # saturated run reads as a machine busy with someone else's work.
    run = samples(4.0, machine_busy=0.97, switch_cores=0.5, ps_link_mbps=4.0)
    for i, sample in enumerate(run):
        seen = 1 <= i <= len(run) - 3  # starts after the first sample, gone for the last two
        sample.procs["w0"] = int(HZ * sample.t * 0.4) if seen else None
        sample.waits["w0"] = int(1e9 * sample.t * 0.1) if seen else None
    result = verdict(run, LINKS)
    w0 = result["processes"]["w0"]
    span = run[-3].t - run[1].t  # seen for this long, at 0.4 of a core, out of 4 s
    assert w0["cpu_mean"] == pytest.approx(0.4 * span / 4.0, abs=0.01)
    assert w0["runqueue_wait"] == pytest.approx(0.1 * span / 4.0, abs=0.01)
    assert result["bottleneck"] == "cpu"
    ours = 0.5 + 0.2 + w0["cpu_mean"]  # switch, PS and the worker
    assert f"used {ours:.2f} of" in result["why"]
