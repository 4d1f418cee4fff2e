"""A second "server" on this machine: an sshd of its own inside a network namespace, reached
from the root namespace over a veth pair, as root by a throwaway key. It lets a user try
`make run SERVERS=...` without a second machine (`make local-server`), and the cluster tests
(tests/cluster_server.py) make the remote code paths really run with it: ssh logins,
multiplexing, tunnels, remote processes.

Mininet's own cluster sanity test runs every node on localhost (no ssh at all). This server
shares this machine's filesystem, PID namespace and cores, so the checkout and the venv are
at the same path there, as the cluster rules ask of a real second machine, and a run over
it measures the remote code paths, not more cores (docs/cluster.md, "Trying it on one
machine").

Three addresses on the server side, each a way the set-up can be right or wrong:
- `address`: the good server (the key is authorized, `PermitTunnel ethernet`);
- `wrong_key_address`: the same sshd, reached with a key it does not know;
- `no_sudo_address`: a second sshd whose sessions get a PATH without sudo (`SetEnv PATH`) and
  that refuses tunnels (`PermitTunnel no`, sshd's default).
Everything is undone by `stop()`, also after a half-done `start()`.

CLI: `python -m topologies.netns_server start|stop [--dir DIR]`; `start` prints the address
to give as SERVERS= and keeps what `stop` needs in DIR/server.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from topologies.cluster import close_master, parse_server

DEFAULT_DIR = Path("/tmp/hotagg-local-server")
STATE_FILE = "server.json"

SSHD = Path("/usr/sbin/sshd")
SSH_CLIENT_SNIPPETS = Path("/etc/ssh/ssh_config.d")
RUN_SSHD = Path("/run/sshd")  # sshd's privilege separation directory
# What the no-sudo server's sessions find on their PATH: all a check needs but sudo.
NO_SUDO_TOOLS = ("sh", "env", "ip", "mnexec")


def server_missing() -> str | None:
    """Why the second server cannot be built here, or None."""
    if os.geteuid() != 0:
        return "needs root (a network namespace and an sshd inside it)"
    if not SSHD.exists():
        return f"{SSHD} is missing: apt-get install --no-install-recommends openssh-server"
    for tool in ("sudo", "ssh", "ssh-keygen", "ip"):
        if shutil.which(tool) is None:
            return f"`{tool}` is missing (bash scripts/bootstrap.sh installs sudo and openssh)"
    if not SSH_CLIENT_SNIPPETS.is_dir():
        return f"{SSH_CLIENT_SNIPPETS} is missing (openssh-client's system configuration)"
    return None


def _run(*argv: str) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {result.stderr.strip() or result.returncode}")
    return result.stdout


def _free_subnet() -> str:
    """A 10.233.N.0/24 that no interface of this machine uses (N from our pid, then counting)."""
    used = _run("ip", "-o", "-4", "addr", "show")
    for step in range(250):
        prefix = f"10.233.{(os.getpid() + step) % 250 + 1}."
        if f" {prefix}" not in used:
            return prefix
    raise RuntimeError("no free 10.233.N.0/24 for the test server")


@dataclass
class NetnsServer:
    """The second server; `start()` builds it, `stop()` removes every piece it made."""

    workdir: Path
    tag: str = field(default_factory=lambda: f"hac{os.getpid() % 100000}")
    subnet: str = field(default_factory=_free_subnet)
    made_run_sshd: bool = False
    pid_files: list[Path] = field(default_factory=list)

    @property
    def netns(self) -> str:
        return self.tag

    @property
    def root_veth(self) -> str:
        return f"{self.tag}r"

    @property
    def address(self) -> str:
        return self.subnet + "2"

    @property
    def no_sudo_address(self) -> str:
        return self.subnet + "3"

    @property
    def wrong_key_address(self) -> str:
        return self.subnet + "4"

    @property
    def snippet(self) -> Path:
        return SSH_CLIENT_SNIPPETS / f"{self.tag}-hotagg-netns-server.conf"

    def start(self) -> NetnsServer:
        d = self.workdir
        d.mkdir(parents=True, exist_ok=True)
        d.chmod(0o700)
        for key in ("client", "wrong", "host"):
            _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", key, "-f", str(d / key))
        (d / "authorized_keys").write_text((d / "client.pub").read_text())
        (d / "authorized_keys").chmod(0o600)
        host_key = (d / "host.pub").read_text().split()
        addresses = (self.address, self.no_sudo_address, self.wrong_key_address)
        (d / "known_hosts").write_text(f"{','.join(addresses)} {host_key[0]} {host_key[1]}\n")
        _run("ip", "netns", "add", self.netns)
        inner = f"{self.tag}s"
        _run("ip", "link", "add", self.root_veth, "type", "veth", "peer", "name", inner)
        _run("ip", "link", "set", inner, "netns", self.netns)
        _run("ip", "addr", "add", self.subnet + "1/24", "dev", self.root_veth)
        _run("ip", "link", "set", self.root_veth, "up")
        for address in addresses:
            _run("ip", "-n", self.netns, "addr", "add", address + "/24", "dev", inner)
        _run("ip", "-n", self.netns, "link", "set", inner, "up")
        _run("ip", "-n", self.netns, "link", "set", "lo", "up")
        self.snippet.write_text(
            f"# hotagg ({self.tag}): how root's ssh reaches the local netns server\n"
            f"Host {self.address} {self.no_sudo_address}\n"
            f"    IdentityFile {d / 'client'}\n"
            f"Host {self.wrong_key_address}\n"
            f"    IdentityFile {d / 'wrong'}\n"
            f"Host {' '.join(addresses)}\n"
            "    IdentitiesOnly yes\n"
            f"    UserKnownHostsFile {d / 'known_hosts'}\n"
            "    StrictHostKeyChecking yes\n"
            "    GSSAPIAuthentication no\n"
        )
        if not RUN_SSHD.exists():
            RUN_SSHD.mkdir(mode=0o755)
            self.made_run_sshd = True
        self._sshd("main", [self.address, self.wrong_key_address], "PermitTunnel ethernet\n")
        bin_dir = d / "bin-without-sudo"
        bin_dir.mkdir()
        for tool in NO_SUDO_TOOLS:
            (bin_dir / tool).symlink_to(shutil.which(tool) or tool)
        self._sshd("nosudo", [self.no_sudo_address], f"SetEnv PATH={bin_dir}\nPermitTunnel no\n")
        return self

    def _sshd(self, name: str, listen: list[str], extra: str) -> None:
        d = self.workdir
        pid_file = d / f"sshd-{name}.pid"
        config = d / f"sshd-{name}.conf"
        config.write_text(
            "".join(f"ListenAddress {a}\n" for a in listen)
            + f"HostKey {d / 'host'}\nPidFile {pid_file}\n"
            f"AuthorizedKeysFile {d / 'authorized_keys'}\n"
            "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nUsePAM no\nUseDNS no\nLogLevel VERBOSE\n"
            # The keys live under the world-writable /tmp (a test's tmp dir or DEFAULT_DIR).
            "StrictModes no\n"
            "MaxStartups 100:30:200\nMaxSessions 100\n" + extra
        )
        self.pid_files.append(pid_file)
        _run("ip", "netns", "exec", self.netns, str(SSHD), "-f", str(config),
             "-E", str(d / f"sshd-{name}.log"))  # fmt: skip
        deadline = time.monotonic() + 5
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)

    def stop(self) -> None:
        """Undo start(), whatever part of it ran; never raises."""
        for address in (self.address, self.no_sudo_address, self.wrong_key_address):
            close_master(parse_server(address))
        for pid_file in self.pid_files:
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pid_file.read_text()), signal.SIGTERM)
        # Sessions outlive their listening sshd: end every process left in the namespace.
        pids = subprocess.run(["ip", "netns", "pids", self.netns], capture_output=True,
                              text=True, check=False).stdout.split()  # fmt: skip
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(int(pid), signal.SIGKILL)
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True, check=False)
        subprocess.run(["ip", "link", "del", self.root_veth], capture_output=True, check=False)
        self.snippet.unlink(missing_ok=True)
        if self.made_run_sshd:
            shutil.rmtree(RUN_SSHD, ignore_errors=True)

    def save(self) -> None:
        """Keep what stop() needs, for `stop` in another process."""
        state = asdict(self)
        state["workdir"] = str(self.workdir)
        state["pid_files"] = [str(p) for p in self.pid_files]
        (self.workdir / STATE_FILE).write_text(json.dumps(state, indent=1))

    @classmethod
    def load(cls, workdir: Path) -> NetnsServer:
        state = json.loads((workdir / STATE_FILE).read_text())
        return cls(
            workdir=Path(state["workdir"]),
            tag=state["tag"],
            subnet=state["subnet"],
            made_run_sshd=state["made_run_sshd"],
            pid_files=[Path(p) for p in state["pid_files"]],
        )


def main(argv: list[str] | None = None) -> int:
    """`start`: build the server and print its address; `stop`: remove it."""
    parser = argparse.ArgumentParser(
        prog="python -m topologies.netns_server",
        description="a second server on this machine, for make run SERVERS=",
    )
    parser.add_argument("command", choices=("start", "stop"))
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="keys, configs, state")
    args = parser.parse_args(argv)
    state = args.dir / STATE_FILE
    if args.command == "stop":
        if not state.exists():
            print(f"no local server to stop ({state} is missing)")
            return 0
        NetnsServer.load(args.dir).stop()
        shutil.rmtree(args.dir, ignore_errors=True)
        print(f"stopped the local server and removed {args.dir}")
        return 0
    if why := server_missing():
        print(f"error: cannot build the local server: {why}", file=sys.stderr)
        return 1
    if state.exists():
        address = NetnsServer.load(args.dir).address
        print(f"error: a local server runs already (SERVERS={address}); stop it first "
              "(make local-server-stop)", file=sys.stderr)  # fmt: skip
        return 1
    if args.dir.exists():
        shutil.rmtree(args.dir)  # a half-made one: its keys are throwaway
    server = NetnsServer(args.dir)
    try:
        server.start()
    except (OSError, RuntimeError) as e:
        server.stop()
        print(f"error: cannot build the local server: {e}", file=sys.stderr)
        return 1
    server.save()
    print(
        f"a second server on this machine: SERVERS={server.address} (an sshd in network "
        f"namespace {server.netns}; make local-server-stop removes it)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
