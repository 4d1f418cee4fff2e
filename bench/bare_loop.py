"""The ceiling for the embedded switch: the same raw-socket packet loop with no pipeline.

It runs softswitch.runtime.Runtime, the embedded switch's own loop, with a "pipeline" that
sends every frame out of the other port, so the ratio to the switch isolates the cost of
the P4 pipeline in Python.
"""

from __future__ import annotations

import argparse
import signal
import threading

from softswitch.__main__ import port_interface
from softswitch.runtime import Runtime


class CrossConnect:
    """Port 1 <-> port 2, nothing else."""

    def process(self, port: int, frame: bytes) -> list[tuple[int, bytes]]:
        return [(3 - port, frame)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-i", dest="interfaces", action="append", type=port_interface, default=[])
    args = parser.parse_args(argv)
    runtime = Runtime(CrossConnect(), dict(args.interfaces))
    runtime.open()
    runtime.start()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print("bare loop: ready", flush=True)
    stop.wait()
    runtime.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
