"""hotagg-ctl: the command line of the controller (`python -m controller` does the same).

    hotagg-ctl [--grpc-addr HOST:PORT] [--device-id N] [--election-id HI,LO] [--p4info FILE]
               [--json] [--timeout S] [--wait S] NOUN VERB [options]

The global options (the first line) may also follow the noun or the verb:
`hotagg-ctl hotkeys list --json` is `hotagg-ctl --json hotkeys list`.

Exit codes (one line on stderr, never a traceback, for every expected failure):
    0  success
    1  any other P4Runtime/controller error
    2  usage: unknown command or option, missing argument (argparse)
    3  switch unreachable (nothing listens, stream broke, RPC timed out)
    4  no room: a table is full (RESOURCE_EXHAUSTED) or the controller's budget (a job's
       slots, the switch's slots, job indices) is used up
    5  bad input: malformed key or number, rate outside [0, 1], bad file, entry refused
       as INVALID_ARGUMENT by the switch
    6  unknown job
    7  not primary: another controller holds a higher election id
    8  pipeline: the switch has none, or one that does not fit --p4info
    9  conflict: the entry/job exists already, or the key/entry to remove does not exist
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from contract.clihelp import HelpParser, worth_showing
from contract.constants import KEY_MAX, MAX_WORKERS
from contract.p4files import P4INFO_PATH
from controller import commands
from controller.errors import (
    AlreadyExists,
    BadEntry,
    BadInput,
    BudgetExceeded,
    ControllerError,
    EntryExists,
    EntryNotFound,
    NotFound,
    NotPrimary,
    PipelineError,
    SwitchUnreachable,
    TableFull,
    UnknownJob,
)
from controller.leaves import AddressTable, ChainNext, ServiceAddress
from controller.online import estimators, policy
from controller.tenancy import PORT_MAX

DEFAULT_P4INFO = P4INFO_PATH

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
EXIT_CODES: tuple[tuple[tuple[type[Exception], ...], int], ...] = (
    ((SwitchUnreachable,), 3),
    ((TableFull, BudgetExceeded), 4),
    ((BadInput, BadEntry), 5),
    ((UnknownJob,), 6),
    ((NotPrimary,), 7),
    ((PipelineError,), 8),
    ((EntryExists, EntryNotFound, AlreadyExists, NotFound), 9),
)


def exit_code(err: ControllerError) -> int:
    for classes, code in EXIT_CODES:
        if isinstance(err, classes):
            return code
    return EXIT_ERROR


# --- type functions: they raise BadInput (exit 5), which argparse lets through ---


def _int_in(what: str, text: str, lo: int, hi: int) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise BadInput(f"{what}: {text!r} is not an integer") from None
    if not lo <= value <= hi:
        raise BadInput(f"{what}: {value} is not in {lo}..{hi}")
    return value


def key_list(text: str) -> list[int]:
    """Comma/space separated uint64 keys (decimal or 0x hex); '-' reads them from stdin."""
    if text == "-":
        text = sys.stdin.read()
    parts = text.replace(",", " ").split()
    if not parts:
        raise BadInput("--keys: no keys given")
    return [_int_in("--keys", p, 0, KEY_MAX) for p in parts]


def job_id(text: str) -> int:
    return _int_in("--job-id", text, 0, 0xFFFF)


def worker_id(text: str) -> int:
    return _int_in("--worker-id", text, 0, MAX_WORKERS - 1)


def port(text: str) -> int:
    return _int_in("--port", text, 0, PORT_MAX)


def host_list(text: str) -> list[str]:
    hosts = [h for h in text.split(",") if h]
    if not hosts:
        raise BadInput("--ps: no host given")
    return hosts


def device_id(text: str) -> int:
    return _int_in("--device-id", text, 0, (1 << 64) - 1)


def slot_base(text: str) -> int:
    return _int_in("--slot-base", text, 0, (1 << 32) - 1)


def positive(text: str) -> int:
    return _int_in("count", text, 1, 1 << 32)


def nonnegative(text: str) -> int:
    return _int_in("count", text, 0, 1 << 62)


def fraction(text: str) -> float:
    """A number in [0, 1] (a drop probability or a coverage target)."""
    try:
        value = float(text)
    except ValueError:
        raise BadInput(f"{text!r} is not a number") from None
    if math.isnan(value) or not 0.0 <= value <= 1.0:
        raise BadInput(f"{text} is not in [0, 1]")
    return value


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise BadInput(f"{text!r} is not a number") from None
    if math.isnan(value) or math.isinf(value):
        raise BadInput(f"{text!r} is not a finite number")
    return value


def nonnegative_float(text: str) -> float:
    value = _number(text)
    if value < 0:
        raise BadInput(f"{text} is negative")
    return value


def change_threshold(text: str) -> float:
    value = _number(text)
    if value <= 0:
        raise BadInput(f"--change-threshold {text}: must be > 0 nats")
    return value


def seconds(text: str) -> float:
    value = _number(text)
    if value <= 0:
        raise BadInput(f"--interval {text}: must be > 0 seconds")
    return value


def decay(text: str) -> float:
    value = _number(text)
    if not 0.0 <= value < 1.0:
        raise BadInput(f"--decay {text}: must be in [0, 1)")
    return value


def election_id(text: str) -> tuple[int, int]:
    """'LO' or 'HI,LO' as p4runtime-shell takes it; 128 bits, never 0."""
    parts = text.split(",")
    if len(parts) > 2:
        raise BadInput(f"--election-id: {text!r} is not HI,LO")
    nums = [_int_in("--election-id", p, 0, (1 << 64) - 1) for p in parts]
    hi, lo = nums if len(nums) == 2 else (0, nums[0])
    if hi == lo == 0:
        raise BadInput("--election-id: 0 is not a valid election id")
    return hi, lo


# --- parser ---


# The options of the connection and the output: accepted before the noun, after it and after
# the verb (`hotagg-ctl hotkeys list --json`). Each: flags, argparse keywords, the default.
GLOBAL_OPTIONS: tuple[tuple[tuple[str, ...], dict[str, Any], Any], ...] = (
    (
        ("--grpc-addr",),
        {"metavar": "HOST:PORT", "help": "P4Runtime server of the switch"},
        "127.0.0.1:50051",
    ),
    (("--device-id",), {"type": device_id, "metavar": "N", "help": "P4Runtime device id"}, 0),
    (
        ("--election-id",),
        {
            "type": election_id,
            "metavar": "HI,LO",
            "help": "election id, HI,LO or LO; the highest connected one is primary",
        },
        (0, 1),
    ),
    (
        ("--p4info",),
        {
            "type": Path,
            "metavar": "FILE",
            "help": "text P4Info (default: the repository's p4src/hotagg.p4info.txtpb, "
            "else the switch's own)",
        },
        None,
    ),
    (("--json",), {"action": "store_true", "help": "machine-readable output"}, False),
    (("--timeout",), {"type": float, "metavar": "S", "help": "seconds per RPC"}, 10.0),
    (
        ("--wait",),
        {
            "type": float,
            "metavar": "S",
            "help": "seconds to wait for the switch to come up (default: 0, fail at once)",
        },
        0.0,
    ),
)


def _shown(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, tuple) else str(value)


def add_global_options(parser: argparse.ArgumentParser, after_command: bool) -> None:
    """The global options on `parser`. After a noun or verb they default to SUPPRESS, so
    that one not given there leaves the value parsed before the noun (or its default) alone.
    The help names each default itself: after the command argparse knows only SUPPRESS."""
    title = "global options (also before the command)" if after_command else "global options"
    group = parser.add_argument_group(title)
    for flags, kwargs, default in GLOBAL_OPTIONS:
        text = kwargs["help"]
        if "default" not in text and worth_showing(default):
            text += f" (default: {_shown(default)})"
        value = argparse.SUPPRESS if after_command else default
        group.add_argument(*flags, **{**kwargs, "default": value, "help": text})


def build_parser() -> argparse.ArgumentParser:
    p = HelpParser(
        prog="hotagg-ctl",
        description="P4Runtime controller of a hotagg switch (embedded target or BMv2). "
        "The global options go before or after the command: hotagg-ctl hotkeys list --json.",
        epilog="Exit codes: 0 ok, 1 error, 2 usage, 3 unreachable, 4 full, 5 bad input, "
        "6 unknown job, 7 not primary, 8 pipeline, 9 exists/not found.",
    )
    add_global_options(p, after_command=False)
    nouns = p.add_subparsers(dest="noun", required=True, metavar="NOUN")
    for noun, help_, add_verbs in NOUNS:
        verbs = nouns.add_parser(noun, help=help_).add_subparsers(
            dest="verb", required=True, metavar="VERB"
        )
        add_verbs(verbs)
    for command in subcommands(p):
        add_global_options(command, after_command=True)
    return p


# One function per noun: it adds the noun's verbs (argparse's subparsers action) with their
# options and the controller.commands function each runs.


def _add_pipeline_verbs(verbs: argparse._SubParsersAction) -> None:
    push = verbs.add_parser("push", help="SetForwardingPipelineConfig with --p4info")
    push.add_argument("--bmv2-json", type=Path, help="BMv2 JSON to send as p4_device_config")
    push.set_defaults(func=commands.pipeline_push)
    verbs.add_parser("show", help="the switch's P4Info, checked against --p4info").set_defaults(
        func=commands.pipeline_show
    )


def _add_forwarding_verbs(verbs: argparse._SubParsersAction) -> None:
    inst = verbs.add_parser("install", help="routes of one switch from a topology.json")
    inst.add_argument(
        "--topo", type=Path, required=True, metavar="FILE", help="topology.json, or star:N ..."
    )
    inst.add_argument("--switch", required=True, help="switch name in the topology, e.g. s1")
    inst.add_argument("--replace", action="store_true", help="also delete other routes")
    inst.add_argument("--dry-run", action="store_true", help="print the routes only")
    inst.set_defaults(func=commands.forwarding_install)
    verbs.add_parser("list", help="installed routes").set_defaults(func=commands.forwarding_list)


def _add_job_verbs(verbs: argparse._SubParsersAction) -> None:
    add = verbs.add_parser("add", help="add a job with its own slot range")
    add.add_argument("--job-id", type=job_id, required=True, metavar="ID")
    add.add_argument("--slots", type=positive, required=True, metavar="N", help="slot count")
    add.add_argument(
        "--slot-base", type=slot_base, metavar="N", help="first slot (default: first fit)"
    )
    add.set_defaults(func=commands.job_add)
    rm = verbs.add_parser("remove", help="remove a job and its hot keys")
    rm.add_argument("--job-id", type=job_id, required=True, metavar="ID")
    rm.set_defaults(func=commands.job_remove)
    verbs.add_parser("list", help="configured jobs").set_defaults(func=commands.job_list)


def _add_tenancy_verbs(verbs: argparse._SubParsersAction) -> None:
    ti = verbs.add_parser("install", help="admit a job's workers and PS from a topology.json")
    ti.add_argument(
        "--topo", type=Path, required=True, metavar="FILE", help="topology.json, or star:N ..."
    )
    ti.add_argument("--switch", required=True, help="switch name in the topology, e.g. s1")
    ti.add_argument("--job-id", type=job_id, required=True, metavar="ID")
    ti.add_argument(
        "--workers", type=positive, metavar="N", help="the first N worker hosts (default: all)"
    )
    ti.add_argument("--ps", type=host_list, metavar="H[,H]", help="PS host(s), as make run's PS=")
    ti.add_argument("--replace", action="store_true", help="also revoke the job's others")
    ti.add_argument("--dry-run", action="store_true", help="print the admissions only")
    ti.set_defaults(func=commands.tenancy_install)
    for verb, help_, func in (
        ("admit", "admit one (port, address) for a worker or the PS", commands.tenancy_admit),
        ("revoke", "revoke one admission", commands.tenancy_revoke),
    ):
        one = verbs.add_parser(verb, help=help_)
        one.add_argument("--job-id", type=job_id, required=True, metavar="ID")
        who = one.add_mutually_exclusive_group(required=True)
        who.add_argument("--worker-id", type=worker_id, metavar="N")
        who.add_argument("--ps", action="store_true", help="the job's PS (COLLECT, WRITEBACK)")
        one.add_argument("--port", type=port, required=True, help="switch ingress port")
        one.add_argument("--addr", required=True, metavar="IPV4", help="source address")
        one.set_defaults(func=func)
    tl = verbs.add_parser("list", help="admissions (of one job)")
    tl.add_argument("--job-id", type=job_id, metavar="ID")
    tl.set_defaults(func=commands.tenancy_list)
    tc = verbs.add_parser("clear", help="revoke every admission (of one job)")
    tc.add_argument("--job-id", type=job_id, metavar="ID")
    tc.set_defaults(func=commands.tenancy_clear)


def _add_hotkeys_verbs(verbs: argparse._SubParsersAction) -> None:
    _add_hotkeys_install(verbs)
    for verb, help_ in (("list", "hot keys with offsets and hits"), ("show", "same as list")):
        ls = verbs.add_parser(verb, help=help_)
        ls.add_argument("--job-id", type=job_id, metavar="ID")
        ls.add_argument("--keys", type=key_list, help="only these keys")
        ls.set_defaults(func=commands.hotkeys_list)
    _add_hotkeys_auto(verbs)
    ev = verbs.add_parser("evict", help="remove keys from all instances")
    ev.add_argument("--job-id", type=job_id, required=True, metavar="ID")
    ev.add_argument("--keys", type=key_list, required=True)
    ev.set_defaults(func=commands.hotkeys_evict)
    cl = verbs.add_parser("clear", help="remove every hot key (of one job)")
    cl.add_argument("--job-id", type=job_id, metavar="ID")
    cl.set_defaults(func=commands.hotkeys_clear)


def _add_hotkeys_install(verbs: argparse._SubParsersAction) -> None:
    hi = verbs.add_parser("install", help="make keys hot (from --keys or from --stats)")
    hi.add_argument("--job-id", type=job_id, required=True, metavar="ID")
    src = hi.add_mutually_exclusive_group(required=True)
    src.add_argument("--keys", type=key_list, help="1,2,0x3 ... or '-' for stdin")
    src.add_argument("--stats", type=Path, metavar="FILE", help="statistics: key,updates lines")
    hi.add_argument("--budget", type=positive, metavar="N", help="at most N keys (default: slots)")
    hi.add_argument("--coverage", type=fraction, metavar="F", help="fewest keys covering F")
    hi.add_argument(
        "--min-updates",
        type=nonnegative,
        default=0,
        metavar="N",
        help="skip keys with fewer than N updates in the stats (a slot a key updated less than "
        "about once per iteration costs more collect traffic than it saves)",
    )
    hi.add_argument(
        "--with-hits", action="store_true", help="add the switch's hit counts to the statistics"
    )
    hi.add_argument(
        "--hits-weight",
        type=float,
        default=1.0,
        metavar="W",
        help="with --with-hits: a hit counts as W updates",
    )
    hi.add_argument("--replace", action="store_true", help="evict the job's other hot keys")
    hi.add_argument("--dry-run", action="store_true", help="choose and print, write nothing")
    hi.set_defaults(func=commands.hotkeys_install)


def _add_hotkeys_auto(verbs: argparse._SubParsersAction) -> None:
    au = verbs.add_parser(
        "auto",
        help="follow the skew: re-select the hot set every interval (controller/online/)",
        description="Every --interval seconds: read the hot keys' hit counters (and the PS's "
        "frequency files, --freq, and/or the switch's cold-key sketch, --sketch), estimate "
        "each key's update rate (the mean since it last changed, or with --decay), and "
        "change at most --max-changes keys, a candidate replacing the weakest member only "
        "if its rate is higher by the --hysteresis margin and by --confidence standard "
        "errors. "
        "Prints one line per step. The policy's defaults (--change-threshold to --min-rate) "
        "are those of make run HOTSET=dynamic's loop (experiment/hotset.py).",
    )
    au.add_argument("--job-id", type=job_id, required=True, metavar="ID")
    au.add_argument("--budget", type=nonnegative, metavar="B", help="hot keys (default: slots)")
    au.add_argument(
        "--interval", type=seconds, default=1.0, metavar="S", help="seconds between steps"
    )
    _add_auto_estimator_options(au)
    _add_auto_policy_options(au)
    _add_auto_measurement_options(au)
    au.add_argument("--steps", type=positive, metavar="N", help="stop after N steps")
    au.add_argument("--log", type=Path, metavar="FILE", help="also append each step's line here")
    au.set_defaults(func=commands.hotkeys_auto)


def _add_auto_estimator_options(au: argparse.ArgumentParser) -> None:
    """hotkeys auto: how a key's rate is estimated (controller/online/estimators.py)."""
    au.add_argument(
        "--change-threshold",
        type=change_threshold,
        default=estimators.CHANGE_THRESHOLD,
        metavar="T",
        help="a key's rate is the mean since it last changed; a change is taken when the "
        "counts' log-likelihood ratio exceeds T nats",
    )
    au.add_argument(
        "--decay",
        type=decay,
        metavar="D",
        help="estimate rates with exponential decay instead, D the weight of the past rate "
        f"per step, in [0, 1) (default: off; {estimators.DECAY} goes with --hysteresis 1)",
    )


def _add_auto_policy_options(au: argparse.ArgumentParser) -> None:
    """hotkeys auto: which keys a step changes (controller/online/policy.py)."""
    au.add_argument(
        "--hysteresis",
        type=nonnegative_float,
        default=policy.MARGIN,
        metavar="H",
        help="a candidate must beat the weakest member's rate by this fraction",
    )
    au.add_argument(
        "--confidence",
        type=nonnegative_float,
        default=policy.CONFIDENCE,
        metavar="Z",
        help="... and by this many standard errors of the two rates, so that a key seen "
        "once must beat its noise (0: off). The counts read here (hits, --freq's cold "
        "counts, --sketch) are taken as Poisson; make run HOTSET=dynamic's loop reads the "
        "PS's files with the hot keys' presence, knows the workers from them and takes a "
        "cold key's count as binomial",
    )
    au.add_argument(
        "--max-changes",
        type=nonnegative,
        default=policy.MAX_CHANGES,
        metavar="M",
        help="keys entering per step",
    )
    au.add_argument(
        "--min-rate",
        type=nonnegative_float,
        default=policy.MIN_RATE,
        metavar="R",
        help="updates per iteration (per step without --freq) a key needs to enter",
    )


def _add_auto_measurement_options(au: argparse.ArgumentParser) -> None:
    """hotkeys auto: where the keys' counts come from besides the hot keys' hit counters."""
    au.add_argument(
        "--freq",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="a PS shard's frequency file, current while it runs (hosts.ps --freq F.live, "
        "or --freq-every with .npz or CSV); repeat per shard. Without it only hot keys are "
        "measured",
    )
    au.add_argument(
        "--sketch",
        type=positive,
        metavar="T",
        help="also read the switch's cold-key sketch (docs/design.md section 6): a cold key "
        "is reported once it has T updates in a step, and counted from the sketch from then "
        "on. With it, no --freq is needed to find new keys: the switch measures them",
    )
    au.add_argument(
        "--hits-weight",
        type=nonnegative_float,
        default=0.5,
        metavar="W",
        help="updates per hot-key table hit (a hot key's pull and push both hit: 0.5)",
    )


def _add_counters_verbs(verbs: argparse._SubParsersAction) -> None:
    cs = verbs.add_parser("show", help="hits per hot key and per table instance")
    cs.add_argument("--job-id", type=job_id, metavar="ID")
    cs.add_argument("--top", type=positive, default=20, help="keys to show (default 20)")
    cs.set_defaults(func=commands.counters_show)


def _add_stats_verbs(verbs: argparse._SubParsersAction) -> None:
    ss = verbs.add_parser("show", help="cells by name")
    ss.add_argument("--all", action="store_true", help="also cells that are 0")
    ss.set_defaults(func=commands.stats_show)
    verbs.add_parser("clear", help="zero every cell").set_defaults(func=commands.stats_clear)


def _add_loss_verbs(verbs: argparse._SubParsersAction) -> None:
    ls_ = verbs.add_parser("set", help="drop hotagg packets with this probability")
    ls_.add_argument("probability", type=fraction)
    ls_.set_defaults(func=commands.loss_set)
    verbs.add_parser("show", help="the current drop probability").set_defaults(
        func=commands.loss_show
    )


def _address_verbs(
    kind: type[AddressTable], what: str
) -> Callable[[argparse._SubParsersAction], None]:
    """The verbs of a keyless address table of aggregation at every leaf (docs/design.md
    section 7): set IPV4, show, clear."""

    def add(verbs: argparse._SubParsersAction) -> None:
        set_ = verbs.add_parser("set", help=what)
        set_.add_argument("address", metavar="IPV4")
        set_.set_defaults(func=functools.partial(commands.address_set, kind))
        verbs.add_parser("show", help="the address set (or none)").set_defaults(
            func=functools.partial(commands.address_show, kind)
        )
        verbs.add_parser("clear", help="no address (0)").set_defaults(
            func=functools.partial(commands.address_clear, kind)
        )

    return add


# The nouns in the order --help lists them: name, help, the function that adds its verbs.
NOUNS: tuple[tuple[str, str, Callable[[argparse._SubParsersAction], None]], ...] = (
    ("pipeline", "forwarding pipeline config", _add_pipeline_verbs),
    ("forwarding", "ipv4_lpm routes", _add_forwarding_verbs),
    ("job", "jobs table", _add_job_verbs),
    ("tenancy", "which (port, address) may act for a job's workers and PS", _add_tenancy_verbs),
    ("hotkeys", "hot-key tables (all 8 instances)", _add_hotkeys_verbs),
    ("counters", "direct counters of the hot-key tables", _add_counters_verbs),
    ("stats", "the switch's stats counter", _add_stats_verbs),
    ("loss", "the data-plane drop simulator", _add_loss_verbs),
    (
        "service-address",
        "the address the PS sends this switch's COLLECT, WRITEBACK and FLUSH to",
        _address_verbs(
            ServiceAddress,
            "answer PS ops only when addressed here, absorb partial PUSHes (aggregating "
            "switches only)",
        ),
    ),
    (
        "chain-next",
        "where a chained WRITEBACK goes after this switch cached it",
        _address_verbs(ChainNext, "the next leaf's service address"),
    ),
)


def subcommands(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """Every noun's and verb's parser under `parser`."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                yield command
                yield from subcommands(command)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        return commands.run(args, DEFAULT_P4INFO)
    except SystemExit as e:  # argparse: --help (0) or a usage error (2)
        return int(e.code) if isinstance(e.code, int) else EXIT_USAGE
    except ControllerError as e:
        print(f"hotagg-ctl: error: {e}", file=sys.stderr)
        return exit_code(e)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
