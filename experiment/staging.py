"""The run's files on other servers (issue #32): what an agent on another server reads is
copied there before it starts, and what it writes is copied back into runs/<id>/ after its
phase, so the run's folder looks as on one machine.

Every server has the checkout at the coordinator's path (the preflight checks it), but not
the run's folder: an agent there reads and writes under its server's staging directory,
`STAGING_ROOT/<run>/<server>/`, at the path its file has under runs/<id>/. `map_argv` turns
an agent's arguments into those paths, and the files that exist here (hot keys, anything
the run wrote for it) are its inputs. A test's "servers" share one filesystem; the directory
named after the server keeps a file that was not copied from being found by accident.

Files travel as a tar stream through the server's shared ssh connection (topologies/
cluster.py ssh_command: no login of its own): a server needs tar, not rsync or sftp.
"""

from __future__ import annotations

import io
import shlex
import subprocess
import tarfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from experiment.config import ExperimentError
from topologies.cluster import DEFAULT_USER, Server, ssh_command

STAGING_ROOT = Path("/tmp/hotagg-remote")
COPY_TIMEOUT = 120.0  # seconds for one copy to or from a server


class StagingError(ExperimentError):
    """A copy to or from a server failed; the message names the server and what ssh said."""


def staging_dir(run_id: str, server: Server) -> Path:
    """Where the run's files live on `server`."""
    return STAGING_ROOT / run_id / server.host


def _as_root(server: Server, script: str) -> str:
    """The remote command line for `script`: the agents run as root there (Mininet's nodes),
    so their files are root's."""
    line = shlex.join(["sh", "-c", script])
    return line if server.user == DEFAULT_USER else f"sudo -n {line}"


def _ssh(server: Server, script: str, data: bytes = b"") -> bytes:
    """Run `script` on `server` with `data` on its stdin; its stdout, or StagingError."""
    argv = [*ssh_command(server), _as_root(server, script)]
    try:
        result = subprocess.run(
            argv, input=data, capture_output=True, timeout=COPY_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired:
        raise StagingError(f"{server}: no answer within {COPY_TIMEOUT:.0f} s") from None
    if result.returncode != 0:
        err = result.stderr.decode(errors="replace").strip().splitlines()
        raise StagingError(f"{server}: {err[-1] if err else f'exit {result.returncode}'}")
    return result.stdout


def _tar(base: Path, names: Iterable[str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in names:
            tar.add(base / name, arcname=name)
    return buffer.getvalue()


@dataclass
class Staging:
    """A run's files on its other servers: `run_dir` here, one staging directory per server."""

    run_dir: Path
    run_id: str
    # server -> directories (relative to run_dir) its agents wrote in since the last collect
    written: dict[Server, set[str]] = field(default_factory=dict)
    used: set[Server] = field(default_factory=set)  # servers with a staging directory

    def __post_init__(self) -> None:
        self.run_dir = self.run_dir.absolute()

    def relative(self, arg: str) -> str | None:
        """`arg`'s path relative to the run's folder, if it names a file in it."""
        if "/" not in arg:
            return None
        try:
            return str(Path(arg).absolute().relative_to(self.run_dir))
        except ValueError:
            return None

    def map_argv(self, server: Server, argv: Sequence[str]) -> tuple[list[str], list[str]]:
        """(argv with every path under the run's folder moved to the server's staging
        directory, those paths relative to the run's folder)."""
        root = staging_dir(self.run_id, server)
        mapped, paths = [], []
        for arg in argv:
            rel = self.relative(arg)
            mapped.append(arg if rel is None else str(root / rel))
            if rel is not None:
                paths.append(rel)
        return mapped, paths

    def push(self, server: Server, argv: Sequence[str]) -> list[str]:
        """Prepare `server` for an agent started with `argv`: the directories of its files
        made there and the files that exist here (its inputs) copied; the argv to run."""
        mapped, paths = self.map_argv(server, argv)
        if not paths:
            return mapped
        root = staging_dir(self.run_id, server)
        dirs = sorted({str(Path(p).parent) for p in paths})
        inputs = [p for p in paths if (self.run_dir / p).is_file()]
        mkdir = shlex.join(["mkdir", "-p", *(str(root / d) for d in dirs)])
        untar = shlex.join(["tar", "-C", str(root), "-xf", "-"]) if inputs else "true"
        _ssh(server, f"{mkdir} && {untar}", _tar(self.run_dir, inputs))
        self.used.add(server)
        self.written.setdefault(server, set()).update(dirs)
        return mapped

    def collect(self) -> list[str]:
        """Copy every file in the directories the servers' agents wrote in back into the run's
        folder (an input copied there comes back unchanged); the files, relative to it."""
        got: list[str] = []
        for server, dirs in sorted(self.written.items(), key=lambda kv: str(kv[0])):
            root = staging_dir(self.run_id, server)
            # The directories that exist (a failed start may have made none).
            script = (
                f"cd {shlex.quote(str(root))} && for d in {shlex.join(sorted(dirs))}; do "
                '[ -d "$d" ] && printf "%s\\n" "$d"; done | tar -cf - -T -'
            )
            data = _ssh(server, script)
            with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
                members = [m for m in tar.getmembers() if m.isfile()]
                tar.extractall(self.run_dir, members=members, filter="data")
            got += [m.name for m in members]
        self.written.clear()
        return got

    def fetch(self, server: Server, remote: Path, local: Path) -> None:
        """Copy one file of `server` (a switch's log) to `local`."""
        data = _ssh(server, shlex.join(["cat", str(remote)]))
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(data)

    def remove(self) -> list[str]:
        """Delete the run's staging directories on its servers (best effort); what failed."""
        failed = []
        for server in sorted(self.used, key=str):
            run_root = STAGING_ROOT / self.run_id
            script = shlex.join(["rm", "-rf", str(staging_dir(self.run_id, server))])
            script += f"; rmdir {shlex.quote(str(run_root))} 2>/dev/null; true"
            try:
                _ssh(server, script)
            except StagingError as e:
                failed.append(str(e))
        self.used.clear()
        return failed
