"""The `--help` of every hotagg command line: each option shows its default.

argparse's ArgumentDefaultsHelpFormatter appends "(default: X)" to every option, also where
the help names the default in words already, and prints "(default: None)" for an option
that is simply off. This one appends it only where it tells something. Standard library
only, so the hosts' and the switch's command lines can use it too.
"""

from __future__ import annotations

import argparse


def worth_showing(default: object) -> bool:
    """Whether "(default: X)" tells the reader anything: not for an option that is simply
    off when not given (None, a flag's False, an empty string or list)."""
    if default is None or default is False or default is argparse.SUPPRESS:
        return False
    return not (isinstance(default, (str, list, tuple)) and not default)


def shows_default(action: argparse.Action) -> bool:
    """Whether `action`'s help gets "(default: X)": an option (not a positional) whose
    default is worth showing."""
    if not action.option_strings or isinstance(action, argparse._HelpAction):
        return False
    return worth_showing(action.default)


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Every option's help ends in its default, unless the help says "default" already."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or not shows_default(action):
            return text
        return f"{text} (default: %(default)s)".lstrip()


class HelpParser(argparse.ArgumentParser):
    """An ArgumentParser with DefaultsHelpFormatter; its subcommands' parsers are of the same
    class (argparse makes them with type(parent)), so they show defaults too."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
