"""One experiment over several machines: the servers list, Mininet Cluster Edition, and the
preflight that says, server by server, what is missing before anything is built.

Mininet Cluster Edition (`mininet.examples.cluster`) places nodes on servers reached by ssh.
The PyPI mininet in the venv ships a cluster.py older than upstream's Python 3 fix
(mininet#1035), so `load_cluster()` loads the one Debian's `mininet` package installs (tag
2.3.0) by path, on top of the venv's mininet core.

A servers list is `[user@]host,...`; the first server is the coordinator (this machine,
`localhost`, added when not named). Every other server must let the coordinator ssh in as
`user` (root by default) by key, have sudo, mnexec and this checkout with its venv at the
same path, and the kernel's vxlan and tc's u32 and mirred (the links between servers,
topologies/remote_links.py). All ssh
connections to a server share one multiplexed login (a ControlMaster at SSH_CONTROL_DIR).

CLI: `python -m topologies.cluster check [--target bmv2] SERVER...` (`make cluster-check`).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from contract.clihelp import DefaultsHelpFormatter
from topologies.switches import REPO_ROOT
from topologies.targets import BMV2_BINARY_ENV, DEFAULT_BMV2_BINARY

DEBIAN_CLUSTER = Path("/usr/lib/python3/dist-packages/mininet/examples/cluster.py")
CLUSTER_MODULE = "mininet.examples.cluster"
LOCALHOST = "localhost"
DEFAULT_USER = "root"
# Every ssh to a server goes through one master connection per server: the first login pays
# the ~0.3 s handshake, later commands and node shells ride on it (ControlPersist: seconds
# the master stays after its last client). %C keeps the socket path short (a hash).
SSH_CONTROL_DIR = Path("/tmp/hotagg-ssh")
CONTROL_PERSIST = 60
CONNECT_TIMEOUT = 5  # seconds for an ssh login
CHECK_TIMEOUT = 30.0  # seconds for one check's command (the import check starts Python)
# What the venv python must import on every server: the packages agents and switches run.
HOTAGG_MODULES = ("contract", "controller", "experiment.agents", "softswitch", "topologies")
SERVERS_FORMAT = (
    "comma-separated [user@]host (user: root by default); the first is the coordinator, "
    "this machine (localhost, added when not named)"
)
_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?")
_USER = re.compile(r"[a-z_][a-z0-9_-]*")


class ClusterError(RuntimeError):
    """A servers list, the cluster edition or a server's set-up is not usable; the message
    says what and how to fix it."""


def load_cluster() -> ModuleType:
    """Mininet Cluster Edition as Debian ships it, registered as mininet.examples.cluster."""
    loaded = sys.modules.get(CLUSTER_MODULE)
    if loaded is not None and getattr(loaded, "__file__", None) == str(DEBIAN_CLUSTER):
        return loaded
    if not DEBIAN_CLUSTER.exists():
        raise ClusterError(
            f"Mininet Cluster Edition is missing ({DEBIAN_CLUSTER}): "
            "apt-get install --no-install-recommends mininet"
        )
    spec = importlib.util.spec_from_file_location(CLUSTER_MODULE, DEBIAN_CLUSTER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[CLUSTER_MODULE] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[CLUSTER_MODULE]
        raise ClusterError(f"{DEBIAN_CLUSTER} does not load on this mininet: {e}") from e
    return module


@dataclass(frozen=True)
class Server:
    """A machine of the cluster: `host` (a name or an IPv4 address) reached as `user`."""

    host: str
    user: str = DEFAULT_USER

    @property
    def is_local(self) -> bool:
        return self.host == LOCALHOST

    @property
    def dest(self) -> str:
        return f"{self.user}@{self.host}"

    def __str__(self) -> str:
        return LOCALHOST if self.is_local else self.dest


def _is_this_machine(host: str) -> bool:
    return host in (LOCALHOST, socket.gethostname()) or host.startswith("127.")


def parse_server(text: str) -> Server:
    """One `[user@]host` entry."""
    user, _, host = text.strip().rpartition("@")
    if not _HOST.fullmatch(host):
        raise ClusterError(f"bad server {text!r}: expected [user@]host, e.g. root@10.0.0.2")
    if user and not _USER.fullmatch(user):
        raise ClusterError(f"bad user in server {text!r}: expected a login name like root")
    if _is_this_machine(host):
        return Server(LOCALHOST)
    return Server(host, user or DEFAULT_USER)


def parse_servers(texts: str | Sequence[str]) -> list[Server]:
    """A servers list (`host1,user@host2`, or several such arguments) -> the coordinator
    (localhost) followed by the other servers, each once."""
    parts = [texts] if isinstance(texts, str) else list(texts)
    entries = [e.strip() for part in parts for e in part.split(",")]
    if not any(entries) or not all(entries):
        raise ClusterError(f"empty server in {','.join(parts)!r} ({SERVERS_FORMAT})")
    servers = [parse_server(e) for e in entries]
    for i, server in enumerate(servers):
        if server.is_local and i > 0:
            raise ClusterError(
                f"{entries[i]!r} is this machine, the coordinator: it comes first or not at all"
            )
        if server.host in (s.host for s in servers[:i]):
            raise ClusterError(f"server {server.host} is listed twice")
    return servers if servers[0].is_local else [Server(LOCALHOST), *servers]


def ssh_options() -> list[str]:
    """ssh's options for every connection to a server: keys only, never a prompt, a bounded
    login time, and the shared master connection."""
    return [
        "-o", "BatchMode=yes",
        "-o", f"ConnectTimeout={CONNECT_TIMEOUT}",
        "-o", "ControlMaster=auto",
        "-o", f"ControlPath={SSH_CONTROL_DIR}/%C",
        "-o", f"ControlPersist={CONTROL_PERSIST}",
    ]  # fmt: skip


def ensure_control_dir() -> None:
    """The masters' socket directory, private to root (ssh refuses others' sockets)."""
    SSH_CONTROL_DIR.mkdir(mode=0o700, exist_ok=True)


def ssh_command(server: Server, *options: str) -> list[str]:
    """`ssh ... user@host` for a remote command line (ssh joins its arguments with spaces
    and the remote login shell parses them again: quote every argument)."""
    ensure_control_dir()
    return ["ssh", *ssh_options(), "-o", "LogLevel=ERROR", *options, server.dest]


def close_master(server: Server) -> None:
    """End the server's master connection, if there is one (clean-up; never raises)."""
    if server.is_local:
        return
    subprocess.run(
        ["ssh", *ssh_options(), "-O", "exit", server.dest],
        capture_output=True,
        timeout=CHECK_TIMEOUT,
        check=False,
    )


@dataclass
class Check:
    """One check of one server: `detail` says what was found, or what is missing and how to
    fix it."""

    name: str
    ok: bool
    detail: str

    def __str__(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'}  {self.name}: {self.detail}"


@dataclass
class ServerReport:
    server: Server
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def lines(self) -> list[str]:
        role = " (coordinator)" if self.server.is_local else ""
        return [f"{self.server}{role}:", *(f"  {c}" for c in self.checks)]


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


class _Shell:
    """Runs a check's shell line on one server: locally for the coordinator, else over ssh
    (through the master connection)."""

    def __init__(self, server: Server) -> None:
        self.server = server

    def run(self, script: str, timeout: float = CHECK_TIMEOUT) -> subprocess.CompletedProcess:
        argv = ["sh", "-c", script]
        if not self.server.is_local:
            argv = [*ssh_command(self.server), shlex.join(argv)]
        try:
            return subprocess.run(
                argv, capture_output=True, text=True, timeout=timeout, check=False,
                stdin=subprocess.DEVNULL,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(argv, 124, "", f"no answer within {timeout:.0f} s")


def _ssh_login(server: Server) -> Check:
    started = time.monotonic()
    result = _Shell(server).run("true")
    took = time.monotonic() - started
    if result.returncode == 0:
        return Check("ssh", True, f"{server.dest} by key (BatchMode), {took:.2f} s")
    err = result.stderr
    if "Permission denied" in err:
        why = (
            f"{server.dest} does not accept this machine's key: add the coordinator's public "
            f"key to {server.user}'s authorized_keys there (ssh-copy-id {server.dest})"
        )
        if server.user == DEFAULT_USER:
            why += " and allow `PermitRootLogin prohibit-password` in its sshd_config"
    elif "Host key verification failed" in err:
        why = f"{server.host}'s host key is not known here: `ssh {server.dest}` once to accept it"
    elif "Connection refused" in err:
        why = f"no sshd answers on {server.host}: apt-get install openssh-server there"
    elif "Could not resolve" in err:
        why = f"{server.host} does not resolve: use its address or fix its name"
    elif "timed out" in err or "No route" in err or result.returncode == 124:
        why = f"{server.host} does not answer within {CONNECT_TIMEOUT} s: check the address"
    else:
        why = f"ssh {server.dest} failed: {_last_line(err) or f'exit {result.returncode}'}"
    return Check("ssh", False, why)


def _multiplexing(server: Server) -> Check:
    result = subprocess.run(
        ["ssh", *ssh_options(), "-O", "check", server.dest],
        capture_output=True, text=True, timeout=CHECK_TIMEOUT, check=False,
    )  # fmt: skip
    if result.returncode == 0:
        return Check("ssh multiplexing", True, f"one login shared at {SSH_CONTROL_DIR}/%C")
    return Check(
        "ssh multiplexing",
        False,
        f"no shared connection to {server.dest} ({_last_line(result.stderr)}): every command "
        f"would pay a login; {SSH_CONTROL_DIR} must be root's and sshd must allow sessions "
        "(MaxSessions)",
    )


def _sudo(shell: _Shell) -> Check:
    result = shell.run("command -v sudo && sudo -n true")
    if result.returncode == 0:
        return Check("sudo", True, _last_line(result.stdout) or "sudo")
    where = shell.server.host
    if not result.stdout.strip():
        return Check(
            "sudo",
            False,
            f"sudo is not on {shell.server.user}'s PATH on {where} (Mininet's cluster edition "
            "runs every command under sudo): apt-get install --no-install-recommends sudo",
        )
    return Check(
        "sudo",
        False,
        f"`sudo -n true` fails on {where} ({_last_line(result.stderr)}): "
        f"{shell.server.user} needs passwordless sudo there",
    )


def _mnexec(shell: _Shell) -> Check:
    result = shell.run("command -v mnexec")
    if result.returncode == 0:
        return Check("mnexec", True, result.stdout.strip())
    return Check(
        "mnexec",
        False,
        f"mnexec is not on the PATH on {shell.server.host}: "
        "apt-get install --no-install-recommends mininet",
    )


def _checkout(shell: _Shell, checkout: Path, python: Path) -> Check:
    name = "checkout and venv"
    q = shlex.quote
    if shell.run(f"test -d {q(str(checkout))}").returncode != 0:
        return Check(
            name,
            False,
            f"{checkout} does not exist on {shell.server.host}: clone hotagg there at the "
            "same path as on the coordinator",
        )
    if shell.run(f"test -x {q(str(python))}").returncode != 0:
        return Check(
            name,
            False,
            f"{python} is missing on {shell.server.host}: run `bash scripts/bootstrap.sh` "
            f"in {checkout} there",
        )
    imports = "import " + ", ".join(HOTAGG_MODULES)
    result = shell.run(f"cd {q(str(checkout))} && {q(str(python))} -c {q(imports)}")
    if result.returncode != 0:
        return Check(
            name,
            False,
            f"hotagg does not import on {shell.server.host} ({_last_line(result.stderr)}): "
            f"run `bash scripts/bootstrap.sh` in {checkout} there",
        )
    return Check(name, True, f"{checkout}, {python} imports hotagg")


# What VXLANLink (topologies/remote_links.py) needs of a server's kernel, tried on throwaway
# devices in its root namespace: the vxlan device of every cross-server link, and the tc u32
# match-all filter and mirred redirect that join a host end's veth to it. One line per piece:
# (check name, how to get it).
LINK_PIECES = (
    ("vxlan", "the kernel's vxlan device (CONFIG_VXLAN): modprobe vxlan"),
    ("tc u32", "tc's u32 classifier (CONFIG_NET_CLS_U32): modprobe cls_u32; apt-get install "
     "iproute2"),
    ("tc mirred", "tc's mirred action (CONFIG_NET_ACT_MIRRED): modprobe act_mirred"),
)  # fmt: skip


def _link_script(tag: str) -> str:
    """Try each piece of LINK_PIECES; print `<piece>: ok` or `<piece>: <error>` per piece.
    Plain sh only (a server's PATH may be bare): ${err##*"$nl"} is an error's last line."""
    vx, a, b = f"{tag}x", f"{tag}a", f"{tag}b"
    match_all = "protocol all prio {} u32 match u32 0 0"

    def tried(piece: str, command: str) -> str:
        return f'err=$({command} 2>&1) && echo "{piece}: ok" || echo "{piece}: ${{err##*"$nl"}}"'

    return "\n".join([
        "nl='\n'",
        tried("vxlan", f"ip link add {vx} type vxlan id 4242 dstport 4789"),
        f"ip link del {vx} 2>/dev/null",
        f"ip link add {a} type veth peer name {b} || {{ echo 'tc u32: no veth to try it on'; "
        "echo 'tc mirred: no veth to try it on'; exit 0; }",
        f"trap 'ip link del {a} 2>/dev/null' EXIT",
        f"tc qdisc add dev {a} ingress 2>/dev/null",
        tried("tc u32", f"tc filter add dev {a} parent ffff: {match_all.format(1)} flowid ffff:1"),
        tried("tc mirred", f"tc filter add dev {a} parent ffff: {match_all.format(2)} "
              f"action mirred egress redirect dev {b}"),
    ])  # fmt: skip


def _links(shell: _Shell) -> list[Check]:
    """What links between servers need there (LINK_PIECES), a check per piece."""
    tag = f"hagk{os.getpid() % 10000}"
    script = _link_script(tag)
    if shell.server.user != DEFAULT_USER:
        script = f"sudo -n sh -c {shlex.quote(script)}"
    result = shell.run(script)
    found = dict(line.split(": ", 1) for line in result.stdout.splitlines() if ": " in line)
    checks = []
    for name, how in LINK_PIECES:
        got = found.get(name)
        if got == "ok":
            checks.append(Check(name, True, "works (for cross-server links)"))
            continue
        why = got or _last_line(result.stderr) or f"not tried (exit {result.returncode})"
        checks.append(
            Check(name, False, f"{why} on {shell.server.host}; cross-server links need {how}")
        )
    return checks


def bmv2_path(binary: str | None = None) -> Path | None:
    """The BMv2 binary as an absolute path (a remote command runs with sshd's PATH, so it is
    started by the path the coordinator resolves), or None if the coordinator lacks it."""
    name = binary or os.environ.get(BMV2_BINARY_ENV) or DEFAULT_BMV2_BINARY
    found = shutil.which(name)
    return Path(found).absolute() if found else None


def _bmv2(shell: _Shell, binary: Path | None) -> Check:
    if binary is None:
        return Check(
            "bmv2",
            False,
            f"${BMV2_BINARY_ENV} (or {DEFAULT_BMV2_BINARY}) is not on the coordinator's PATH: "
            "install BMv2 (docs/bmv2.md) or give BMV2_BINARY=/absolute/path",
        )
    if shell.run(f"test -x {shlex.quote(str(binary))}").returncode != 0:
        return Check(
            "bmv2",
            False,
            f"{binary} is missing on {shell.server.host}: install BMv2 there at the same path",
        )
    return Check("bmv2", True, str(binary))


def check_server(
    server: Server,
    target: str = "embedded",
    checkout: Path = REPO_ROOT,
    python: Path | None = None,
    bmv2_binary: str | None = None,
) -> ServerReport:
    """Every check of one server. A remote server that does not let us in gets only the ssh
    check (the others would all fail for the same reason)."""
    python = python or Path(sys.prefix) / "bin" / "python"
    report = ServerReport(server)
    shell = _Shell(server)
    if not server.is_local:
        report.checks.append(_ssh_login(server))
        if not report.ok:
            return report
        report.checks.append(_multiplexing(server))
    report.checks.append(_sudo(shell))
    report.checks.append(_mnexec(shell))
    report.checks.append(_checkout(shell, checkout, python))
    report.checks.extend(_links(shell))
    if target == "bmv2":
        report.checks.append(_bmv2(shell, bmv2_path(bmv2_binary)))
    if server.is_local:
        try:
            load_cluster()
            report.checks.append(Check("mininet cluster edition", True, str(DEBIAN_CLUSTER)))
        except ClusterError as e:
            report.checks.append(Check("mininet cluster edition", False, str(e)))
    return report


def check_servers(servers: Sequence[Server], target: str = "embedded") -> list[ServerReport]:
    """Every server's checks, the coordinator first."""
    return [check_server(s, target) for s in servers]


def preflight(servers: Sequence[Server], target: str = "embedded") -> list[ServerReport]:
    """Check every server; raise ClusterError with one line per missing piece if any is."""
    reports = check_servers(servers, target)
    failed = [f"{r.server}: {c.name}: {c.detail}" for r in reports for c in r.failures()]
    if failed:
        raise ClusterError("the cluster is not ready:\n" + "\n".join(failed))
    return reports


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m topologies.cluster",
        description="Check the servers an experiment would be spread over.",
        formatter_class=DefaultsHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser(
        "check",
        help="check each server: ssh, sudo, mnexec, checkout, vxlan and tc, BMv2",
        description="Check each server, one line per check; exit 1 if any fails.",
        formatter_class=DefaultsHelpFormatter,
    )
    check.add_argument("servers", nargs="+", metavar="SERVER", help=SERVERS_FORMAT)
    check.add_argument(
        "--target",
        choices=("embedded", "bmv2"),
        default="embedded",
        help="the switch target (bmv2: its binary must be on every server)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        servers = parse_servers(args.servers)
    except ClusterError as e:
        print(f"cluster: {e}", file=sys.stderr)
        return 2
    ok = True
    for server in servers:
        report = check_server(server, args.target)
        print("\n".join(report.lines()), flush=True)
        ok = ok and report.ok
    print("cluster: every server is ready" if ok else "cluster: not ready (FAIL lines above)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
