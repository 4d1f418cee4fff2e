"""HotaggIngress.apply: the order of checks of docs/design.md section 2, steps 1-7 (and 5a-5c)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from contract.constants import (
    CPU_PORT,
    ENTRY_LEN,
    FLAG_FROM_SWITCH,
    HEADER_LEN,
    HOTAGG_PORT,
    MAX_ENTRIES,
    MAX_WORKERS,
    SERVICE_TRANSIT,
    VERSION,
    WORKER_REPLY_OPS,
    Op,
    Stat,
)
from softswitch.pipeline.collect import collect
from softswitch.pipeline.forwarding import Output, packet_out, route
from softswitch.pipeline.jobs import SET_JOB
from softswitch.pipeline.leaves import flush, service_address
from softswitch.pipeline.parser import (
    ENTRIES,
    HA,
    HOTAGG,
    IP_DST,
    IP_SRC,
    IP_TTL,
    MIN_IPV4,
    MIN_UDP,
    PROTO_UDP,
    UDP,
    UDP_HDR,
)
from softswitch.pipeline.pull import pull
from softswitch.pipeline.push import push
from softswitch.pipeline.tenancy import admitted
from softswitch.pipeline.writeback import writeback

if TYPE_CHECKING:
    from softswitch.pipeline import Pipeline

MALFORMED = Stat.MALFORMED.value
UNKNOWN_OP = Stat.UNKNOWN_OP.value
UNKNOWN_JOB = Stat.UNKNOWN_JOB.value
SIM_DROP = Stat.SIM_DROP.value
PASS = Stat.PASS.value
FOREIGN_WORKER = Stat.FOREIGN_WORKER.value
FOREIGN_PS = Stat.FOREIGN_PS.value
TRANSIT = Stat.TRANSIT.value
BAD_WORKER = Stat.BAD_WORKER.value
TTL_EXPIRED = Stat.TTL_EXPIRED.value
FOREIGN_REPLY = Stat.FOREIGN_REPLY.value
WORKER_REPLIES = frozenset(op.value for op in WORKER_REPLY_OPS)
REPLY_OPS = frozenset(
    op.value for op in (Op.PUSH_ACK, Op.PULL_REPLY, Op.DONE_ACK, Op.COLLECT_REPLY, Op.WRITEBACK_ACK)
)
OP_PUSH = Op.PUSH.value
OP_PULL = Op.PULL.value
OP_COLLECT = Op.COLLECT.value
OP_WRITEBACK = Op.WRITEBACK.value
OP_FLUSH = Op.FLUSH.value
# the PS's ops: ps_admission, and answered only at their service address once one is set
PS_OPS = frozenset({OP_COLLECT, OP_WRITEBACK, OP_FLUSH})
LAST_OP = max(Op).value
UDP_BASE_LEN = 8 + HEADER_LEN  # udp.length of a request without entries (28)


def process(p: Pipeline, ingress_port: int, frame: bytes) -> Output:
    """Run one frame through the pipeline; returns the frames to emit as (port, bytes)."""
    if ingress_port == CPU_PORT:
        return packet_out(frame)
    n = len(frame)
    # step 2: IPv4 only; IHL != 5, not UDP or a truncated UDP header: plain routing
    if n < MIN_IPV4 or frame[12] != 0x08 or frame[13] != 0x00:
        return []
    if frame[14] & 0x0F != 5 or frame[23] != PROTO_UDP or n < MIN_UDP:
        return route(p, bytearray(frame), ingress_port, False, n)
    sport, dport, udp_len = UDP_HDR.unpack_from(frame, UDP)
    if dport != HOTAGG_PORT and sport != HOTAGG_PORT:
        return route(p, bytearray(frame), ingress_port, False, n)
    sp, sb = p.stats_packets, p.stats_bytes
    # step 3: every hotagg packet meets the drop simulator (the keyless drop_sim table), even
    # one that fails to parse: r uniform in [0, 65535], dropped when r < rate. Rate 0 draws
    # nothing: the random stream only matters while loss is simulated.
    rate = p.t_drop._default_rec[1][0]
    if rate and p.rng.getrandbits(16) < rate:
        sp[SIM_DROP] += 1
        sb[SIM_DROP] += n
        return []
    # step 4, requests and replies (source port 18497) alike: parser errors (truncated
    # header or entries, count > 8), version, udp.length
    if n < ENTRIES:
        sp[MALFORMED] += 1
        sb[MALFORMED] += n
        return []
    version, op, flags, count, job_id, worker, seq, it, _mask = HOTAGG.unpack_from(frame, HA)
    if (
        count > MAX_ENTRIES
        or n < ENTRIES + ENTRY_LEN * count
        or version != VERSION
        or udp_len != UDP_BASE_LEN + ENTRY_LEN * count
    ):
        sp[MALFORMED] += 1
        sb[MALFORMED] += n
        return []
    # step 5: unknown op, then transit (5a), then unknown job
    if op == 0 or op > LAST_OP:
        sp[UNKNOWN_OP] += 1
        sb[UNKNOWN_OP] += n
        return []
    # A request goes to port 18497; a reply op from port 18497 is a reply even to port 18497
    # (the switch's answer to a PS, whose requests leave from its port 18497).
    if dport != HOTAGG_PORT or (sport == HOTAGG_PORT and op in REPLY_OPS):  # a reply
        # step 5b for a reply a worker takes: only from where its job's PS's traffic arrives
        if op in WORKER_REPLIES:
            src = int.from_bytes(frame[IP_SRC : IP_SRC + 4], "big")
            if not admitted(p, True, job_id, worker, ingress_port, src):
                sp[FOREIGN_REPLY] += 1
                sb[FOREIGN_REPLY] += n
                return []
        return route(p, bytearray(frame), ingress_port, True, n)
    # step 5a (leaves.py): the service address, read for PS ops and partial PUSHes only; a PS
    # op addressed to another switch is routed on unchecked, as a reply is
    partial = op == OP_PUSH and flags & FLAG_FROM_SWITCH
    service = 0
    if partial or op in PS_OPS:
        service = service_address(p)
        dst = int.from_bytes(frame[IP_DST : IP_DST + 4], "big")
        if not partial and service and dst != service:
            sp[TRANSIT] += 1
            sb[TRANSIT] += n
            return route(p, bytearray(frame), ingress_port, True, n)
    # the jobs table (jobs.py): the action that runs decides, so a default set_job serves too
    rec = p.t_jobs._entries.get(job_id) or p.t_jobs._default_rec
    if rec[0] != SET_JOB:
        sp[UNKNOWN_JOB] += 1
        sb[UNKNOWN_JOB] += n
        return []
    job = rec[1]
    # step 5b, tenancy (tenancy.py): from the (port, address) admitted for the job's worker
    # (worker ops) or its PS (COLLECT, WRITEBACK, FLUSH), before any register is touched
    ps_op = op in PS_OPS
    src = int.from_bytes(frame[IP_SRC : IP_SRC + 4], "big")
    if not admitted(p, ps_op, job_id, worker, ingress_port, src):
        reason = FOREIGN_PS if ps_op else FOREIGN_WORKER
        sp[reason] += 1
        sb[reason] += n
        return []
    # step 5c: TTL 0 or 1 could not be routed on (step 7 would drop it), so it is dropped
    # before step 6 reads or writes any register
    if frame[IP_TTL] <= 1:
        sp[TTL_EXPIRED] += 1
        sb[TTL_EXPIRED] += n
        return []
    # step 6
    if op == OP_PUSH:
        if partial and service in (0, SERVICE_TRANSIT) and seq and worker < MAX_WORKERS:
            # a well-formed partial PUSH where no service address is set (a spine): only an
            # aggregating switch absorbs it, this one routes it on unchanged
            sp[TRANSIT] += 1
            sb[TRANSIT] += n
            return route(p, bytearray(frame), ingress_port, True, n)
        return push(p, frame, n, count, job_id, job, worker, seq, it, ingress_port, partial)
    if op == OP_PULL:
        out = pull(p, frame, n, count, job_id, job, it)
    elif op == OP_COLLECT:
        out = collect(p, frame, n, count, job, it)
    elif op == OP_WRITEBACK:
        out = writeback(p, frame, n, count, job_id, job, it, flags)
    elif op == OP_FLUSH:
        # it carries no entries and becomes a PUSH: checked as a PUSH's seq and worker_id
        if count or not seq:
            sp[MALFORMED] += 1
            sb[MALFORMED] += n
            return []
        if worker >= MAX_WORKERS:
            sp[BAD_WORKER] += 1
            sb[BAD_WORKER] += n
            return []
        out = flush(p, frame, n, job, it)
    else:
        sp[PASS] += 1
        sb[PASS] += n
        out = bytearray(frame)
    # step 7
    return route(p, out, ingress_port, True, n)
