"""experiment/report.py: what the table says to try when a run was not PS-link-bound."""

from __future__ import annotations

from experiment.report import regime_hint


def summary(bottlenecks: dict[str, str], **config: object) -> dict:
    return {"fidelity": {"bottlenecks": bottlenecks}, "config": config}


def test_a_cpu_bound_run_at_a_fixed_rate_is_pointed_to_the_calibration() -> None:
    hint = regime_hint(
        summary({"server": "ps_link", "offload": "cpu"}, bw=None, link_bandwidth_mbps=[10.0])
    )
    assert hint is not None and hint.startswith("BW=auto (make run's default)")
    assert "a lower BW= than 10" in hint


def test_bmv2s_standard_build_is_named_when_the_switch_set_the_pace() -> None:
    hint = regime_hint(
        summary(
            {"server": "switch", "offload": "switch"},
            bw=None,
            link_bandwidth_mbps=[10.0],
            bmv2_binary="simple_switch_grpc",
        )
    )
    assert hint is not None and hint.startswith("BMV2_BINARY=simple_switch_grpc-perf")
    # the performance build is not sent to itself: the rate is what is left to change
    perf = regime_hint(
        summary(
            {"offload": "switch"},
            bw=None,
            link_bandwidth_mbps=[10.0],
            bmv2_binary="simple_switch_grpc-perf",
        )
    )
    assert perf is not None and "BMV2_BINARY" not in perf and "BW=auto" in perf


def test_a_calibrated_run_that_missed_says_the_machine_was_busier() -> None:
    hint = regime_hint(
        summary(
            {"server": "cpu"}, bw="auto", link_bandwidth_mbps=[5.0], bw_auto={"chosen_mbps": 5.0}
        )
    )
    assert hint is not None and "network-bound at 5 Mbit/s" in hint and "than 5" in hint
    # no rate was network-bound: the lowest was used, and only a quieter machine helps
    lowest = regime_hint(
        summary(
            {"server": "cpu"}, bw="auto", link_bandwidth_mbps=[1.0], bw_auto={"chosen_mbps": 1.0}
        )
    )
    assert lowest is not None and "quieter machine" in lowest
