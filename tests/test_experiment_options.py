"""The experiment's option parsing and its JSON output, in process (no root, no network)."""

from __future__ import annotations

import json

import pytest

from experiment.__main__ import build_parser
from hosts.stats import dumps_strict


@pytest.mark.parametrize("skew", ["nan", "inf", "-inf", "NaN", "x"])
def test_non_finite_skew_is_refused(skew: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["run", "--skew", skew])
    assert e.value.code == 2
    assert "--skew" in capsys.readouterr().err


def test_finite_skew_and_ps_list_parse() -> None:
    args = build_parser().parse_args(["run", "--skew", "1.3", "--ps", "h4,h5", "--topo", "star:8"])
    assert args.skew == 1.3 and args.ps == ["h4", "h5"] and str(args.topo) == "star:8"


def test_summary_json_is_strict() -> None:
    text = dumps_strict({"p99": float("nan"), "rows": [1.5, float("inf")], "n": 3})
    assert json.loads(text) == {"p99": None, "rows": [1.5, None], "n": 3}
    assert "NaN" not in text and "Infinity" not in text
