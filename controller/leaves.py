"""Aggregation at every leaf (docs/design.md section 7): the two keyless tables the
controller sets per switch.

- `HotaggIngress.service_address` (`set_service_address(addr)`): the address the PS sends
  this switch's COLLECT, WRITEBACK and FLUSH to. Once set (not 0), the switch answers those
  only when addressed to it, routes the others on, and absorbs partial PUSHes. 0 (the
  initial default): the switch answers every PS op that reaches it and routes partial
  PUSHes on. Set it on aggregating switches only.
- `HotaggIngress.chain_next` (`set_chain_next(addr)`): where this switch sends a chained
  WRITEBACK after caching it: the next leaf's service address; 0 (the initial default):
  this switch is the chain's last leaf and acks it.

Both are set by modifying the table's default action, as DropSim and Sketch do.
"""

from __future__ import annotations

import ipaddress

from contract import names
from contract.constants import SERVICE_TRANSIT
from controller.client import SwitchClient
from controller.errors import BadInput
from controller.p4info import P4Info


def address_of(addr: str | int) -> int:
    """An IPv4 address as the tables' 32-bit `addr`: dotted quad or integer; 0 (0.0.0.0)
    means none."""
    try:
        return int(ipaddress.IPv4Address(addr))
    except (ipaddress.AddressValueError, ValueError) as e:
        raise BadInput(f"not an IPv4 address: {addr!r} ({e})") from None


class AddressTable:
    """A keyless table whose default action carries one address (`addr`, 32 bits)."""

    TABLE = ""
    ACTION = ""

    def __init__(self, client: SwitchClient, p4info: P4Info) -> None:
        self.client = client
        self.p4info = p4info

    def set(self, addr: str | int) -> int:
        """Write the address (0 or "0.0.0.0": none); returns it as written."""
        value = address_of(addr)
        entry = self.p4info.default_entry(self.TABLE, self.ACTION, {"addr": value})
        self.client.write_entries("modify", [entry])
        return value

    def clear(self) -> None:
        self.set(0)

    def get(self) -> int:
        """The address the switch uses now (0: none)."""
        for raw in self.client.read_table(self.p4info.default_entry(self.TABLE)):
            e = self.p4info.decode_entry(raw)
            if e.action == self.ACTION:
                return e.params["addr"]
        return 0  # no default reported: the program's initial action, address 0


class ServiceAddress(AddressTable):
    """Where this switch is addressed for PS ops: an aggregating switch's service address,
    or SERVICE_TRANSIT on a switch that only routes them (a spine)."""

    TABLE = names.TABLE_SERVICE_ADDRESS
    ACTION = names.ACTION_SET_SERVICE_ADDRESS

    def set_transit(self) -> int:
        """This switch answers no PS op and absorbs no partial PUSH: it routes them on."""
        return self.set(SERVICE_TRANSIT)


class ChainNext(AddressTable):
    """The next leaf's service address for a chained WRITEBACK (0: the last leaf)."""

    TABLE = names.TABLE_CHAIN_NEXT
    ACTION = names.ACTION_SET_CHAIN_NEXT
