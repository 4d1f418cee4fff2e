"""Switch statistics (counter HotaggIngress.stats, one cell per contract.constants.Stat) and the
hot-key tables' direct counters (HotaggIngress.lookupN.hits)."""

from __future__ import annotations

from dataclasses import dataclass

from p4.v1 import p4runtime_pb2

from contract import names
from contract.constants import MAX_ENTRIES, Stat
from controller.client import SwitchClient
from controller.p4info import P4Info

COUNTER = names.COUNTER_STATS


@dataclass(frozen=True)
class Cell:
    name: str
    index: int
    packets: int
    bytes: int


class Stats:
    """The counters of one switch."""

    def __init__(self, client: SwitchClient, p4info: P4Info) -> None:
        self.client = client
        self.p4info = p4info

    def read(self) -> list[Cell]:
        """Every cell of the stats counter, named by Stat (unnamed cells as 'cell_N')."""
        request = p4runtime_pb2.Entity()
        request.counter_entry.counter_id = self.p4info.counter_id(COUNTER)
        values: dict[int, tuple[int, int]] = {}
        for entity in self.client.read([request]):
            ce = entity.counter_entry
            values[ce.index.index] = (ce.data.packet_count, ce.data.byte_count)
        names = {s.value: s.name for s in Stat}
        size = self.p4info.counter(COUNTER).size
        return [
            Cell(names.get(i, f"cell_{i}"), i, *values.get(i, (0, 0)))
            for i in range(max(size, len(names)))
        ]

    def clear(self) -> None:
        """Zero every cell (MODIFY with empty data)."""
        size = self.p4info.counter(COUNTER).size
        updates = []
        for i in range(size):
            u = p4runtime_pb2.Update(type=p4runtime_pb2.Update.MODIFY)
            u.entity.counter_entry.counter_id = self.p4info.counter_id(COUNTER)
            u.entity.counter_entry.index.index = i
            u.entity.counter_entry.data.SetInParent()
            updates.append(u)
        self.client.write(updates)

    def hot_key_hits(self) -> list[Cell]:
        """Total hits of each hot-key table instance (the sum over its direct counter)."""
        out = []
        for i in range(MAX_ENTRIES):
            request = p4runtime_pb2.Entity()
            request.direct_counter_entry.table_entry.table_id = self.p4info.table_id(
                names.hot_keys_table(i)
            )
            packets = nbytes = 0
            for entity in self.client.read([request]):
                packets += entity.direct_counter_entry.data.packet_count
                nbytes += entity.direct_counter_entry.data.byte_count
            # Named as the P4Info alias of the direct counter: "lookup0.hits".
            alias = names.hits_counter(i).removeprefix(f"{names.INGRESS}.")
            out.append(Cell(alias, i, packets, nbytes))
        return out
