"""Differential test: the embedded target and BMv2 emit the same bytes for the same frames.

Both targets run at once, each on a veth set of its own (conftest.running_switch), and get
the same controller writes over P4Runtime. Then both receive the same long seeded sequence of
frames (`FrameGen`: valid and invalid hotagg traffic, other traffic). After every frame a
marker goes from the frame's ingress port to every port. A switch keeps the order from one
ingress port to one egress port (and a burst of frames shares one ingress port, so the
switch also processes them in the order sent), so each port's output splits exactly into
what each frame caused there: per frame and port the bytes must agree. At the end every cell
of the stats counter and the direct counter of every hot-key table entry must agree as well,
and so must every cell of the cold-key sketch's counters and the sketch's digests (member
bytes, in order; list boundaries are timing and are not compared).

Left out, because the targets cannot agree on them by construction:
- drop rates strictly between 0 and 1: BMv2's v1model random() draws from a
  std::default_random_engine seeded with a hash of the thread id (behavioral-model
  targets/simple_switch/primitives.cpp, modify_field_rng_uniform), which the embedded target
  cannot reproduce; rates 0 and 1 are deterministic and both are used;
- frames of one burst from several ingress ports: which port a switch reads first is timing,
  and the registers make the outputs depend on that order. Bursts never mix ingress ports;
- frames shorter than 14 bytes: the kernel refuses to send them into a veth at all.

Aggregation at every leaf (docs/design.md section 7): FLUSHes, partial PUSHes (FROM_SWITCH,
from h4 as a remote leaf's pseudo-worker) and chained WRITEBACKs, and PS ops addressed to the
service address or elsewhere, while the service address and chain_next change (`WRITES`):
unset, set to an unrouted address, to h1's, cleared. A FLUSH of the current iteration makes
the pushes of it that follow SLOT_FLUSHED.

Tenancy: the controller admits some (job, worker, port, address) and (job, PS, port, address)
tuples and not others (`admit_initial`), the frames (requests, and replies to workers and to
the PS) come from admitted and non-admitted (port, source address) pairs (a worker's port
with its own address, another host's port, a spoofed address), and the admissions change
mid-run (`WRITES`), including both tables' default turned to admit and back.

Consistency modes (docs/design.md section 8): pushes of iterations t - 1 .. t + 2 and
COLLECTs and FLUSHes of t - 1, t and others (empty ones too) move the per-job
`collected_iter` back and forth, so pushes are refused as SLOT_BUSY as well as claimed.

TTL: some frames of every kind (requests, replies, plain UDP, frames to the CPU) carry TTL 0,
1 or 2, so both the check before processing (step 5c) and the one at routing (step 7) run.

HOTAGG_DIFF_SEED picks another sequence and HOTAGG_DIFF_FRAMES its length, e.g.
`HOTAGG_DIFF_SEED=7 HOTAGG_DIFF_FRAMES=5000 pytest tests/test_differential.py`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import select
import socket
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from p4.v1 import p4runtime_pb2
from scapy.layers.l2 import Ether

from contract.codec import ipv4_checksum
from contract.constants import (
    CPU_PORT,
    FLAG_CHAIN,
    FLAG_FROM_SWITCH,
    FLAG_INVALIDATE,
    FLAG_RETRANSMIT,
    HOTAGG_PORT,
    INT32_MAX,
    INT32_MIN,
    KEY_MAX,
    MAX_ENTRIES,
    MAX_WORKERS,
    NUM_SLOTS,
    Op,
)
from contract.frames import CLIENT_SPORT
from contract.layers import Hotagg
from contract.names import SKETCH_ROW_COUNTERS, hot_keys_table
from controller.leaves import ChainNext, ServiceAddress
from controller.p4info import encode as encode_value
from controller.sketch import Sketch
from controller.stats import Stats
from tests.conftest import TEST_JOBS, SwitchUnderTest, running_switch
from tests.packet_harness import N_PORTS, frame, host_ip, host_mac, plain_udp

# Both targets at once, and thousands of frames with a marker round after each: slow.
pytestmark = [pytest.mark.root, pytest.mark.bmv2, pytest.mark.slow]

SEED = int(os.environ.get("HOTAGG_DIFF_SEED", "20261201"))
N_FRAMES = int(os.environ.get("HOTAGG_DIFF_FRAMES", "3000"))
VLAN_FRAMES = 400
TARGETS = ("embedded", "bmv2")
PORTS = range(1, N_PORTS + 1)
W1, W2, PS, W4 = 1, 2, 3, 4  # host numbers = switch ports, as in test_packets.py
JOB, OTHER_JOB = 1, 2
SLOTS = TEST_JOBS[JOB]
BURST = 10  # frames sent back to back from one ingress port before waiting for the markers
MARKER = b"hamk"
MARKER_SPORT = 7  # tests.packet_harness.MARKER_SPORT; generated UDP never uses it
UNROUTED = 9  # host number of an address without a route: 10.0.0.9
CPU_NET = bytes([10, 0, 1])  # 10.0.1.0/24 is routed to the CPU port (send_to_cpu)

# Jobs written as raw table entries, past what the controller would allocate: job -> (job_index,
# slot_base, slot_count). Job 3's index shares dedup cells with job 1's (index & 15); its
# slots end at NUM_SLOTS, its slot_count does not; job 4's slot_base is out of range.
RAW_JOBS = {3: (17, NUM_SLOTS - 8, 2**32 - 1), 4: (255, 2**32 - 1, 5)}

# Hot keys at explicit slot offsets. 116 and 117 share offset 20 (slot conflicts); the
# offsets of 118, 119, 121 and 122 lie outside their job's range (BAD_SLOT).
HOT = {
    JOB: {**{100 + i: i for i in range(16)}, 116: 20, 117: 20, 118: SLOTS, 119: 2**32 - 1},
    OTHER_JOB: {**{100 + i: i for i in range(8)}, 120: SLOTS - 1, 121: SLOTS, 122: 70},
    3: {100: 7, 101: 8, 102: 2**32 - 1, 103: 0, 104: 2**32 - 8},
    4: {100: 0, 101: 4},
}
COLD = list(range(1000, 1012))
# Shorter prefixes: 10.0.2.0/23 goes to port 2, but 10.0.3.128/25 in it is dropped.
ROUTES = (((10, 0, 2, 0), 23, "ipv4_forward", 2), ((10, 0, 3, 128), 25, "drop", 0))


def move_hot_keys(sut: SwitchUnderTest) -> None:
    """101 takes the slot that 100 aggregated into: slot tags must refuse it in the same
    iteration (SLOT_CONFLICT)."""
    sut.evict(JOB, [100, 101, 116])
    sut.hot(JOB, {100: 30, 101: 0, 116: 21})


def serve_unknown_jobs(sut: SwitchUnderTest) -> None:
    """The jobs table's default action becomes set_job: unknown job ids get job index 5."""
    params = {"job_index": 5, "slot_base": 200, "slot_count": 16}
    entry = sut.p4info.default_entry("HotaggIngress.jobs", "HotaggIngress.set_job", params)
    sut.client.write_entries("modify", [entry])


# port -> job, worker ids: ids across 0..MAX_WORKERS - 1, some sharing their low 6 bits (0,
# 64, 128 on port 1) so that a dedup cell that dropped a worker bit would be shared.
WORKERS = {
    W1: (JOB, (0, 2, 64, 128)),
    W2: (JOB, (1, 3, MAX_WORKERS - 1)),
    W4: (OTHER_JOB, (0, 1, 193)),
}

# Aggregation at every leaf: the service address the switch takes (10.0.0.254, unrouted), and
# the pseudo-worker id under which h4 sends partial PUSHes of job 1 (a remote leaf's).
SERVICE = 254
PSEUDO = 200


def leaves(service: int | None, chain: int | None):
    """Set (or clear, None) the service address and chain_next to those hosts' addresses."""

    def write(sut: SwitchUnderTest) -> None:
        ServiceAddress(sut.client, sut.p4info).set(host_ip(service) if service else 0)
        ChainNext(sut.client, sut.p4info).set(host_ip(chain) if chain else 0)

    return write


# Admissions besides conftest.TEST_ADMISSIONS (job 1's workers 0 and 1 on ports 1 and 2, job
# 2's worker 0 on port 4, h3 both jobs' PS): (job, worker id or None for the PS, port, host).
# Job 1's workers 3 (port 2) and 128 (port 1) and job 2's worker 1 (port 4) start without one.
ADMISSIONS = (
    (JOB, 2, W1, W1),
    (JOB, 64, W1, W1),
    (JOB, MAX_WORKERS - 1, W2, W2),
    (OTHER_JOB, 193, W4, W4),
    (3, 0, W1, W1),
    (3, None, PS, PS),
    (4, 1, W2, W2),
    (JOB, PSEUDO, W4, W4),
)
ADMISSION_TABLES = ("HotaggIngress.worker_admission", "HotaggIngress.ps_admission")


def admit_initial(sut: SwitchUnderTest) -> None:
    """The ADMISSIONS, as raw entries (jobs 3 and 4 are raw too, past what the controller
    allocates)."""
    for job, worker, port, host in ADMISSIONS:
        sut.admit(job, worker, port, host)


def move_admissions(sut: SwitchUnderTest) -> None:
    """Mid-run: job 1's workers 3 and 128 are admitted on ports 2 and 1, worker 2 loses
    port 1, job 2's PS moves from h3 to h4's port with h3's address."""
    sut.admit(JOB, 3, W2)
    sut.admit(JOB, 128, W1)
    sut.revoke(JOB, 2, W1)
    sut.revoke(OTHER_JOB, None, PS)
    sut.admit(OTHER_JOB, None, W4, host=PS)


def admission_default(action: str):
    """Both admission tables' default action: admit turns tenancy off, refuse back on."""

    def write(sut: SwitchUnderTest) -> None:
        entries = [sut.p4info.default_entry(t, f"HotaggIngress.{action}") for t in ADMISSION_TABLES]
        sut.client.write_entries("modify", entries)

    return write


# The cold-key sketch: on from the start (epoch 1), a new epoch and threshold, off, on again.
SKETCH_THRESHOLD = 3


def sketch(sut: SwitchUnderTest, epoch: int, threshold: int = SKETCH_THRESHOLD) -> None:
    Sketch(sut.client, sut.p4info).start_epoch(epoch, threshold)


# Controller writes during the sequence, to both targets before the frame at that fraction
# of it. A drop rate of 1 (65536/65536) drops every hotagg packet on both, deterministically.
WRITES = (
    (0.1, leaves(SERVICE, W1)),
    (0.2, leaves(SERVICE, None)),
    (0.3, lambda sut: sketch(sut, 2, 2)),
    (0.35, move_admissions),
    (0.4, lambda sut: sketch(sut, 2, 0)),
    (0.45, lambda sut: sketch(sut, 3)),
    (0.5, move_hot_keys),
    (0.6, lambda sut: sut.drop_rate(1.0)),
    (0.63, lambda sut: sut.drop_rate(0.0)),
    (0.66, leaves(None, SERVICE)),
    (0.75, leaves(PS, W1)),
    (0.7, serve_unknown_jobs),
    (0.8, admission_default("admit")),
    (0.9, admission_default("refuse")),
)

# --- the frame sequence ------------------------------------------------------------------


@dataclass
class Frame:
    index: int
    port: int  # ingress port; CPU_PORT for a PacketOut
    data: bytes
    kind: str
    egress: int | None = None  # a PacketOut's packet_out.egress_port


def patch(data: bytes, offset: int, new: bytes) -> bytes:
    return data[:offset] + new + data[offset + len(new) :]


def ip_checksum(data: bytes) -> bytes:
    """`data` with the checksum of its IPv4 header (at byte 14, IHL from the header) redone."""
    header = patch(data, 24, b"\0\0")[14 : 14 + (data[14] & 0x0F) * 4]
    return patch(data, 24, struct.pack("!H", ipv4_checksum(header)))


@dataclass
class FrameGen:
    """A seeded random sequence of frames, in bursts that share an ingress port."""

    rng: random.Random
    iteration: int = 1
    seqs: dict[tuple[int, int], int] = field(default_factory=dict)
    sent_pushes: dict[int, list[bytes]] = field(default_factory=dict)
    frames: list[Frame] = field(default_factory=list)

    def value(self) -> int:
        r = self.rng.random()
        if r < 0.6:
            return self.rng.randint(-1000, 1000)
        if r < 0.8:
            return INT32_MAX - self.rng.randint(0, 1000)
        if r < 0.95:
            return INT32_MIN + self.rng.randint(0, 1000)
        return self.rng.randint(INT32_MIN, INT32_MAX)

    def key(self, job: int) -> int:
        r = self.rng.random()
        if job in RAW_JOBS and r < 0.6:
            return self.rng.choice(list(HOT[job]))
        if r < 0.45:
            return self.rng.choice(list(HOT[job])[:16])
        if r < 0.55:
            return self.rng.choice((116, 117))
        if r < 0.6:
            return self.rng.choice((118, 119, 120, 121, 122))
        if r < 0.9:
            return self.rng.choice(COLD)
        return self.rng.choice((0, KEY_MAX, self.rng.getrandbits(64)))

    def iteration_near(self) -> int:
        r = self.rng.random()
        t = self.iteration
        if r < 0.7:
            return t
        if r < 0.85:
            return max(t - 1, 0)
        if r < 0.9:
            return t + 1
        if r < 0.95:
            return t + 2
        return self.rng.choice((0, 2**31, 2**32 - 1))

    def entries(self, job: int, n: int | None = None) -> list[tuple[int, int]]:
        n = self.rng.choice((0, 1, 2, 3, 4, 5, 6, 7, 8, 8)) if n is None else n
        return [(self.key(job), self.value()) for _ in range(n)]

    def header_noise(self) -> dict[str, int]:
        """Header fields a request should carry as 0 (or that the switch ignores)."""
        if self.rng.random() < 0.1:
            return {
                "flags": self.rng.choice((FLAG_RETRANSMIT, self.rng.getrandbits(8))),
                "mask": self.rng.getrandbits(8),
                "cached": self.rng.getrandbits(8),
                "aux": self.rng.getrandbits(16),
            }
        return {}

    def dst(self, usual: int) -> int:
        r = self.rng.random()
        if r < 0.9:
            return usual
        if r < 0.97:
            return self.rng.choice(PORTS)
        return UNROUTED

    # valid traffic

    def job(self, usual: int) -> int:
        return usual if self.rng.random() < 0.9 else self.rng.choice(list(RAW_JOBS))

    def push(self, port: int) -> tuple[bytes, str]:
        job, workers = WORKERS.get(port, (JOB, (0, 1, 2, 3)))
        job = self.job(job)
        worker = self.rng.choice(workers)
        history = self.sent_pushes.setdefault(port, [])
        last = self.seqs.get((job, worker), 0)
        r = self.rng.random()
        kind = "push"
        if r < 0.08 and history:
            return self.rng.choice(history[-30:]), "push duplicate (byte for byte)"
        if r < 0.75:
            seq = last + 1
        elif r < 0.82 and last > 64:
            seq, kind = last - 64 * self.rng.randint(1, last // 64), "push stale seq"
        elif r < 0.84:
            seq, kind = 0, "push seq 0"
        elif r < 0.9 and last > 1:
            seq, kind = last - self.rng.randint(1, min(last - 1, 63)), "push old seq, new body"
        elif r < 0.95:
            seq, kind = last + self.rng.randint(2, 100), "push seq jump"
        else:
            seq = last + 1
            worker = self.rng.choice((MAX_WORKERS, MAX_WORKERS + 64, 65535))
            kind = "push worker >= MAX_WORKERS"
        if kind in ("push", "push seq jump"):
            self.seqs[(job, worker)] = max(last, seq)
        data = frame(
            port if port != PS else W1,
            self.dst(PS),
            Op.PUSH,
            self.entries(job),
            seq=seq,
            iteration=self.iteration_near(),
            job_id=job,
            worker_id=worker,
            **self.header_noise(),
        )
        history.append(data)
        return data, kind

    def worker_of(self, port: int) -> int:
        """A worker id the port's host has (or had, or will have) an admission for."""
        return self.rng.choice(WORKERS.get(port, (JOB, (0, 1, 2, 3)))[1])

    def pull(self, port: int) -> tuple[bytes, str]:
        job = self.job(WORKERS.get(port, (JOB,))[0])
        keys = [(k, self.rng.choice((0, 0, 0, self.value()))) for k, _ in self.entries(job)]
        if self.rng.random() < 0.4:  # few hot keys: a chance that all are cached (a hit)
            hot = list(HOT[job])[:16]
            keys = [(k, 0) for k in self.rng.sample(hot, self.rng.randint(1, min(3, len(hot))))]
        data = frame(
            port,
            self.dst(PS),
            Op.PULL,
            keys,
            seq=self.rng.randint(0, 50),
            iteration=self.iteration_near(),
            job_id=job,
            worker_id=self.worker_of(port),
            **self.header_noise(),
        )
        return data, "pull"

    def ps_op_dst(self) -> int:
        """Where the PS addresses a COLLECT, WRITEBACK or FLUSH: the service address the
        switch has (or had, or will have), or another host."""
        return SERVICE if self.rng.random() < 0.4 else self.dst(self.rng.choice((W1, PS)))

    def writeback(self, port: int) -> tuple[bytes, str]:
        job = self.job(self.rng.choice((JOB, JOB, OTHER_JOB)))
        it = self.rng.choice((self.iteration, self.iteration + 1, self.iteration_near()))
        chained = self.rng.random() < 0.3
        data = frame(
            port,
            self.ps_op_dst(),
            Op.WRITEBACK,
            self.entries(job),
            seq=self.rng.randint(1, 50),
            iteration=it,
            job_id=job,
            **{**self.header_noise(), **({"flags": FLAG_CHAIN} if chained else {})},
        )
        return data, "writeback chained" if chained else "writeback"

    def flush(self, port: int) -> tuple[bytes, str]:
        """A FLUSH of one batch of the job's slots (or past them); now and then with entries,
        seq 0 or a worker id the switch refuses."""
        job = self.job(self.rng.choice((JOB, JOB, OTHER_JOB)))
        r = self.rng.random()
        batch = self.rng.randrange(SLOTS // MAX_ENTRIES + 1) if r < 0.85 else self.rng.choice(
            (SLOTS // MAX_ENTRIES, 0xFFFF, self.rng.getrandbits(16)))  # fmt: skip
        r = self.rng.random()
        entries, seq, worker, kind = [], self.rng.randint(1, 1000), PSEUDO, "flush"
        if r < 0.05:
            entries, kind = self.entries(job, 1), "flush with an entry"
        elif r < 0.08:
            seq, kind = 0, "flush seq 0"
        elif r < 0.11:
            worker = self.rng.choice((MAX_WORKERS, 65535))
            kind = "flush worker >= MAX_WORKERS"
        data = frame(
            port,
            self.ps_op_dst(),
            Op.FLUSH,
            entries,
            sport=self.rng.choice((HOTAGG_PORT, HOTAGG_PORT, 40003)),
            seq=seq,
            iteration=self.rng.choice((self.iteration, self.iteration - 1, self.iteration_near())),
            job_id=job,
            worker_id=worker,
            aux=batch,
            flags=self.rng.choice((0, 0, FLAG_RETRANSMIT, self.rng.getrandbits(8))),
            mask=self.rng.choice((0, 0, self.rng.getrandbits(8))),
        )
        return data, kind

    def partial(self, port: int) -> tuple[bytes, str]:
        """A partial PUSH (FROM_SWITCH) of job 1's pseudo-worker, as a remote leaf sends it:
        fresh, duplicated, or with a seq the dedup window refuses."""
        history = self.sent_pushes.setdefault(-port, [])
        last = self.seqs.get((JOB, PSEUDO), 0)
        r = self.rng.random()
        if r < 0.15 and history:
            return self.rng.choice(history[-20:]), "partial push duplicate (byte for byte)"
        seq, kind = last + 1, "partial push"
        if r < 0.2 and last > 64:
            seq, kind = last - 64, "partial push stale seq"
        else:
            self.seqs[(JOB, PSEUDO)] = seq
        n = self.rng.choice((0, 0, 1, 2, 4, 8))
        hot = list(HOT[JOB])[:16]
        entries = [(self.rng.choice(hot) if self.rng.random() < 0.85 else self.key(JOB),
                    self.value()) for _ in range(n)]  # fmt: skip
        data = frame(
            port,
            self.dst(PS),
            Op.PUSH,
            entries,
            sport=HOTAGG_PORT,
            seq=seq,
            iteration=self.iteration_near(),
            job_id=JOB,
            worker_id=PSEUDO,
            flags=FLAG_FROM_SWITCH | self.rng.choice((0, 0, FLAG_RETRANSMIT)),
            aux=self.rng.getrandbits(16),
        )
        history.append(data)
        return data, kind

    def collect(self, port: int) -> tuple[bytes, str]:
        job = self.job(self.rng.choice((JOB, JOB, OTHER_JOB)))
        at = {off: k for k, off in HOT[job].items()}
        entries = []
        for _ in range(self.rng.choice((1, 2, 4, 8, 8, 8, 0))):
            if self.rng.random() < 0.85:
                off = self.rng.randrange(SLOTS)
            else:
                off = self.rng.choice((SLOTS, SLOTS + 1, 100, 2**31, 2**32 - 1))
            key = at.get(off, 0) if self.rng.random() < 0.7 else self.key(job)
            entries.append((key, off - 2**32 if off >= 2**31 else off))  # value is signed
        flags = self.rng.choice((0, 0, FLAG_INVALIDATE, FLAG_RETRANSMIT))
        mask = self.rng.choice((0, 0xFF, self.rng.getrandbits(8)))
        kind = "collect" + (" invalidate" if flags else "") + (" refresh" if mask else "")
        data = frame(
            port,
            self.ps_op_dst(),
            Op.COLLECT,
            entries,
            seq=self.rng.randint(1, 50),
            iteration=self.rng.choice((self.iteration, self.iteration - 1, self.iteration_near())),
            job_id=job,
            flags=flags,
            mask=mask,
        )
        return data, kind

    def passing(self, port: int) -> tuple[bytes, str]:
        op = self.rng.choice((Op.PUSH_ACK, Op.PULL_REPLY, Op.DONE, Op.DONE_ACK))
        op = self.rng.choice((op, Op.COLLECT_REPLY, Op.WRITEBACK_ACK))
        job = self.rng.choice((JOB, OTHER_JOB))
        data = frame(
            port,
            self.dst(self.rng.choice(PORTS)),
            op,
            self.entries(job),
            seq=self.rng.randint(0, 100),
            iteration=self.iteration_near(),
            job_id=job,
            worker_id=self.worker_of(port),
            **self.header_noise(),
        )
        return data, f"pass {op.name}"

    def reply(self, port: int) -> tuple[bytes, str]:
        """A reply (source port 18497) to a worker or the PS, from this port's host or with
        the PS's address: the ones a worker takes pass only from where the job's PS is."""
        op = self.rng.choice(
            (Op.PUSH_ACK, Op.PULL_REPLY, Op.DONE_ACK, Op.COLLECT_REPLY, Op.WRITEBACK_ACK)
        )
        job = self.job(self.rng.choice((JOB, OTHER_JOB)))
        src = self.rng.choice((port, PS))
        dst = self.dst(self.rng.choice((W1, W2, W4)))
        data = frame(
            src,
            dst,
            op,
            self.entries(job),
            sport=HOTAGG_PORT,
            dport=CLIENT_SPORT + dst,
            seq=self.rng.randint(0, 100),
            iteration=self.iteration_near(),
            job_id=job,
            worker_id=self.worker_of(dst),
            flags=self.rng.choice((0, 0, FLAG_FROM_SWITCH)),
            mask=self.rng.getrandbits(8),
        )
        return data, f"reply {op.name} as host {src}"

    # invalid and other traffic, mostly a valid frame changed

    def invalid(self, port: int) -> tuple[bytes, str]:
        makers = (self.push, self.pull, self.collect, self.writeback, self.flush, self.partial,
                  self.reply)  # fmt: skip
        base, _ = self.rng.choice(makers)(port)
        n = len(base)
        case = self.rng.choice(
            (
                "unknown op",
                "unknown job",
                "wrong version",
                "udp length mismatch",
                "count > 8",
                "count mismatch",
                "truncated",
                "truncated",
                "non-IPv4",
                "IPv4 options",
                "IPv4 not UDP",
                "non-hotagg UDP",
                "reply (sport 18497)",
                "unrouted",
                "routed by a shorter prefix (or dropped by one)",
                "ttl edge",
                "bad IPv4 checksum",
                "trailing bytes",
                "count and udp length say fewer entries than carried",
                "sport and dport 18497",
                "IPv4 total length wrong",
                "IPv4 fragment",
                "IPv4 version not 4 or IHL < 5",
                "to the CPU (send_to_cpu route)",
            )
        )
        rng = self.rng
        if case == "unknown op":
            data = patch(base, 43, bytes([rng.choice((0, 11, 12, 255))]))
        elif case == "unknown job":
            data = patch(base, 46, struct.pack("!H", rng.choice((0, 3, 16, 999, 65535))))
        elif case == "wrong version":
            data = patch(base, 42, bytes([rng.choice((0, 2, 255))]))
        elif case == "udp length mismatch":
            udp_len = struct.unpack_from("!H", base, 38)[0]
            delta = rng.choice((-12, 12, 1, -1, rng.randint(-udp_len, 2000)))
            data = patch(base, 38, struct.pack("!H", (udp_len + delta) & 0xFFFF))
        elif case == "count > 8":
            data = patch(base, 45, bytes([rng.randint(9, 255)]))
        elif case == "count mismatch":
            data = patch(base, 45, bytes([(base[45] + rng.choice((1, -1, 2))) % 9]))
        elif case == "truncated":
            data = base[: rng.randint(14, n - 1)]
        elif case == "non-IPv4":
            data = patch(base, 12, rng.choice((b"\x86\xdd", b"\x08\x06", b"\x88\xcc", b"\x08\x01")))
        elif case == "IPv4 options":
            words = rng.randint(1, 10)
            total = struct.unpack_from("!H", base, 16)[0] + 4 * words
            header = bytes([0x45 + words]) + base[15:16] + struct.pack("!H", total) + base[18:34]
            data = ip_checksum(base[:14] + header + b"\x01" * (4 * words) + base[34:])
        elif case == "IPv4 not UDP":
            data = ip_checksum(patch(base, 23, bytes([rng.choice((6, 1, 253))])))
        elif case == "non-hotagg UDP":
            payload = rng.randbytes(rng.randint(0, 200))
            src, dst = port, self.dst(rng.choice(PORTS))
            data = plain_udp(src, dst, payload, sport=rng.choice((9, 53, 40000, 18496, 18498)))
            data = patch(data, 36, struct.pack("!H", rng.choice((9, 40001, 18496, 18498))))
        elif case == "reply (sport 18497)":
            data = patch(base, 34, struct.pack("!HH", HOTAGG_PORT, rng.choice((40001, 9, 0))))
            data = data[: rng.choice((n, n, rng.randint(42, n)))]
        elif case == "unrouted":
            last = rng.choice((UNROUTED, 0, 255))
            data = ip_checksum(patch(base, 33, bytes([last])))
        elif case == "routed by a shorter prefix (or dropped by one)":
            dst = bytes([10, 0, rng.choice((2, 3, 3)), rng.randint(0, 255)])
            data = ip_checksum(patch(base, 30, dst))
        elif case == "ttl edge":
            data = ip_checksum(patch(base, 22, bytes([rng.choice((0, 1, 2, 255))])))
        elif case == "bad IPv4 checksum":
            data = patch(base, 24, rng.randbytes(2))
        elif case == "trailing bytes":  # after the UDP datagram, as Ethernet padding
            data = base + bytes(rng.choice((rng.randint(1, 40), 1400, 8000)))
        elif case == "count and udp length say fewer entries than carried":
            fewer = rng.randint(0, base[45]) if base[45] else 0
            udp_len = struct.unpack_from("!H", base, 38)[0] - 12 * (base[45] - fewer)
            data = patch(patch(base, 45, bytes([fewer])), 38, struct.pack("!H", udp_len))
        elif case == "sport and dport 18497":
            data = patch(base, 34, struct.pack("!H", HOTAGG_PORT))
        elif case == "IPv4 total length wrong":
            data = ip_checksum(patch(base, 16, struct.pack("!H", rng.getrandbits(16))))
        elif case == "IPv4 fragment":
            data = ip_checksum(patch(base, 20, struct.pack("!H", rng.getrandbits(14))))
        elif case == "to the CPU (send_to_cpu route)":
            data = ip_checksum(patch(base, 30, CPU_NET + bytes([rng.randint(0, 255)])))
        else:  # IPv4 version not 4 or IHL < 5, etherType still IPv4
            first = rng.choice((0x05, 0x65, 0xF5, 0x40, 0x44))
            data = patch(base, 14, bytes([first]))
        return data, case

    def one(self, port: int) -> tuple[bytes, str]:
        makers = (self.push, self.pull, self.passing, self.collect, self.writeback,
                  self.flush, self.partial, self.reply, self.invalid)  # fmt: skip
        # the PS sends PS ops, h4 (job 2's worker) also partial PUSHes as a remote leaf
        weights = {
            PS: (10, 5, 15, 30, 20, 15, 2, 20, 20),
            W4: (40, 15, 5, 5, 5, 3, 25, 8, 20),
        }.get(port, (50, 15, 5, 5, 5, 3, 3, 8, 20))
        data, kind = self.rng.choices(makers, weights)[0](port)
        if self.rng.random() < 0.08 and len(data) >= 34 and data[12:14] == b"\x08\x00":
            # Another host's source address on this port (a spoofer, or a stale admission).
            host = self.rng.choice([h for h in PORTS if h != port])
            data, kind = ip_checksum(patch(data, 26, bytes([10, 0, 0, host]))), kind + ", spoofed"
        if self.rng.random() < 0.04 and len(data) >= 34 and data[12:14] == b"\x08\x00":
            # Any kind of frame (reply, plain UDP, to the CPU) near the end of its TTL.
            ttl = self.rng.choice((0, 1, 1, 2))
            data, kind = ip_checksum(patch(data, 22, bytes([ttl]))), kind + f", TTL {ttl}"
        return data, kind

    def packet_out(self) -> Frame:
        """A PacketOut from the controller: some frame, to some (or no) port."""
        make = self.rng.choice((self.push, self.pull, self.passing, self.invalid))
        data, kind = make(self.rng.choice(PORTS))
        egress = self.rng.choice((*PORTS, CPU_PORT, 0, 7, 511))
        if self.rng.random() < 0.1:
            data = data[: self.rng.randint(0, 20)]
        kind = f"PacketOut to port {egress}: {kind}"
        return Frame(len(self.frames), CPU_PORT, data, kind, egress)

    def generate(self, n: int) -> list[Frame]:
        while len(self.frames) < n:
            if self.rng.random() < 0.03:
                self.frames.append(self.packet_out())
                continue
            port = self.rng.choices(PORTS, weights=(30, 30, 25, 15))[0]
            for _ in range(self.rng.randint(1, BURST)):
                if len(self.frames) >= n:
                    break
                if len(self.frames) % 250 == 249:
                    self.iteration += 1  # t and t+2 share a slot copy (parity reuse)
                data, kind = self.one(port)
                self.frames.append(Frame(len(self.frames), port, data, kind))
        return self.frames


# --- the two switches --------------------------------------------------------------------

SOL_PACKET = 263
PACKET_AUXDATA = 8
TP_STATUS_VLAN_VALID = 0x10
TP_STATUS_VLAN_TPID_VALID = 0x40
AUXDATA = struct.Struct("IIIHHHH")  # struct tpacket_auxdata


@functools.cache
def marker_template(ingress: int, dst: int) -> bytes:
    """A marker from `ingress` to host `dst`, or with dst CPU_PORT to the CPU's subnet."""
    if dst == CPU_PORT:
        return ip_checksum(patch(marker_template(ingress, 1), 30, CPU_NET + b"\xfe"))
    return plain_udp(ingress, dst, MARKER + bytes(4), sport=MARKER_SPORT)


def may_reach_cpu(f: Frame) -> bool:
    """A PacketOut, or an address in CPU_NET (where an untagged or a tagged frame has it)."""
    return f.egress is not None or any(f.data[o : o + 3] == CPU_NET for o in (26, 30, 34))


def marker(ingress: int, dst: int, index: int) -> bytes:
    """The marker sent after frame `index` (UDP checksum 0: only the last bytes change)."""
    return marker_template(ingress, dst)[:-4] + struct.pack("!I", index)


def marker_index(data: bytes) -> int | None:
    """The frame index of a marker the switch forwarded, or None for other frames."""
    if (
        len(data) >= 50
        and data[12:14] == b"\x08\x00"
        and data[14] == 0x45
        and data[23] == 17
        and data[34:36] == struct.pack("!H", MARKER_SPORT)
        and data[42:46] == MARKER
    ):
        return struct.unpack_from("!I", data, 46)[0]
    return None


def summary(data: bytes) -> str:
    try:
        pkt = Ether(data)
        return pkt.summary() + (f"\n        {pkt[Hotagg]!r}" if Hotagg in pkt else "")
    except Exception as e:  # a frame Scapy cannot take apart is still worth showing
        return f"(scapy: {e!r})"


def show(out: bytes | tuple) -> str:
    """A frame, or a PacketIn (metadata, payload), as hex and a Scapy summary."""
    if isinstance(out, tuple):
        meta, payload = out
        return f"PacketIn metadata {[(i, v.hex()) for i, v in meta]}, " + show(payload)
    return f"{out.hex()}\n        {summary(out)}"


class Target:
    """One running switch: sends frames, splits what each port (and the CPU port, through
    PacketIns) receives by marker."""

    def __init__(self, name: str, sut: SwitchUnderTest) -> None:
        self.name = name
        self.sut = sut
        self.socks = sut.ports.socks
        for s in self.socks.values():
            # The kernel hands an 802.1Q tag to packet sockets as auxdata, not in the
            # frame; put it back, so a tagged output is seen as it was sent.
            s.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
        meta = sut.p4info.packet_metadata("packet_out").metadata
        self.egress_id = next(m.id for m in meta if m.name == "egress_port")
        self.restart()

    def restart(self) -> None:
        self.sketch_digests: list[tuple[bytes, ...]] = []
        self.pending: dict[int, list] = {p: [] for p in (*PORTS, CPU_PORT)}
        self.seen: dict[int, int] = {p: -1 for p in (*PORTS, CPU_PORT)}
        self.cpu_marker = -1  # the last marker sent to the CPU
        self.out: dict[int, dict[int, list]] = {}  # frame index -> port -> frames

    def send(self, f: Frame) -> None:
        if f.egress is None:
            self.sut.ports.send(f.port, f.data)
        else:
            self.sut.client.packet_out(f.data, {self.egress_id: encode_value(f.egress, 9)})

    def send_markers(self, f: Frame) -> None:
        ingress = f.port if f.egress is None else W1
        for dst in PORTS:
            self.sut.ports.send(ingress, marker(ingress, dst, f.index))
        if may_reach_cpu(f):
            self.sut.ports.send(ingress, marker(ingress, CPU_PORT, f.index))
            self.cpu_marker = f.index

    def _recv(self, sock: socket.socket) -> bytes | None:
        try:
            data, anc, _, addr = sock.recvmsg(65535, socket.CMSG_SPACE(AUXDATA.size))
        except BlockingIOError:
            return None
        if addr[2] == socket.PACKET_OUTGOING:
            return b""
        for level, kind, cdata in anc:
            if level == SOL_PACKET and kind == PACKET_AUXDATA:
                status, _, _, _, _, tci, tpid = AUXDATA.unpack(cdata[: AUXDATA.size])
                if status & TP_STATUS_VLAN_VALID:
                    tpid = tpid if status & TP_STATUS_VLAN_TPID_VALID else 0x8100
                    data = data[:12] + struct.pack("!HH", tpid, tci) + data[12:]
        return data

    def _got(self, port: int, out: bytes | tuple, data: bytes) -> None:
        i = marker_index(data)
        if i is None:
            self.pending[port].append(out)
            return
        assert i > self.seen[port], f"{self.name}: port {port} markers out of order"
        if self.pending[port]:
            self.out.setdefault(i, {})[port] = self.pending[port]
        self.pending[port] = []
        self.seen[port] = i

    def poll(self, timeout: float) -> None:
        """Take in what the ports and the PacketIn stream have (waiting up to `timeout`)."""
        ready, _, _ = select.select(list(self.socks.values()), [], [], timeout)
        for p in PORTS:
            if self.socks[p] in ready:
                while (data := self._recv(self.socks[p])) is not None:
                    if data:
                        self._got(p, data, data)
        while (pin := self.sut.client.packet_in(timeout=0)) is not None:
            meta = tuple((m.metadata_id, m.value) for m in pin.metadata)
            self._got(CPU_PORT, (meta, pin.payload), pin.payload)

    def late(self, index: int) -> list[int]:
        return [p for p in PORTS if self.seen[p] < index] + (
            [CPU_PORT] if self.seen[CPU_PORT] < self.cpu_marker else []
        )

    def wait(self, index: int, timeout: float = 5.0) -> None:
        """Receive until every port saw the markers of frame `index`."""
        deadline = time.monotonic() + timeout
        while late := self.late(index):
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(
                    f"{self.name}: the markers after frame #{index} did not come back on ports "
                    f"{late} within {timeout} s (overload or a crash? see "
                    f"{self.sut.proc.log_path})"
                )
            self.poll(min(left, 0.005) if CPU_PORT in late else left)

    def wait_packet_out(self, f: Frame, timeout: float = 1.0) -> None:
        """A PacketOut takes another path than the markers: wait for its frame first (a
        PacketOut to no port gets a moment to show up anyway)."""
        deadline = time.monotonic() + (timeout if f.egress in (*PORTS, CPU_PORT) else 0.1)
        while time.monotonic() < deadline and not self.pending.get(f.egress):
            self.poll(0.005)

    def outputs(self, index: int) -> dict[int, list[bytes]]:
        return self.out.get(index, {})

    def stats(self) -> dict[str, tuple[int, int]]:
        return {
            c.name: (c.packets, c.bytes) for c in Stats(self.sut.client, self.sut.p4info).read()
        }

    def sketch_counters(self) -> dict[tuple[str, int], tuple[int, int]]:
        """(counter, index) -> (packets, bytes) of every cell of the sketch's rows."""
        got = {}
        for row in SKETCH_ROW_COUNTERS:
            request = p4runtime_pb2.Entity()
            request.counter_entry.counter_id = self.sut.p4info.counter_id(row)
            for entity in self.sut.client.read([request]):
                ce = entity.counter_entry
                got[(row, ce.index.index)] = (ce.data.packet_count, ce.data.byte_count)
        return got

    def take_digests(self, quiet: float = 0.3) -> list[tuple[bytes, ...]]:
        """Every sketch digest so far (member bytes), waiting until none came for `quiet` s;
        each list is acknowledged."""
        while (lst := self.sut.client.digest_list(timeout=quiet)) is not None:
            for data in lst.data:
                self.sketch_digests.append(tuple(m.bitstring for m in data.struct.members))
            self.sut.client.ack_digest(lst.digest_id, lst.list_id)
        return self.sketch_digests

    def hot_key_counters(self) -> dict[tuple[str, int, int], tuple[int, int]]:
        """(table, job_id, key) -> (packets, bytes) of every hot-key table entry."""
        p4info = self.sut.p4info
        got = {}
        for i in range(MAX_ENTRIES):
            for entry in self.sut.client.read_table(
                p4info.wildcard(hot_keys_table(i), counters=True)
            ):
                e = p4info.decode_entry(entry)
                got[(e.table, e.match["job_id"], e.match["key"])] = (e.packets, e.bytes)
        return got


@pytest.fixture(scope="module")
def targets() -> Iterator[list[Target]]:
    with contextlib.ExitStack() as stack:
        out = []
        for name in TARGETS:
            proc, ports = stack.enter_context(running_switch(name, tag=name[0]))
            sut = SwitchUnderTest(proc, ports)
            stack.callback(sut.close)
            out.append(Target(name, sut))
        yield out


def configure(targets: list[Target]) -> None:
    """The same controller writes to both: fresh pipeline, routes, jobs, hot keys."""
    for t in targets:
        t.sut.reset()
        raw_jobs = [
            t.sut.p4info.table_entry(
                "HotaggIngress.jobs",
                {"job_id": job},
                "HotaggIngress.set_job",
                {"job_index": index, "slot_base": base, "slot_count": count},
            )
            for job, (index, base, count) in RAW_JOBS.items()
        ]
        to_cpu = t.sut.p4info.table_entry(
            "HotaggIngress.ipv4_lpm",
            {"dst_addr": (int.from_bytes(CPU_NET + b"\0", "big"), 24)},
            "HotaggIngress.send_to_cpu",
            {},
        )
        routes = [
            t.sut.p4info.table_entry(
                "HotaggIngress.ipv4_lpm",
                {"dst_addr": (int.from_bytes(bytes(addr), "big"), plen)},
                f"HotaggIngress.{action}",
                {"dst_mac": int(host_mac(port).replace(":", ""), 16), "port": port} if port else {},
            )
            for addr, plen, action, port in ROUTES
        ]
        t.sut.client.write_entries("insert", [*raw_jobs, to_cpu, *routes])
        admit_initial(t.sut)
        for job, offsets in HOT.items():
            t.sut.hot(job, offsets)
        # Reports as they come (no ack cache: each sample is unique per epoch anyway).
        Sketch(t.sut.client, t.sut.p4info).configure(
            1, SKETCH_THRESHOLD, max_list_size=16, max_timeout_ns=1_000_000, ack_timeout_ns=0
        )
        t.restart()
    assert [t.sut.jobs for t in targets[1:]] == [targets[0].sut.jobs]


def drive(targets: list[Target], frames: list[Frame]) -> None:
    """Send every frame to both switches, a burst (one ingress port) at a time, with WRITES
    in between."""
    writes = {int(len(frames) * at): write for at, write in WRITES}
    i = 0
    while i < len(frames):
        if i in writes:
            for t in targets:
                writes[i](t.sut)
        burst = [frames[i]]
        while (
            len(burst) < BURST
            and i + len(burst) < len(frames)
            and frames[i + len(burst)].port == burst[0].port != CPU_PORT  # a PacketOut: alone
            and i + len(burst) not in writes
        ):
            burst.append(frames[i + len(burst)])
        for t in targets:
            for f in burst:
                t.send(f)
                if f.egress is None:
                    t.send_markers(f)
        if burst[0].egress is not None:
            for t in targets:
                t.wait_packet_out(burst[0])
                t.send_markers(burst[0])
        for t in targets:
            t.wait(burst[-1].index)
        i += len(burst)
    # A last marker to the CPU (egress set: may_reach_cpu) for whatever reached it late.
    end = Frame(len(frames), W1, b"", "the end: a marker to the CPU after everything", 0)
    for t in targets:  # whatever reached the CPU after the last marker there
        t.send_markers(end)
        t.wait(end.index)


def differences(targets: list[Target], frames: list[Frame]) -> list[str]:
    a, b = targets
    found = []
    end = Frame(len(frames), W1, b"", "(after the last frame)")
    for f in [*frames, end]:
        got_a, got_b = a.outputs(f.index), b.outputs(f.index)
        if got_a == got_b:
            continue
        how = f"in on port {f.port}" if f.egress is None else f"PacketOut to port {f.egress}"
        lines = [f"frame #{f.index} ({f.kind}) {how}, seed {SEED}:", f"    {show(f.data)}"]
        for p in (*PORTS, CPU_PORT):
            if got_a.get(p, []) == got_b.get(p, []):
                continue
            for t, got in ((a, got_a), (b, got_b)):
                outs = got.get(p, [])
                where = "CPU port (PacketIn)" if p == CPU_PORT else f"port {p}"
                lines.append(f"  {where}, {t.name}: {len(outs)} frame(s)")
                lines += [f"    {show(o)}" for o in outs]
        found.append("\n".join(lines))
    return found


def counter_differences(targets: list[Target]) -> list[str]:
    a, b = targets
    found = []
    getters = (
        ("stats", Target.stats),
        ("hot-key hits", Target.hot_key_counters),
        ("sketch", Target.sketch_counters),
    )
    for what, get in getters:
        got_a, got_b = get(a), get(b)
        for cell in sorted(set(got_a) | set(got_b), key=str):
            if got_a.get(cell) != got_b.get(cell):
                found.append(
                    f"{what} {cell}: {a.name} {got_a.get(cell)} != {b.name} {got_b.get(cell)}"
                    " (packets, bytes)"
                )
    return found


def check(targets: list[Target], frames: list[Frame]) -> None:
    configure(targets)
    drive(targets, frames)
    diffs = differences(targets, frames)
    counters = counter_differences(targets)
    digests = [t.take_digests() for t in targets]
    if digests[0] != digests[1]:
        first = next(
            (i for i, (a, b) in enumerate(zip(*digests)) if a != b), min(map(len, digests))
        )
        counters.append(
            f"sketch digests: {len(digests[0])} and {len(digests[1])}, first difference at "
            f"#{first}: {targets[0].name} {digests[0][first : first + 1]} != "
            f"{targets[1].name} {digests[1][first : first + 1]}"
        )
    report = diffs[:5] + (
        [f"... and {len(diffs) - 5} more frames with other outputs"] if len(diffs) > 5 else []
    )
    report += counters[:20] + (
        [f"... and {len(counters) - 20} more counters"] if len(counters) > 20 else []
    )
    assert not diffs and not counters, (
        f"{len(diffs)} of {len(frames)} frames differ (first shown), {len(counters)} counters:\n"
        + "\n".join(report)
    )


def test_targets_agree_on_a_long_random_sequence(targets):
    frames = FrameGen(random.Random(SEED)).generate(N_FRAMES)
    check(targets, frames)
    if N_FRAMES >= 2000:  # the sequence went through the paths it is meant to compare
        stats = targets[0].stats()
        for name in (
            "MALFORMED",
            "UNKNOWN_OP",
            "UNKNOWN_JOB",
            "BAD_WORKER",
            "SIM_DROP",
            "PUSH_DUP",
            "PUSH_STALE",
            "HOT_APPLIED",
            "COLD_FORWARDED",
            "OVERFLOW",
            "SLOT_CONFLICT",
            "PUSH_SWITCH_ACK",
            "PULL_HIT",
            "PULL_MISS",
            "CACHE_WRITE",
            "NO_ROUTE",
            "BAD_SLOT",
            "PASS",
            "FOREIGN_WORKER",
            "FOREIGN_PS",
            "TTL_EXPIRED",
            "FOREIGN_REPLY",
            "TRANSIT",
            "FLUSH",
            "FLUSH_ABSORBED",
            "CHAIN_FORWARD",
            "SLOT_BUSY",
            "SLOT_FLUSHED",
        ):
            assert stats[name][0] > 0, f"the sequence never caused {name}"
        assert len(targets[0].sketch_digests) > 10, "the sketch reported (almost) nothing"
        epochs = {d[2] for d in targets[0].sketch_digests}
        assert epochs == {b"\x01", b"\x02", b"\x03"}, epochs


def vlan_tagged(data: bytes, rng: random.Random) -> bytes:
    """`data` with an 802.1Q tag (sometimes an 802.1ad one, or a priority tag, VLAN 0)."""
    tpid = rng.choice((0x8100, 0x8100, 0x8100, 0x88A8))
    tci = rng.randint(0, 7) << 13 | rng.choice((0, 1, 10, 4094, rng.randint(1, 4094)))
    return data[:12] + struct.pack("!HH", tpid, tci) + data[12:]


def test_targets_agree_on_vlan_tagged_frames(targets):
    """A tagged frame is not IPv4, so both targets drop it (docs/design.md section 2, step
    2: "Not IPv4: drop (no stat)"; p4src's parser selects IPv4 on etherType 0x0800 only).
    The same mechanism as above on a shorter sequence in which half of the frames carry a
    tag: the untagged half then shows whether a tagged frame changed any state.

    The embedded target reads its ports through AF_PACKET sockets, and the kernel moves a
    received 802.1Q/802.1ad tag out of the frame into PACKET_AUXDATA (veth or not); BMv2
    reads its ports with libpcap (behavioral-model src/BMI/bmi_interface.c, pcap_next_ex),
    which puts the tag back from that auxdata (libpcap pcap-linux.c, "Now insert the tag").
    softswitch/runtime.py puts it back the same way (insert_vlan_tag); without that, the
    embedded target would aggregate tagged frames as plain IPv4 and this test would fail."""
    rng = random.Random(SEED + 1)
    frames = FrameGen(rng).generate(VLAN_FRAMES)
    for f in frames:
        if rng.random() < 0.5:
            f.data, f.kind = vlan_tagged(f.data, rng), f.kind + ", VLAN-tagged"
    check(targets, frames)
