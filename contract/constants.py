"""The protocol's and the switch's numbers, read from the P4 source at import; no Scapy.

Where each number is defined:

- sizes, wire lengths, ports (p4src/include/sizes.p4) and ops, flags, stats reasons and the
  version (p4src/include/types.p4) are read from the `const` lines of those files when this
  module is imported (contract/p4files.py). The P4 files are what p4c compiles for BMv2, so
  making them the only place the numbers are written means the embedded switch, the agents and
  the controller cannot disagree with the compiled program: a changed number there reaches Python
  without a second edit, and a name Python needs that disappears from the P4 fails at import
  with the file's name instead of running with a stale value. The alternative, the numbers
  also written here and a test that compares, catches a mismatch only when the tests run.
  The price is that these modules need the p4src/ tree beside them, which every way of running
  hotagg (a checkout, the editable install) has; the committed P4Info is read from there too.
  The `Op` and `Stat` members are written out below, so that a type checker knows them, and
  each takes its value from the P4; an OP_* or STAT_* const without a member fails at import.
- numbers that are not in the P4 program (fixed-point scale, int32 and key ranges, the
  Python-side op groupings) are defined below.

Importing this module imports only the standard library (tests/test_contract.py checks it):
the controller and the embedded switch take their numbers from here without loading Scapy.
"""

from __future__ import annotations

from enum import IntEnum

from contract.p4files import SIZES_P4, TYPES_P4, ContractError, read_consts

_P4 = read_consts(TYPES_P4, SIZES_P4)


def _p4(name: str) -> int:
    try:
        return _P4[name]
    except KeyError:
        raise ContractError(
            f"const {name} is not defined in {TYPES_P4.name} or {SIZES_P4.name}"
        ) from None


# --- wire (p4src/include/sizes.p4, types.p4) ---
HOTAGG_PORT = _p4("HOTAGG_PORT")  # UDP destination port of every request
# service_address of a switch that only routes: PS ops and partial PUSHes pass (TRANSIT)
SERVICE_TRANSIT = _p4("SERVICE_TRANSIT")
VERSION = _p4("HOTAGG_VERSION")
MAX_ENTRIES = _p4("MAX_ENTRIES")  # K: entries per packet; one hot-key table instance each
HEADER_LEN = _p4("HEADER_LEN")
ENTRY_LEN = _p4("ENTRY_LEN")
UDP_HEADER_LEN = _p4("UDP_HEADER_LEN")
ETHERTYPE_IPV4 = _p4("ETHERTYPE_IPV4")
IP_PROTO_UDP = _p4("IP_PROTO_UDP")

FLAG_FROM_SWITCH = _p4("FLAG_FROM_SWITCH")
FLAG_RETRANSMIT = _p4("FLAG_RETRANSMIT")
FLAG_INVALIDATE = _p4("FLAG_INVALIDATE")  # COLLECT only: the mask asks to untag cache entries
FLAG_CHAIN = _p4("FLAG_CHAIN")  # WRITEBACK only: on to chain_next, acked by the last leaf
# DONE only, never answered: the worker's hot pushes of the iteration are all acked (section 7)
FLAG_HOT_PUSHED = _p4("FLAG_HOT_PUSHED")

# --- switch sizes (p4src/include/sizes.p4) ---
NUM_SLOTS = _p4("NUM_SLOTS")
HOT_KEYS_SIZE = _p4("HOT_KEYS_SIZE")
MAX_JOBS = _p4("MAX_JOBS")
MAX_WORKERS = _p4("MAX_WORKERS")
DEDUP_WINDOW = _p4("DEDUP_WINDOW")
DEDUP_SIZE = _p4("DEDUP_SIZE")
# dedup cell = (job_index & JOB_MASK) << JOB_SHIFT | (worker_id & WORKER_MASK) << WORKER_SHIFT
# | (seq & SEQ_MASK), as dedup.p4 computes it
DEDUP_JOB_MASK = _p4("DEDUP_JOB_MASK")
DEDUP_JOB_SHIFT = _p4("DEDUP_JOB_SHIFT")
DEDUP_WORKER_MASK = _p4("DEDUP_WORKER_MASK")
DEDUP_WORKER_SHIFT = _p4("DEDUP_WORKER_SHIFT")
DEDUP_SEQ_MASK = _p4("DEDUP_SEQ_MASK")
AGG_SIZE = _p4("AGG_SIZE")  # two copies of each slot, by iteration parity
CPU_PORT = _p4("CPU_PORT")
STATS_SIZE = _p4("STATS_SIZE")
# cold-key sketch (sketch.p4): rows of SKETCH_WIDTH cells indexed by crc32(job_id, key) bits
SKETCH_WIDTH = _p4("SKETCH_WIDTH")
SKETCH_INDEX_BITS = _p4("SKETCH_INDEX_BITS")
SKETCH_INDEX_MASK = _p4("SKETCH_INDEX_MASK")
SKETCH_HASH_MAX = _p4("SKETCH_HASH_MAX")
SKETCH_ROWS = 2  # sketch_cells0/1, sketch_row0/1: one P4 object per row
DROP_SCALE = _p4("DROP_SCALE")  # drop_sim rate unit: probability * DROP_SCALE
IPV4_LPM_SIZE = _p4("IPV4_LPM_SIZE")
WORKER_ADMISSION_SIZE = _p4("WORKER_ADMISSION_SIZE")
PS_ADMISSION_SIZE = _p4("PS_ADMISSION_SIZE")
FLUSH_COUNT_SIZE = _p4("FLUSH_COUNT_SIZE")  # flush_count cells: one per (job, iteration parity)
FLUSH_BATCH_BITS = _p4("FLUSH_BATCH_BITS")  # a FLUSH's batch aux covers offsets aux << this ...


class Op(IntEnum):
    """The `op` field of the hotagg header (OP_* in p4src/include/types.p4)."""

    # Written out so a type checker sees the members; the values are still the P4's.
    PUSH = _p4("OP_PUSH")
    PUSH_ACK = _p4("OP_PUSH_ACK")
    PULL = _p4("OP_PULL")
    PULL_REPLY = _p4("OP_PULL_REPLY")
    DONE = _p4("OP_DONE")
    DONE_ACK = _p4("OP_DONE_ACK")
    COLLECT = _p4("OP_COLLECT")
    COLLECT_REPLY = _p4("OP_COLLECT_REPLY")
    WRITEBACK = _p4("OP_WRITEBACK")
    WRITEBACK_ACK = _p4("OP_WRITEBACK_ACK")
    FLUSH = _p4("OP_FLUSH")


class Stat(IntEnum):
    """Cells of the switch's `HotaggIngress.stats` counter (STAT_* in types.p4)."""

    MALFORMED = _p4("STAT_MALFORMED")
    UNKNOWN_OP = _p4("STAT_UNKNOWN_OP")
    UNKNOWN_JOB = _p4("STAT_UNKNOWN_JOB")
    BAD_WORKER = _p4("STAT_BAD_WORKER")
    SIM_DROP = _p4("STAT_SIM_DROP")
    PUSH = _p4("STAT_PUSH")
    PUSH_DUP = _p4("STAT_PUSH_DUP")
    PUSH_STALE = _p4("STAT_PUSH_STALE")
    HOT_APPLIED = _p4("STAT_HOT_APPLIED")
    COLD_FORWARDED = _p4("STAT_COLD_FORWARDED")
    OVERFLOW = _p4("STAT_OVERFLOW")
    SLOT_CONFLICT = _p4("STAT_SLOT_CONFLICT")
    PUSH_SWITCH_ACK = _p4("STAT_PUSH_SWITCH_ACK")
    PULL = _p4("STAT_PULL")
    PULL_HIT = _p4("STAT_PULL_HIT")
    PULL_MISS = _p4("STAT_PULL_MISS")
    COLLECT = _p4("STAT_COLLECT")
    WRITEBACK = _p4("STAT_WRITEBACK")
    CACHE_WRITE = _p4("STAT_CACHE_WRITE")
    NO_ROUTE = _p4("STAT_NO_ROUTE")
    BAD_SLOT = _p4("STAT_BAD_SLOT")
    PASS = _p4("STAT_PASS")
    FOREIGN_WORKER = _p4("STAT_FOREIGN_WORKER")
    FOREIGN_PS = _p4("STAT_FOREIGN_PS")
    TTL_EXPIRED = _p4("STAT_TTL_EXPIRED")
    FOREIGN_REPLY = _p4("STAT_FOREIGN_REPLY")
    TRANSIT = _p4("STAT_TRANSIT")
    FLUSH = _p4("STAT_FLUSH")
    FLUSH_ABSORBED = _p4("STAT_FLUSH_ABSORBED")
    CHAIN_FORWARD = _p4("STAT_CHAIN_FORWARD")
    SLOT_BUSY = _p4("STAT_SLOT_BUSY")  # section 8: copy holds an older unread iteration
    SLOT_FLUSHED = _p4("STAT_SLOT_FLUSHED")  # section 7: a push of an iteration flushed here


def _check_declares_every_const(enum: type[IntEnum], prefix: str, *not_members: str) -> None:
    """A `prefix` const of the P4 with no member here fails at import, as a missing one does:
    otherwise a packet or a counter cell carrying the new number would not convert."""
    declared = {prefix + name for name in enum.__members__}
    undeclared = [
        k for k in _P4 if k.startswith(prefix) and k not in declared and k not in not_members
    ]
    if undeclared:
        raise ContractError(
            f"{TYPES_P4.name} defines {', '.join(undeclared)} but contract/constants.py's"
            f" {enum.__name__} does not declare it"
        )


# OP_MAX is the largest valid op, not an op.
_check_declares_every_const(Op, "OP_", "OP_MAX")
if max(Op) != _p4("OP_MAX"):
    raise ContractError(f"OP_MAX is {_p4('OP_MAX')} but the largest op is {max(Op)!r}")
_check_declares_every_const(Stat, "STAT_")


# --- Python side only ---
VALUE_SCALE = 1 << 16  # fixed point: real value = wire value / 65536 (docs/design.md §1)
INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
KEY_MAX = (1 << 64) - 1

# Ops the switch processes; every other valid op is forwarded unchanged.
SWITCH_OPS = frozenset({Op.PUSH, Op.PULL, Op.COLLECT, Op.WRITEBACK, Op.FLUSH})
# Replies a worker takes: the switch passes them only from where the job's PS's traffic
# arrives (ps_admission, docs/design.md section 2, "Tenancy").
WORKER_REPLY_OPS = frozenset({Op.PUSH_ACK, Op.PULL_REPLY, Op.DONE_ACK})
REPLY_OP = {
    Op.PUSH: Op.PUSH_ACK,
    Op.PULL: Op.PULL_REPLY,
    Op.DONE: Op.DONE_ACK,
    Op.COLLECT: Op.COLLECT_REPLY,
    Op.WRITEBACK: Op.WRITEBACK_ACK,
}


def to_fixed(x: float) -> int:
    """Real number -> wire value, rounded to nearest; raises if it does not fit int32."""
    v = round(x * VALUE_SCALE)
    if not INT32_MIN <= v <= INT32_MAX:
        raise OverflowError(f"{x} does not fit the fixed-point range (scale {VALUE_SCALE})")
    return v


def from_fixed(v: int) -> float:
    return v / VALUE_SCALE
