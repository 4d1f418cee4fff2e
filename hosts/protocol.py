"""The hotagg wire protocol: constants and Scapy layers (the reference representation).

The layout is documented in docs/design.md and, as an ASCII diagram, in
p4src/include/headers.p4. The fast struct codec for hot paths lives in hosts/codec.py and is
tested byte for byte against these layers.
"""

from __future__ import annotations

from enum import IntEnum

from scapy.fields import (
    ByteEnumField,
    ByteField,
    FieldLenField,
    IntField,
    LongField,
    PacketListField,
    ShortField,
    SignedIntField,
    XByteField,
    XShortField,
)
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_layers

# --- protocol constants (mirrored in p4src/include/sizes.p4; a test keeps them equal) ---
HOTAGG_PORT = 18497  # 0x4841, "HA": UDP destination port of every request
VERSION = 1
MAX_ENTRIES = 8  # K: entries per packet; one hot-key table instance per position in P4
HEADER_LEN = 20
ENTRY_LEN = 12
VALUE_SCALE = 1 << 16  # fixed point: real value = wire value / 65536
INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
KEY_MAX = (1 << 64) - 1

# --- switch sizes (the same numbers as p4src/include/sizes.p4) ---
NUM_SLOTS = 16384
HOT_KEYS_SIZE = 16384
MAX_JOBS = 16
MAX_WORKERS = 64
DEDUP_WINDOW = 64
DEDUP_SIZE = MAX_JOBS * MAX_WORKERS * DEDUP_WINDOW
CPU_PORT = 255
STATS_SIZE = 32
DROP_SCALE = 65536  # drop_sim rate unit: probability * 65536
IPV4_LPM_SIZE = 1024

# flags
FLAG_FROM_SWITCH = 0x01
FLAG_RETRANSMIT = 0x02
FLAG_INVALIDATE = 0x04  # COLLECT only: the mask asks to untag cache entries


class Op(IntEnum):
    PUSH = 1
    PUSH_ACK = 2
    PULL = 3
    PULL_REPLY = 4
    DONE = 5
    DONE_ACK = 6
    COLLECT = 7
    COLLECT_REPLY = 8
    WRITEBACK = 9
    WRITEBACK_ACK = 10


# Ops the switch processes; every other valid op is forwarded unchanged.
SWITCH_OPS = frozenset({Op.PUSH, Op.PULL, Op.COLLECT, Op.WRITEBACK})
REPLY_OP = {
    Op.PUSH: Op.PUSH_ACK,
    Op.PULL: Op.PULL_REPLY,
    Op.DONE: Op.DONE_ACK,
    Op.COLLECT: Op.COLLECT_REPLY,
    Op.WRITEBACK: Op.WRITEBACK_ACK,
}


class Stat(IntEnum):
    """Cells of the switch's `HotaggIngress.stats` counter (docs/design.md)."""

    MALFORMED = 0
    UNKNOWN_OP = 1
    UNKNOWN_JOB = 2
    BAD_WORKER = 3
    SIM_DROP = 4
    PUSH = 5
    PUSH_DUP = 6
    PUSH_STALE = 7
    HOT_APPLIED = 8
    COLD_FORWARDED = 9
    OVERFLOW = 10
    SLOT_CONFLICT = 11
    PUSH_SWITCH_ACK = 12
    PULL = 13
    PULL_HIT = 14
    PULL_MISS = 15
    COLLECT = 16
    WRITEBACK = 17
    CACHE_WRITE = 18
    NO_ROUTE = 19
    BAD_SLOT = 20
    PASS = 21


def to_fixed(x: float) -> int:
    """Real number -> wire value, rounded to nearest; raises if it does not fit int32."""
    v = round(x * VALUE_SCALE)
    if not INT32_MIN <= v <= INT32_MAX:
        raise OverflowError(f"{x} does not fit the fixed-point range (scale {VALUE_SCALE})")
    return v


def from_fixed(v: int) -> float:
    return v / VALUE_SCALE


class Entry(Packet):
    """One key/value pair; mirrors `entry_t` in p4src/include/headers.p4."""

    name = "HotaggEntry"
    fields_desc = [
        LongField("key", 0),
        SignedIntField("value", 0),
    ]

    def extract_padding(self, s: bytes) -> tuple[bytes, bytes]:
        return b"", s


class Hotagg(Packet):
    """The hotagg header; mirrors `hotagg_t` in p4src/include/headers.p4."""

    name = "Hotagg"
    fields_desc = [
        ByteField("version", VERSION),
        ByteEnumField("op", Op.PUSH, {op.value: op.name for op in Op}),
        XByteField("flags", 0),
        FieldLenField("count", None, fmt="B", count_of="entries"),
        ShortField("job_id", 0),
        ShortField("worker_id", 0),
        IntField("seq", 0),
        IntField("iteration", 0),
        XByteField("mask", 0),
        XByteField("cached", 0),
        XShortField("reserved", 0),
        PacketListField("entries", [], Entry, count_from=lambda pkt: pkt.count),
    ]


bind_layers(UDP, Hotagg, dport=HOTAGG_PORT)
# Replies come from the PS's (or the switch's) port 18497 to the requester's own port.
bind_layers(UDP, Hotagg, sport=HOTAGG_PORT)
