"""Fixtures shared by the test tiers, and the markers the fast lane selects on.

`sut` is a switch under test on veth pairs, for each target: the embedded target always,
BMv2 where simple_switch_grpc and p4c-bm2-ss are on PATH (skipped with the reason
elsewhere). Tests that need root skip cleanly without it.

Markers (pyproject.toml) are added here as well as in the test files, so that
`pytest -m "not slow and not bmv2"` (`make test-fast`) leaves out every BMv2 variant and
every slow test: `bmv2` on every test with a parameter "bmv2" (the switch fixtures' and the
`target` parameters), `root` on every test of a switch fixture, `slow` on every `e2e` test
and on the tests named in SLOW.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from contract.constants import CPU_PORT, MAX_ENTRIES, Stat
from contract.names import hot_keys_table, set_slot_action
from contract.p4files import P4INFO_PATH
from tests.packet_harness import N_PORTS, Ports, host_ip, host_mac, unique_prefix
from topologies.netns import VethNet
from topologies.switches import REPO_ROOT, SwitchProcess, SwitchStartError, bmv2_missing

if TYPE_CHECKING:
    from controller.tenancy import Admission

BMV2_JSON = REPO_ROOT / "build" / "hotagg.json"
TEST_JOBS = {1: 64, 2: 64}  # job id -> slot count
# Tenancy of the packet harness: (job id, worker id or None for the PS, host = port).
# h1 and h2 are job 1's workers 0 and 1, h4 is job 2's worker 0, h3 is both jobs' PS.
TEST_ADMISSIONS = ((1, 0, 1), (1, 1, 2), (1, None, 3), (2, 0, 4), (2, None, 3))


# Slow tests that are not end-to-end runs (those are `slow` as `e2e`), as node ids or their
# files: a few seconds or more each on a 2-core machine (pytest --durations).
SLOW = (
    "tests/test_p4c.py",  # compiles p4src/ with each p4c
    "tests/test_reconnect.py",  # restarts switch processes
    "tests/test_agents.py::test_spurious_resends_teach_the_timeout_the_longer_round_trip",
    "tests/test_agents.py::test_cli_run_matches_reference_and_sigterm_is_clean",  # processes
    "tests/test_agents.py::test_keys_moving_on_a_switch_process_under_loss_are_exact",
    "tests/test_hotset_sim.py::test_the_sweep_writes_every_policy_at_every_drift_and_a_figure",
    "tests/test_hotset_sim.py::"
    "test_the_informed_loop_bounds_the_online_one_and_static_trails_under_drift",
)
_ROOT_FIXTURES = {"switch_proc", "sut"}


def _check_slow_names(rootdir: Path) -> None:
    """Every SLOW entry names a file and a test that exist: a renamed test would otherwise
    slip into the fast lane without a word."""
    for entry in SLOW:
        path, _, name = entry.partition("::")
        file = rootdir / path
        if not file.is_file() or (name and f"def {name}(" not in file.read_text()):
            raise pytest.UsageError(f"tests/conftest.py SLOW names {entry}, which does not exist")


@pytest.hookimpl(tryfirst=True)  # before -m deselects on the markers added here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _check_slow_names(Path(config.rootpath))
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and any(
            v == "bmv2" for v in callspec.params.values() if isinstance(v, str)
        ):
            item.add_marker(pytest.mark.bmv2)
        if _ROOT_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.root)
        if item.get_closest_marker("e2e") or any(
            item.nodeid == entry or item.nodeid.startswith((entry + "::", entry + "["))
            for entry in SLOW
        ):
            item.add_marker(pytest.mark.slow)


def root_missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces, veth pairs, raw sockets)"
    if shutil.which("ip") is None:
        return "needs iproute2's `ip`"
    return None


@functools.cache
def bmv2_config() -> bytes:
    """BMv2's JSON, compiled once per session from the current p4src/ (never a stale
    build/; p4c is on PATH whenever BMv2 tests run)."""
    subprocess.run(["make", "-s", "-C", str(REPO_ROOT), "build"], check=True)
    return BMV2_JSON.read_bytes()


class SwitchUnderTest:
    """A running switch plus the controller objects the packet tests drive it with."""

    def __init__(self, proc: SwitchProcess, ports: Ports) -> None:
        from controller.client import SwitchClient
        from controller.p4info import P4Info

        self.proc = proc
        self.ports = ports
        self.p4info = P4Info.from_file(P4INFO_PATH)
        self.client = SwitchClient(proc.grpc_addr, proc.device_id, (0, 1), wait=10.0).connect()
        self.device_config = bmv2_config() if proc.target == "bmv2" else b""
        self.jobs: dict = {}

    def reset(self) -> None:
        """Fresh pipeline (clears tables, registers, counters on both targets), then the
        routes to the four hosts, two jobs with their admissions and a drop rate of 0."""
        from controller.drop_sim import DropSim
        from controller.forwarding import Forwarding, Route
        from controller.jobs import Jobs

        self.client.set_pipeline(self.p4info.message, self.device_config)
        routes = [
            Route(
                int.from_bytes(bytes(map(int, host_ip(i).split("."))), "big"),
                32,
                int(host_mac(i).replace(":", ""), 16),
                i,
            )
            for i in range(1, N_PORTS + 1)
        ]
        Forwarding(self.client, self.p4info).install(routes)
        jobs = Jobs(self.client, self.p4info)
        self.jobs = {job_id: jobs.add(job_id, slots) for job_id, slots in TEST_JOBS.items()}
        for job_id, worker_id, host in TEST_ADMISSIONS:
            self.admit(job_id, worker_id, host)
        DropSim(self.client, self.p4info).set(0.0)
        self.ports.drain()

    def admission(
        self, job_id: int, worker_id: int | None, port: int, host: int | None = None
    ) -> Admission:
        """Host `host` (default: the one on `port`) as the job's worker `worker_id`, or as
        its PS with worker_id None, arriving on `port`."""
        from controller.tenancy import admission

        return admission(job_id, worker_id, port, host_ip(port if host is None else host))

    def admit(self, job_id: int, worker_id: int | None, port: int, host: int | None = None) -> None:
        from controller.tenancy import Tenancy

        Tenancy(self.client, self.p4info).admit([self.admission(job_id, worker_id, port, host)])

    def revoke(
        self, job_id: int, worker_id: int | None, port: int, host: int | None = None
    ) -> None:
        from controller.tenancy import Tenancy

        Tenancy(self.client, self.p4info).revoke([self.admission(job_id, worker_id, port, host)])

    def slot_count(self, job_id: int) -> int:
        return self.jobs[job_id].slot_count

    def hot(self, job_id: int, offsets: dict[int, int]) -> None:
        """Install hot keys at explicit slot offsets, in all 8 lookup instances."""
        entries = [
            self.p4info.table_entry(
                hot_keys_table(i),
                {"job_id": job_id, "key": key},
                set_slot_action(i),
                {"offset": off},
            )
            for key, off in offsets.items()
            for i in range(MAX_ENTRIES)
        ]
        self.client.write_entries("insert", entries)

    def evict(self, job_id: int, keys: list[int]) -> None:
        from controller.hot_keys import HotKeys

        HotKeys(self.client, self.p4info).evict(job_id, keys)

    def drop_rate(self, probability: float) -> None:
        from controller.drop_sim import DropSim

        DropSim(self.client, self.p4info).set(probability)

    def stats(self) -> dict[Stat, int]:
        from controller.stats import Stats

        known = {s.value for s in Stat}  # reasons need not be contiguous
        return {
            Stat(c.index): c.packets
            for c in Stats(self.client, self.p4info).read()
            if c.index in known
        }

    def close(self) -> None:
        self.client.close()


@contextlib.contextmanager
def running_switch(target: str, tag: str = "") -> Iterator[tuple[SwitchProcess, Ports]]:
    """A switch of `target` on a veth set of its own (`tag` tells several apart in one
    process); skips with the reason when root or BMv2/p4c are missing."""
    if why := root_missing():
        pytest.skip(why)
    if target == "bmv2" and (why := bmv2_missing()):
        pytest.skip(f"BMv2 target: {why}")
    net = VethNet(unique_prefix() + tag, N_PORTS).create()
    ports = Ports(net)
    proc = SwitchProcess(
        "s1",
        dict(net.switch_ifaces),
        target=target,
        cpu_port=CPU_PORT,
        log_dir=Path("/tmp/hotagg-test-logs") / (target + tag),
        seed=1,
    )
    try:
        proc.start()
    except SwitchStartError as e:
        ports.close()
        net.destroy()
        pytest.fail(str(e))
    try:
        yield proc, ports
    finally:
        proc.stop()
        ports.close()
        net.destroy()


@pytest.fixture(scope="module", params=["embedded", "bmv2"])
def switch_proc(request) -> Iterator[tuple[SwitchProcess, Ports]]:
    with running_switch(request.param) as running:
        yield running


@pytest.fixture
def sut(switch_proc) -> Iterator[SwitchUnderTest]:
    proc, ports = switch_proc
    s = SwitchUnderTest(proc, ports)
    s.reset()
    yield s
    s.close()
