"""`python -m softswitch`: the embedded hotagg switch as a process (options after BMv2's).

    python -m softswitch --name s1 --device-id 0 --grpc-addr 127.0.0.1:50051 \\
        --cpu-port 255 -i 1@veth1 -i 2@veth2 [--log FILE] [--seed N]

Prints one readiness line on stdout once the ports are open and P4Runtime answers, then
serves until SIGINT or SIGTERM. Exit codes: 0 stopped by a signal, 2 bad arguments,
3 a port could not be opened, 4 the gRPC address could not be bound.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from contract.clihelp import HelpParser
from contract.constants import CPU_PORT

EXIT_USAGE = 2
EXIT_PORT = 3
EXIT_GRPC = 4


def port_interface(text: str) -> tuple[int, str]:
    """argparse type for `PORT@IFNAME`."""
    port_s, sep, ifname = text.partition("@")
    if not sep or not ifname or not port_s.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not PORT@INTERFACE, e.g. 1@veth1")
    port = int(port_s)
    if not 0 <= port < 511 or port == CPU_PORT:
        raise argparse.ArgumentTypeError(
            f"port {port} must be in 0..510 and not the CPU port {CPU_PORT}"
        )
    return port, ifname


def grpc_address(text: str) -> str:
    """argparse type for `HOST:PORT` (port 0: any free port)."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT, e.g. 127.0.0.1:50051")
    return text


def cpu_port(text: str) -> int:
    if not text.isdigit() or int(text) != CPU_PORT:
        raise argparse.ArgumentTypeError(
            f"the embedded pipeline's CPU port is {CPU_PORT} (as in p4src/), got {text!r}"
        )
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    p = HelpParser(
        prog="python -m softswitch",
        description="The embedded hotagg switch: raw-socket ports and a P4Runtime server.",
    )
    p.add_argument("--name", default="softswitch", help="switch name used in logs")
    p.add_argument("--device-id", type=int, default=0, help="P4Runtime device id (default 0)")
    p.add_argument(
        "--grpc-addr",
        "--grpc-server-addr",
        dest="grpc_addr",
        type=grpc_address,
        default="127.0.0.1:50051",
        help="P4Runtime listen address (default 127.0.0.1:50051, as hotagg-ctl and the P4 "
        "tutorials expect; port 0 picks a free one)",
    )
    p.add_argument("--cpu-port", type=cpu_port, default=CPU_PORT, help="CPU port (packet-in/out)")
    p.add_argument(
        "-i",
        "--interface",
        dest="interfaces",
        action="append",
        type=port_interface,
        default=[],
        metavar="PORT@IFNAME",
        help="attach interface IFNAME as port PORT (repeatable)",
    )
    p.add_argument("--log", metavar="FILE", help="log to FILE instead of stderr")
    p.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="the least severe log messages kept",
    )
    p.add_argument(
        "--seed",
        type=int,
        help="seed of the drop simulator's random numbers (default: from the system)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    ports = dict(args.interfaces)
    if len(ports) != len(args.interfaces):
        print("error: a port number is given twice", file=sys.stderr)
        return EXIT_USAGE
    logging.basicConfig(
        filename=args.log,
        level=args.log_level,
        format=f"%(asctime)s {args.name} %(levelname)s %(name)s: %(message)s",
    )
    # imported once the arguments are read: gRPC and the server take ~0.2 s `--help` skips
    from softswitch.p4rt import P4RuntimeServer, ServerStartError
    from softswitch.pipeline import Pipeline
    from softswitch.runtime import PortError, Runtime

    pipeline = Pipeline(seed=args.seed)
    server = P4RuntimeServer(
        pipeline, device_id=args.device_id, cpu_port=args.cpu_port, address=args.grpc_addr
    )
    runtime = Runtime(pipeline, ports, cpu_port=args.cpu_port, packet_in=server.packet_in)
    try:
        runtime.open()
    except PortError as e:
        print(f"{args.name}: error: {e}", file=sys.stderr)
        return EXIT_PORT
    try:
        grpc_port = server.start()
    except ServerStartError as e:
        runtime.close()
        print(f"{args.name}: error: {e}", file=sys.stderr)
        return EXIT_GRPC
    server.attach_dataplane(runtime)
    runtime.start()

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    host = args.grpc_addr.rpartition(":")[0]
    intfs = " ".join(f"{p}@{i}" for p, i in sorted(ports.items())) or "(none)"
    print(
        f"{args.name}: ready: P4Runtime on {host}:{grpc_port} device {args.device_id}, "
        f"ports {intfs}, cpu port {args.cpu_port}",
        flush=True,
    )
    while not stop.wait(1.0):
        pass
    server.stop(grace=1.0)
    runtime.stop()
    logging.getLogger(__name__).info(
        "stopped; packet loop %s; p4runtime %s", dict(runtime.stats), dict(server.service.counts)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
