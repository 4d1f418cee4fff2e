"""A host that floods a worker with forged replies, for tests/test_forged_replies.py.

Run inside a Mininet host: `python -m tests.reply_forger --iface h4-eth0 ...`. It writes
whole Ethernet frames on a packet socket, so it can put any IPv4 source address on them: the
PS's (a spoofer) and its own, in turn. Every (iteration, seq) a worker of a short run may
have in flight gets a PUSH_ACK (mask 0xFF: "the switch summed all of it"), a PULL_REPLY and
a DONE_ACK, round after round, at a bounded rate, until SIGTERM; then it prints how many
frames it sent, as JSON.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import time
from collections.abc import Iterator

from contract.codec import Message, encode_frame, encode_message
from contract.constants import HOTAGG_PORT, Op


def forged_replies(job: int, worker: int, iterations: int, max_seq: int) -> Iterator[bytes]:
    """One round: a DONE_ACK for every iteration (its seq is a shard, 0 here), then every
    seq with every iteration, low seqs (early in the run) first."""
    for t in range(1, iterations + 1):
        yield encode_message(Message(Op.DONE_ACK, 0, job, worker, 0, t, 0, (1, 2, 3), (0, 0, 0)))
    for seq in range(1, max_seq + 1):
        for t in range(1, iterations + 1):
            yield encode_message(Message(Op.PUSH_ACK, 0, job, worker, seq, t, 0xFF))
            yield encode_message(Message(Op.PULL_REPLY, 0, job, worker, seq, t, 0xFF, (seq,), (7,)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iface", required=True, help="the host's interface")
    p.add_argument("--mac", required=True, help="the host's MAC")
    p.add_argument("--sources", required=True, help="IPv4 source addresses to use, a,b,...")
    p.add_argument("--to", required=True, help="the worker's ip:port")
    p.add_argument("--job", type=int, required=True)
    p.add_argument("--worker-id", type=int, required=True)
    p.add_argument("--iterations", type=int, required=True)
    p.add_argument("--max-seq", type=int, default=150)
    p.add_argument("--rate", type=float, default=3000.0, help="frames per second")
    args = p.parse_args(argv)
    to_ip, to_port = args.to.rsplit(":", 1)
    sources = args.sources.split(",")
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    sock.bind((args.iface, 0))
    stop = False

    def on_term(_signum: int, _frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    sent = dict.fromkeys(sources, 0)
    start = time.monotonic()
    while not stop:
        for payload in forged_replies(args.job, args.worker_id, args.iterations, args.max_seq):
            for src in sources:
                frame = encode_frame(
                    payload, src_mac=args.mac, dst_mac="02:00:00:00:00:fe", src_ip=src,
                    dst_ip=to_ip, sport=HOTAGG_PORT, dport=int(to_port),
                )  # fmt: skip
                sock.send(frame)
                sent[src] += 1
            wait = start + sum(sent.values()) / args.rate - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            if stop:
                break
    print(json.dumps({"sent": sent}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
