"""Throughput of the embedded switch (and BMv2 where present) against a bare Python loop.

A generator in this process blasts pre-built frames from the host end of a veth pair as
fast as a raw socket allows (well above what a Python switch can take); the switch's
output rate is read from the kernel's transmit counter of its output port. The switch and
the generator each get one of the machine's cores.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from contract.codec import encode, encode_frame
from contract.constants import MAX_ENTRIES, Op
from p4rt import wire
from topologies.netns import VethNet
from topologies.switches import REPO_ROOT, SwitchProcess
from topologies.targets import Bmv2Target, Target

if TYPE_CHECKING:
    from controller.client import SwitchClient
    from controller.p4info import P4Info

JOB_ID = 1
HOT_KEYS = 1024
WORKERS = 64
SEQ_OFFSET = 14 + 20 + 8 + 8  # Ethernet + IPv4 + UDP + (version, op, flags, count, job, worker)
MAC = {1: "02:00:00:00:00:01", 2: "02:00:00:00:00:02"}
IP = {1: "10.0.0.1", 2: "10.0.0.2"}


@dataclass
class Rate:
    frames_out: int
    seconds: float
    offered_pps: float
    switch_cpu_seconds: float | None = None  # the switch process's CPU time in the window

    @property
    def pps(self) -> float:
        return self.frames_out / self.seconds if self.seconds > 0 else 0.0

    @property
    def cpu_us_per_packet(self) -> float | None:
        """Switch CPU time per frame out, including what it spent on frames it dropped at
        its input: a rough cost per packet that moves less than packets/s when other work
        shares the machine (bench/bmv2_callgrind.py gives BMv2's exact instruction count)."""
        if self.switch_cpu_seconds is None or not self.frames_out:
            return None
        return 1e6 * self.switch_cpu_seconds / self.frames_out


def tx_packets(ifname: str) -> int:
    return int(Path(f"/sys/class/net/{ifname}/statistics/tx_packets").read_text())


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU time of process `pid` (all its threads), from /proc."""
    if pid is None:
        return None
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class PushStream:
    """PUSH frames with 8 entries from 64 workers; seq rises per worker across the whole
    run, so the switch never sees a stale or duplicate push."""

    def __init__(self, hot: bool) -> None:
        keys = list(range(MAX_ENTRIES)) if hot else list(range(10**6, 10**6 + MAX_ENTRIES))
        self.frame = bytearray(
            encode_frame(
                encode(Op.PUSH, JOB_ID, 0, 1, 1, keys, [1] * MAX_ENTRIES),
                src_mac=MAC[1],
                dst_mac=MAC[2],
                src_ip=IP[1],
                dst_ip=IP[2],
                sport=40000,
            )
        )
        self.sent = 0

    def next(self) -> bytearray:
        n = self.sent
        struct.pack_into("!HI", self.frame, SEQ_OFFSET - 2, n % WORKERS, n // WORKERS + 1)
        self.sent = n + 1
        return self.frame


def blast(
    net: VethNet,
    stream: PushStream | None,
    out_ifname: str,
    seconds: float,
    switch_pid: int | None = None,
) -> Rate:
    """Offer frames on host port 1 for `seconds`, as fast as one core can; the rate is the
    switch's output on `out_ifname` over the second half, when its queue is full for sure
    (and the CPU time process `switch_pid` spent in that half)."""
    sock = net.host_socket(1)
    send = sock.send
    frames = stream or PushStream(hot=True)
    nxt = frames.next
    start = time.perf_counter()
    half, end = start + seconds / 2, start + seconds
    mark = None
    sent = 0
    while True:
        for _ in range(256):
            try:  # noqa: SIM105 (contextlib.suppress costs more per frame)
                send(nxt())
            except OSError:
                pass  # a full queue drops the frame, as a link would
        sent += 256
        now = time.perf_counter()
        if mark is None and now >= half:
            mark = (now, tx_packets(out_ifname), cpu_seconds(switch_pid))
        if now >= end:
            break
    t_end, tx_end, cpu_end = time.perf_counter(), tx_packets(out_ifname), cpu_seconds(switch_pid)
    sock.close()
    assert mark is not None
    cpu = None if cpu_end is None or mark[2] is None else cpu_end - mark[2]
    return Rate(tx_end - mark[1], t_end - mark[0], sent / (t_end - start), cpu)


def settle(ifname: str, quiet: float = 0.5, limit: float = 60.0) -> int:
    """Wait until `ifname` has sent nothing for `quiet` seconds; its transmit count then."""
    start = time.perf_counter()
    last, still_since = tx_packets(ifname), start
    while time.perf_counter() - still_since < quiet and time.perf_counter() - start < limit:
        time.sleep(0.05)
        now = tx_packets(ifname)
        if now != last:
            last, still_since = now, time.perf_counter()
    return last


def _configure_switch(grpc_addr: str, device_config: bytes) -> dict:
    from controller.client import SwitchClient
    from controller.forwarding import Forwarding, Route
    from controller.hot_keys import HotKeys
    from controller.jobs import Jobs
    from controller.p4info import P4Info
    from controller.tenancy import Tenancy, admission

    p4info = P4Info.from_file(REPO_ROOT / "p4src" / "hotagg.p4info.txtpb")
    with SwitchClient(grpc_addr, wait=10.0).connect() as client:
        client.set_pipeline(p4info.message, device_config)
        routes = [
            Route(
                int.from_bytes(bytes(map(int, IP[p].split("."))), "big"),
                32,
                int(MAC[p].replace(":", ""), 16),
                p,
            )
            for p in (1, 2)
        ]
        Forwarding(client, p4info).install(routes)
        job = Jobs(client, p4info).add(JOB_ID, HOT_KEYS)
        # Tenancy: the stream's workers all send from host 1 on port 1.
        Tenancy(client, p4info).admit(admission(JOB_ID, w, 1, IP[1]) for w in range(WORKERS))
        start = time.perf_counter()
        report = HotKeys(client, p4info).install(job, range(HOT_KEYS))
        seconds = time.perf_counter() - start
        reads = _read_rates(client, p4info)
    install = {
        "hot_keys": HOT_KEYS,
        "table_entries": report.entries_written,
        "seconds": round(seconds, 3),
        "entries_per_s": round(report.entries_written / seconds, 1),
    }
    return {"p4runtime_install": install, "p4runtime_read": reads}


READ_REPEATS = 5  # reads of each kind, timed together


def _read_rates(client: SwitchClient, p4info: P4Info) -> dict:
    """Entities per second the controller reads back, decoded: the 8 hot-key tables with
    their direct counters (the online loop's hit source, one Read RPC) and both rows of the
    sketch's counters (its cell reads)."""
    from p4.v1 import p4runtime_pb2

    from contract.names import hot_keys_table
    from controller.sketch import Sketch

    tables = [
        p4runtime_pb2.Entity(table_entry=p4info.wildcard(hot_keys_table(i), counters=True))
        for i in range(MAX_ENTRIES)
    ]
    entries = 0
    start = time.perf_counter()
    for _ in range(READ_REPEATS):
        for reply in client.read_raw(tables):
            entries += sum(1 for _ in wire.table_entry_counters(reply))
    table_seconds = time.perf_counter() - start
    sketch = Sketch(client, p4info)
    cells = 0
    start = time.perf_counter()
    for _ in range(READ_REPEATS):
        cells += sum(len(row) for row in sketch.read_sketch().rows)
    cell_seconds = time.perf_counter() - start
    return {
        "repeats": READ_REPEATS,
        "table_entries": entries // READ_REPEATS,
        "table_entries_per_s": round(entries / table_seconds, 1),
        "counter_cells": cells // READ_REPEATS,
        "counter_cells_per_s": round(cells / cell_seconds, 1),
    }


# The cases every switch is measured on: (name, hot keys?, output port, sketch on?). The cold
# case runs twice, the second time with the cold-key sketch counting (and, once per key,
# reporting) its 8 entries: the same program, switched on through its config table.
CASES = (
    ("push_hot", True, 1, False),
    ("push_cold", False, 2, False),
    ("push_cold_sketch", False, 2, True),
)
SKETCH_THRESHOLD = 1000


def sketch_on(grpc_addr: str) -> None:
    """Turn the cold-key sketch on (epoch 1), its digest configured."""
    from controller.client import SwitchClient
    from controller.p4info import P4Info
    from controller.sketch import Sketch

    p4info = P4Info.from_file(REPO_ROOT / "p4src" / "hotagg.p4info.txtpb")
    with SwitchClient(grpc_addr, wait=10.0).connect() as client:
        Sketch(client, p4info).configure(1, SKETCH_THRESHOLD)


def bmv2_device_config(bmv2_json: Path | None) -> bytes:
    """The BMv2 JSON to load: `bmv2_json`, else p4src/ compiled now (never a stale build/)."""
    if bmv2_json is None:
        subprocess.run(["make", "-s", "-C", str(REPO_ROOT), "build"], check=True)
        bmv2_json = REPO_ROOT / "build" / "hotagg.json"
    return bmv2_json.read_bytes()


def measure_switch(
    target: str | Target,
    seconds: float,
    bmv2_json: Path | None = None,
) -> dict:
    """Hot and cold push rates of one switch of `target` (a name: its build from the
    environment, e.g. BMV2_BINARY); BMv2 runs `bmv2_json` (default: p4src/)."""
    prefix = f"habn{os.getpid() % 100000}"
    with VethNet(prefix, 2) as net:
        proc = SwitchProcess(
            "bench",
            dict(net.switch_ifaces),
            target=target,
            log_dir=Path("/tmp/hotagg-bench-logs"),
        )
        with proc:
            if bmv2_json is not None and isinstance(proc.kind, Bmv2Target):
                device_config = bmv2_device_config(bmv2_json)
            else:
                device_config = proc.kind.device_config()
            results = _configure_switch(proc.grpc_addr, device_config)
            seq_base = 0
            for name, hot, out_port, sketch in CASES:
                if sketch:
                    sketch_on(proc.grpc_addr)
                stream = PushStream(hot)
                stream.sent = seq_base  # continue the seqs of the previous case
                assert proc.proc is not None
                rate = blast(net, stream, net.switch_ifaces[out_port], seconds, proc.proc.pid)
                seq_base = stream.sent
                cpu_us = rate.cpu_us_per_packet
                results[name] = {
                    "packets_per_s": round(rate.pps, 1),
                    "entries_per_s": round(rate.pps * MAX_ENTRIES, 1),
                    "offered_packets_per_s": round(rate.offered_pps, 1),
                    "measured_seconds": round(rate.seconds, 2),
                    "switch_cpu_us_per_packet": None if cpu_us is None else round(cpu_us, 2),
                    # What one core of its own would forward at that CPU cost.
                    "cpu_bound_packets_per_s": None if not cpu_us else round(1e6 / cpu_us, 1),
                }
    return results


def measure_bare_loop(seconds: float) -> dict:
    prefix = f"habb{os.getpid() % 100000}"
    with VethNet(prefix, 2) as net:
        argv = [sys.executable, "-m", "bench.bare_loop"]
        for port, ifname in net.switch_ifaces.items():
            argv += ["-i", f"{port}@{ifname}"]
        proc = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            if "ready" not in proc.stdout.readline():
                raise RuntimeError("bare loop did not start")
            rate = blast(net, None, net.switch_ifaces[2], seconds)
        finally:
            proc.terminate()
            proc.wait(5)
    return {
        "packets_per_s": round(rate.pps, 1),
        "offered_packets_per_s": round(rate.offered_pps, 1),
        "measured_seconds": round(rate.seconds, 2),
    }
