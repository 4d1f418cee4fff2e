"""Every hotagg command line's --help names each option's default (contract/clihelp.py)."""

from __future__ import annotations

import argparse
import importlib
import re

import pytest

from contract.clihelp import DefaultsHelpFormatter, shows_default
from controller.cli import subcommands

# The command lines a user meets, by the module whose build_parser() makes each: hotagg-ctl,
# python -m experiment (make run/sweep/stop), hotagg-softswitch, the host agents and tools.
PARSERS = {
    "hotagg-ctl": "controller.cli",
    "experiment": "experiment.__main__",
    "hotagg-softswitch": "softswitch.__main__",
    "hosts.ps": "hosts.ps",
    "hosts.worker": "hosts.worker",
    "hosts": "hosts.__main__",
    "topologies.cluster": "topologies.cluster",
}


@pytest.mark.parametrize("name", PARSERS)
def test_every_option_with_a_default_shows_it(name: str) -> None:
    root = importlib.import_module(PARSERS[name]).build_parser()
    for parser in [root, *subcommands(root)]:
        assert parser.formatter_class is DefaultsHelpFormatter, parser.prog
        text = re.sub(r"\s+", "", parser.format_help())  # argparse wraps lines, and words
        for action in parser._actions:
            if shows_default(action):
                # help text is what argparse prints; without it the default stays hidden
                assert action.help, f"{parser.prog} {action.option_strings[0]} has no help"
                shown = parser._get_formatter()._get_help_string(action) % vars(action)
                assert "default" in shown, (parser.prog, action.option_strings)
                assert re.sub(r"\s+", "", shown) in text, (parser.prog, action.option_strings)


def test_a_default_is_not_named_twice() -> None:
    """An option whose help states its default in words gets no second "(default: X)", and
    one that is simply off (None, a flag) gets none."""
    parser = argparse.ArgumentParser(formatter_class=DefaultsHelpFormatter)
    parser.add_argument("--wait", type=float, default=0.0, help="seconds (default: 0, fail)")
    parser.add_argument("--off", default=None, help="off unless given")
    parser.add_argument("--flag", action="store_true", help="a flag")
    parser.add_argument("--n", type=int, default=0, help="a count")
    text = " ".join(parser.format_help().split())
    assert "(default: 0, fail)" in text and text.count("default") == 2
    assert "a count (default: 0)" in text
    assert "off unless given" in text and "a flag" in text
