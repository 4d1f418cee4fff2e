"""Parser and deparser helpers (p4src/include/parser.p4): offsets, structs, header rewrites.

The frame is never decoded into objects: fields are read with precompiled structs at fixed
offsets (Ethernet, IPv4 with IHL 5, UDP, hotagg) and the output is the received bytes with
fields patched in place, which is what a P4 deparser emits for the same header changes.
"""

from __future__ import annotations

from struct import Struct

from contract.constants import ENTRY_LEN, FLAG_FROM_SWITCH, HEADER_LEN, MAX_ENTRIES

# byte offsets in a frame Ethernet / IPv4 (IHL 5) / UDP / hotagg / entries
ETH_DST = 0
ETH_SRC = 6
IP = 14
IP_TOTAL_LEN = 16
IP_ID = 18
IP_TTL = 22
IP_PROTO = 23
IP_CSUM = 24
IP_SRC = 26
IP_DST = 30
UDP = 34
UDP_LEN = 38
UDP_CSUM = 40
HA = 42
HA_OP = HA + 1
HA_FLAGS = HA + 2
HA_COUNT = HA + 3
HA_MASK = HA + 16
HA_CACHED = HA + 17
HA_AUX = HA + 18
ENTRIES = HA + HEADER_LEN  # 62
MIN_IPV4 = IP + 20
MIN_UDP = UDP + 8

PROTO_UDP = 17
DROP_PORT = 511  # v1model/BMv2: egress_spec 511 drops the packet

U16 = Struct("!H")
U32 = Struct("!I")
UDP_HDR = Struct("!HHH")  # src port, dst port, length
# version, op, flags, count, job_id, worker_id, seq, iteration, mask (cached, aux not decoded)
HOTAGG = Struct("!BBBBHHIIB")
ENTRY = Struct("!Qi")
VALUE = Struct("!i")
IP_WORDS = Struct("!10H")
# at IP_TOTAL_LEN: totalLen, the 8 bytes up to the addresses, src, dst, then the UDP header
IP_UDP = Struct("!H8sIIHHHH")
# ENTRY_LISTS[count] unpacks count entries as a flat (key0, value0, key1, value1, ...) tuple
ENTRY_LISTS = tuple(Struct("!" + "Qi" * c) for c in range(MAX_ENTRIES + 1))


def cpu_header(port: int) -> bytes:
    """The 2-byte packet_in / packet_out header: a 9-bit port then 7 zero pad bits."""
    return U16.pack((port & 0x1FF) << 7)


PACKET_IN = tuple(cpu_header(p) for p in range(512))


def set_ipv4_checksum(buf: bytearray) -> None:
    """Recompute the checksum of the 20-byte IPv4 base header (the P4 checksum field list)."""
    buf[IP_CSUM] = 0
    buf[IP_CSUM + 1] = 0
    s = sum(IP_WORDS.unpack_from(buf, IP))
    s = (s & 0xFFFF) + (s >> 16)
    s = ~((s & 0xFFFF) + (s >> 16)) & 0xFFFF
    buf[IP_CSUM] = s >> 8
    buf[IP_CSUM + 1] = s & 0xFF


def is_ipv4(frame: bytes | bytearray) -> bool:
    return len(frame) >= MIN_IPV4 and frame[12] == 0x08 and frame[13] == 0x00


def make_reply(out: bytearray, reply_op: int) -> None:
    """Turn a request into the switch's reply: op, FROM_SWITCH, swapped addresses and ports."""
    out[HA_OP] = reply_op
    out[HA_FLAGS] |= FLAG_FROM_SWITCH
    out[IP_SRC : IP_DST + 4] = out[IP_DST : IP_DST + 4] + out[IP_SRC:IP_DST]
    out[UDP : UDP + 4] = out[UDP + 2 : UDP + 4] + out[UDP : UDP + 2]


def processed(out: bytearray, mask: int) -> None:
    """Header changes of every processed switch op: the mask, and UDP checksum 0."""
    out[HA_MASK] = mask
    out[UDP_CSUM] = 0
    out[UDP_CSUM + 1] = 0


def remove_entries(frame: bytes, count: int, mask: int) -> tuple[bytearray, int]:
    """Copy of `frame` without the entries whose `mask` bit is set; returns (frame, kept).

    Lengths shrink by ENTRY_LEN per removed entry (totalLen in 16 bits, as P4 arithmetic
    does); bytes after the last entry (Ethernet padding) stay, as a P4 payload would.
    """
    end = ENTRIES + ENTRY_LEN * count
    if mask & ((1 << count) - 1) == 0:
        return bytearray(frame), count
    out = bytearray(frame[:ENTRIES])
    kept = 0
    for i in range(count):
        if not (mask >> i) & 1:
            start = ENTRIES + ENTRY_LEN * i
            out += frame[start : start + ENTRY_LEN]
            kept += 1
    out += frame[end:]
    out[HA_COUNT] = kept
    shrink_lengths(out, ENTRY_LEN * (count - kept))
    return out, kept


def answer_headers(out: bytearray, frame: bytes | bytearray, shrink: int) -> None:
    """IPv4 and UDP of `frame` as the switch's answer with `shrink` bytes of entries less, into
    `out`: shrink_lengths, make_reply's address and port swaps and processed's UDP checksum
    0, in two struct calls."""
    tl, middle, src, dst, sport, dport, ulen, _ = IP_UDP.unpack_from(frame, IP_TOTAL_LEN)
    IP_UDP.pack_into(
        out,
        IP_TOTAL_LEN,
        (tl - shrink) & 0xFFFF,
        middle,
        dst,
        src,
        dport,
        sport,
        (ulen - shrink) & 0xFFFF,
        0,
    )


def shrink_lengths(out: bytearray, shrink: int) -> None:
    """ipv4.totalLen and udp.length minus `shrink`, in 16-bit arithmetic as in P4."""
    U16.pack_into(out, IP_TOTAL_LEN, (U16.unpack_from(out, IP_TOTAL_LEN)[0] - shrink) & 0xFFFF)
    U16.pack_into(out, UDP_LEN, (U16.unpack_from(out, UDP_LEN)[0] - shrink) & 0xFFFF)
