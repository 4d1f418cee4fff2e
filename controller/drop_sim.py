"""The data-plane drop simulator (table HotaggIngress.drop_sim, keyless).

Its default action `set_drop_rate(rate)` drops each hotagg packet with probability
rate / 65536 (docs/design.md, ingress step 3), so loss can be studied where tc netem is
missing.
"""

from __future__ import annotations

from contract import names
from contract.constants import DROP_SCALE
from controller.client import SwitchClient
from controller.errors import BadInput
from controller.p4info import P4Info

TABLE = names.TABLE_DROP_SIM
SET_DROP_RATE = names.ACTION_SET_DROP_RATE


def rate_of(probability: float) -> int:
    """Drop probability in [0, 1] -> the table's rate parameter, round(p * 65536)."""
    if not 0.0 <= probability <= 1.0:  # also rejects NaN
        raise BadInput(f"drop probability {probability} is not in [0, 1]")
    return round(probability * DROP_SCALE)


class DropSim:
    """The drop simulator of one switch."""

    def __init__(self, client: SwitchClient, p4info: P4Info) -> None:
        self.client = client
        self.p4info = p4info

    def set(self, probability: float) -> int:
        """Set the drop probability; returns the rate written."""
        rate = rate_of(probability)
        entry = self.p4info.default_entry(TABLE, SET_DROP_RATE, {"rate": rate})
        self.client.write_entries("modify", [entry])
        return rate

    def get(self) -> int:
        """The current rate (probability * 65536)."""
        for raw in self.client.read_table(self.p4info.default_entry(TABLE)):
            e = self.p4info.decode_entry(raw)
            if e.action == SET_DROP_RATE:
                return e.params["rate"]
        return 0  # no default reported: the P4 program's initial set_drop_rate(0)
