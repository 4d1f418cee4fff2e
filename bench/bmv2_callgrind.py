"""BMv2's instructions per packet for hot and cold 8-entry pushes, counted by callgrind.

Packets per second move with whatever else runs on the machine; the instructions BMv2
executes per packet do not, so this compares two P4 programs (or two BMv2 builds) on a
busy machine. BMv2 runs under valgrind with instrumentation off while it starts and the
pipeline is set; then, per case, a burst warms it up (so its packet and PHV pools stop
growing), counters are zeroed, `--packets` frames are sent slowly enough that none queue,
and the instructions of all of BMv2's threads are divided by the frames it sent out.

Usage (as root, valgrind on PATH):
  python -m bench.bmv2_callgrind [--bmv2-binary B] [--bmv2-json J] [--packets N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.switch_bench import (
    CASES,
    PushStream,
    _configure_switch,
    bmv2_device_config,
    settle,
    sketch_on,
    tx_packets,
)
from topologies.netns import VethNet
from topologies.switches import DEFAULT_BMV2_BINARY, SwitchProcess, bmv2_missing
from topologies.targets import Bmv2Target


@dataclass
class CallgrindSwitch(SwitchProcess):
    """simple_switch_grpc under callgrind, instrumentation off until asked."""

    out_dir: Path = Path("/tmp")

    def argv(self) -> list[str]:
        valgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no"]
        return [*valgrind, f"--callgrind-out-file={self.out_dir}/callgrind.out.%p", *super().argv()]


def callgrind_control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, capture_output=True)


def count(pid: int, out_dir: Path, send, out_ifname: str, packets: int, gap: float) -> dict:
    """Instructions BMv2 executes while `packets` frames from `send()` go through it."""
    for _ in range(300):  # warm-up burst: pools grow now, not while counting
        send()
    settle(out_ifname, quiet=2.0)
    callgrind_control("--zero", str(pid))
    callgrind_control("--instr=on", str(pid))
    tx0 = tx_packets(out_ifname)
    for _ in range(packets):
        send()
        time.sleep(gap)
    out = settle(out_ifname, quiet=2.0) - tx0
    callgrind_control("--instr=off", str(pid))
    for old in out_dir.glob(f"callgrind.out.{pid}*"):
        old.unlink()
    callgrind_control("--dump", str(pid))
    deadline = time.monotonic() + 30
    dumps: list[Path] = []
    while not dumps and time.monotonic() < deadline:
        time.sleep(0.5)
        dumps = list(out_dir.glob(f"callgrind.out.{pid}*"))
    time.sleep(1.0)
    total = 0
    for dump in dumps:
        match = re.search(r"^totals:\s*(\d+)", dump.read_text(errors="replace"), re.M)
        total += int(match[1]) if match else 0
    return {
        "packets_out": out,
        "instructions": total,
        "instructions_per_packet": round(total / out) if out else None,
    }


def measure(binary: str, bmv2_json: Path | None, packets: int, gap: float) -> dict:
    device_config = bmv2_device_config(bmv2_json)
    result: dict = {"binary": binary, "packets": packets}
    with (
        tempfile.TemporaryDirectory(prefix="hotagg-callgrind-") as tmp,
        VethNet(f"hacg{os.getpid() % 100000}", 2) as net,
    ):
        proc = CallgrindSwitch(
            "callgrind",
            dict(net.switch_ifaces),
            target=Bmv2Target(binary),
            log_dir=Path(tmp),
            out_dir=Path(tmp),
        )
        proc.launch().wait_ready(timeout=180)
        try:
            assert proc.proc is not None
            _configure_switch(proc.grpc_addr, device_config)
            sock = net.host_socket(1)
            seq = 0
            for name, hot, out_port, sketch in CASES:
                if sketch:
                    sketch_on(proc.grpc_addr)
                stream = PushStream(hot)
                stream.sent = seq

                def send(stream=stream) -> None:
                    sock.send(stream.next())

                out_ifname = net.switch_ifaces[out_port]
                result[name] = count(proc.proc.pid, Path(tmp), send, out_ifname, packets, gap)
                seq = stream.sent
            sock.close()
        finally:
            proc.stop(timeout=30)
    return result


def unavailable(binary: str) -> str | None:
    """Why callgrind cannot count `binary`'s instructions here, or None."""
    missing = [t for t in ("valgrind", "callgrind_control") if shutil.which(t) is None]
    if missing:
        return f"{', '.join(missing)} not on PATH"
    return bmv2_missing(binary)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bmv2-binary", default=f"{DEFAULT_BMV2_BINARY}-perf")
    parser.add_argument("--bmv2-json", type=Path, default=None, help="default: p4src/ compiled")
    parser.add_argument("--packets", type=int, default=60)
    parser.add_argument("--gap", type=float, default=0.05, help="seconds between frames")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bmv2_callgrind: needs root (veth pairs and raw sockets)", file=sys.stderr)
        return 1
    if why := unavailable(args.bmv2_binary):
        print(f"bmv2_callgrind: {why}", file=sys.stderr)
        return 1
    result = measure(args.bmv2_binary, args.bmv2_json, args.packets, args.gap)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for case, *_ in CASES:
            r = result[case]
            print(f"{case}: {r['instructions_per_packet']} instructions/packet "
                  f"({r['packets_out']} packets out)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
