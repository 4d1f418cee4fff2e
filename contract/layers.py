"""The hotagg header as Scapy layers: the reference representation of the wire format.

The layout is documented in docs/design.md and, as an ASCII diagram, in
p4src/include/headers.p4; tests/test_p4src.py checks these fields against the P4 headers. The
fast struct codec for hot paths is contract/codec.py, tested byte for byte against these layers.

This module re-exports contract.constants, so that it alone describes the protocol as the old
hosts/protocol.py did; code that needs only numbers imports contract.constants and never
loads Scapy.
"""

from __future__ import annotations

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
)
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_layers

from contract.constants import *  # noqa: F403  (the protocol's numbers, see above)
from contract.constants import HOTAGG_PORT, VERSION, Op


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
        ShortField("aux", 0),
        PacketListField("entries", [], Entry, count_from=lambda pkt: pkt.count),
    ]


bind_layers(UDP, Hotagg, dport=HOTAGG_PORT)
# Replies come from the PS's (or the switch's) port 18497 to the requester's own port.
bind_layers(UDP, Hotagg, sport=HOTAGG_PORT)
