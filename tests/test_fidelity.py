"""The fidelity verdict's rules, on synthetic samples (the runner feeds it /proc and /sys)."""

from __future__ import annotations

import os

import pytest

from experiment import fidelity
from experiment.fidelity import (
    LinkProbe,
    PhaseMonitor,
    _Sample,
    is_faithful,
    summarize,
    verdict,
)

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


def test_a_busier_worker_link_is_named_not_taken_for_the_ps_link() -> None:
    # h1 sends at 9 Mbit/s: the switch-side interface (at s1) receives it, direction h1-s1.
    v = verdict(samples(4.0, 0.5, 0.3, ps_link_mbps=6.0, worker_link_mbps=9.0), LINKS)
    assert v["bottleneck"] == "link:h1-s1" and v["faithful"] is False
    assert v["busiest_link"] == "h1-s1" and v["busiest_link_utilization"] == pytest.approx(0.9)
    assert "the link h1-s1 ran at 90% of its rate, the PS link at 60%" in v["why"]
    # busier than the PS link but not saturated: nothing set the pace, and the why names it
    v = verdict(samples(4.0, 0.5, 0.3, ps_link_mbps=4.0, worker_link_mbps=7.0), LINKS)
    assert v["bottleneck"] == "none" and "busiest link h1-s1 70%" in v["why"]


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


# -- links other than the PS's ------------------------------------------------------------

# leafspine:2:2 as the testbed probes it: host links read at their switch, the leaf-spine
# links at the leaf (node1 of "s1-s3").
SPINE_LINKS = [
    LinkProbe("h1-s1", "a1", 10.0, at="s1"),
    LinkProbe("h2-s1", "a2", 10.0, to_ps=True, at="s1"),
    LinkProbe("s1-s3", "a3", 10.0, at="s1"),
]


def spine_samples(
    spine_in_mbps: float, ps_in_mbps: float, busy: float = 0.5, seconds: float = 4.0, n: int = 9
) -> list[_Sample]:
    """A phase in which the spine sends into s1 and s1 into the PS at these rates."""
    out = []
    for i in range(n):
        t = seconds * i / (n - 1)
        total = int(2 * HZ * t)

        def sent(mbps: float, t: float = t) -> int:
            return int(mbps * 1e6 / 8 * t)

        out.append(
            _Sample(
                t,
                (int(total * busy), total),
                {"switch s1": int(HZ * t * 0.3)},
                {
                    "h1-s1": (sent(1.0), sent(0.5), 0),
                    "h2-s1": (sent(0.5), sent(ps_in_mbps), 0),  # (from the PS, to the PS)
                    "s1-s3": (sent(spine_in_mbps), sent(2.0), 0),  # (s3 -> s1, s1 -> s3)
                },
            )
        )
    return out


def test_a_saturated_spine_link_is_named_with_its_direction() -> None:
    v = verdict(spine_samples(spine_in_mbps=9.5, ps_in_mbps=7.8), SPINE_LINKS)
    assert v["bottleneck"] == "link:s3-s1"  # the spine into the PS's leaf, as it ran
    assert v["faithful"] is False  # until the model says it is the bottleneck it expects
    spine = next(r for r in v["links"] if r["link"] == "s1-s3")
    into, out = spine["directions"]["s3-s1"], spine["directions"]["s1-s3"]
    assert into["bytes"] == int(9.5e6 / 8 * 4.0) and out["bytes"] == int(2e6 / 8 * 4.0)
    assert into["utilization_p90"] == pytest.approx(0.95, abs=0.01)
    assert out["utilization_p90"] == pytest.approx(0.2, abs=0.01)
    ps = next(r for r in v["links"] if r["to_ps"])
    assert ps["directions"]["s1-h2"]["utilization_p90"] == pytest.approx(0.78, abs=0.01)
    # a saturated PS link that is the busiest is still ps_link
    assert verdict(spine_samples(7.0, 9.0), SPINE_LINKS)["bottleneck"] == "ps_link"
    # and a saturated link sets the pace over busy cores, as a PS link does
    busy = verdict(spine_samples(9.5, 7.8, busy=0.97), SPINE_LINKS)
    assert busy["bottleneck"] == "link:s3-s1" and "busy too" in busy["why"]


def test_a_link_bound_run_is_faithful_where_the_model_names_that_link() -> None:
    spine = verdict(spine_samples(spine_in_mbps=9.5, ps_in_mbps=7.8), SPINE_LINKS)
    ps = verdict(spine_samples(spine_in_mbps=7.0, ps_in_mbps=9.0), SPINE_LINKS)
    agreed = summarize({"server": ps, "offload": spine}, {"server": "s1-h2", "offload": "s3-s1"})
    assert agreed["faithful"] and agreed["warning"] is None
    assert agreed["bottlenecks"] == {"server": "ps_link", "offload": "link:s3-s1"}
    assert agreed["bottleneck"] == "mixed" and agreed["details"]["offload"]["faithful"]
    # the model expected the PS's link: the run measured something else
    other = summarize({"offload": spine}, {"offload": "s1-h2"})
    assert not other["faithful"] and not other["details"]["offload"]["faithful"]
    assert other["warning"].startswith("bound by a link the model does not name: offload: ")
    assert "the model's bottleneck: s1-h2" in other["warning"]
    # without a model (no bound) a link regime is not judged faithful
    assert not summarize({"offload": spine})["faithful"]


@pytest.mark.parametrize(
    ("bottleneck", "model", "faithful"),
    [
        ("ps_link", None, True),
        ("ps_link", "s3-s1", True),  # a PS link is faithful whatever the model expects
        ("link:s3-s1", "s3-s1", True),
        ("link:s3-s1", "s1-s3", False),  # the other direction of the same link
        ("link:s3-s1", None, False),
        ("cpu", "s3-s1", False),
        ("none", None, False),
    ],
)
def test_is_faithful(bottleneck: str, model: str | None, faithful: bool) -> None:
    assert is_faithful(bottleneck, model) is faithful


def test_a_probe_names_the_directions_it_reads() -> None:
    assert LinkProbe("h5-s1", "x", 10.0).directions() == ("s1-h5", "h5-s1")  # at node2
    assert LinkProbe("s1-s5", "x", 10.0, at="s1").directions() == ("s1-s5", "s5-s1")
    assert LinkProbe("lo", "lo", None).directions() is None


def test_each_job_is_judged_on_its_own_hosts_links() -> None:
    # two jobs on s1: job 1's PS h5 on a saturated link, job 2's PS h6 at a third of its rate
    links = [
        LinkProbe("h5-s1", "x5", 10.0, to_ps=True),
        LinkProbe("h6-s1", "x6", 10.0, to_ps=True),
    ]
    data = samples(4.0, 0.5, 0.95, ps_link_mbps=9.5)
    for s in data:
        s.links["h6-s1"] = (0, int(3.0 * 1e6 / 8 * s.t), 0)
        s.links["s1-s2"] = (0, 0, 0)
    mon = PhaseMonitor({}, links)
    mon._samples = data
    assert verdict(data, links)["bottleneck"] == "ps_link"  # the run's busiest link
    assert mon.verdict_for({"h1", "h5"})["bottleneck"] == "ps_link"
    # job 2's own PS link is far from saturated: its switch, busy at 95% of a core, set it
    job2 = mon.verdict_for({"h2", "h6"})
    assert job2["bottleneck"] == "switch" and not job2["faithful"]
    assert [r["link"] for r in job2["links"]] == ["h6-s1"]
    # a link between switches may carry any job's traffic: every job's verdict keeps it
    spine = LinkProbe("s1-s2", "x12", 10.0, at="s1", between_switches=True)
    mon.links = [*links, spine]
    assert "s1-s2" in [r["link"] for r in mon.verdict_for({"h6"})["links"]]
