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

from contract.codec import encode, encode_frame
from contract.constants import MAX_ENTRIES, Op
from topologies.netns import VethNet
from topologies.switches import REPO_ROOT, SwitchProcess

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

    @property
    def pps(self) -> float:
        return self.frames_out / self.seconds if self.seconds > 0 else 0.0


def tx_packets(ifname: str) -> int:
    return int(Path(f"/sys/class/net/{ifname}/statistics/tx_packets").read_text())


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


def blast(net: VethNet, stream: PushStream | None, out_ifname: str, seconds: float) -> Rate:
    """Offer frames on host port 1 for `seconds`, as fast as one core can; the rate is the
    switch's output on `out_ifname` over the second half, when its queue is full for sure."""
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
            mark = (now, tx_packets(out_ifname))
        if now >= end:
            break
    t_end, tx_end = time.perf_counter(), tx_packets(out_ifname)
    sock.close()
    assert mark is not None
    return Rate(tx_end - mark[1], t_end - mark[0], sent / (t_end - start))


def _configure_switch(grpc_addr: str, device_config: bytes) -> dict:
    from controller.client import SwitchClient
    from controller.forwarding import Forwarding, Route
    from controller.hot_keys import HotKeys
    from controller.jobs import Jobs
    from controller.p4info import P4Info

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
        start = time.perf_counter()
        report = HotKeys(client, p4info).install(job, range(HOT_KEYS))
        seconds = time.perf_counter() - start
    return {
        "hot_keys": HOT_KEYS,
        "table_entries": report.entries_written,
        "seconds": round(seconds, 3),
        "entries_per_s": round(report.entries_written / seconds, 1),
    }


def measure_switch(target: str, seconds: float) -> dict:
    prefix = f"habn{os.getpid() % 100000}"
    with VethNet(prefix, 2) as net:
        proc = SwitchProcess(
            "bench", dict(net.switch_ifaces), target=target, log_dir=Path("/tmp/hotagg-bench-logs")
        )
        with proc:
            device_config = b""
            if target == "bmv2":
                subprocess.run(["make", "-C", str(REPO_ROOT), "build"], check=True)
                device_config = (REPO_ROOT / "build" / "hotagg.json").read_bytes()
            install = _configure_switch(proc.grpc_addr, device_config)
            results = {"p4runtime_install": install}
            seq_base = 0
            for name, hot, out_port in (("push_hot", True, 1), ("push_cold", False, 2)):
                stream = PushStream(hot)
                stream.sent = seq_base  # continue the seqs of the previous case
                rate = blast(net, stream, net.switch_ifaces[out_port], seconds)
                seq_base = stream.sent
                results[name] = {
                    "packets_per_s": round(rate.pps, 1),
                    "entries_per_s": round(rate.pps * MAX_ENTRIES, 1),
                    "offered_packets_per_s": round(rate.offered_pps, 1),
                    "measured_seconds": round(rate.seconds, 2),
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
