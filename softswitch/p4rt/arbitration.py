"""Primary/backup arbitration of StreamChannel clients (P4Runtime spec section 5), per role.

As in PI (the server inside simple_switch_grpc), the primary of a role is the live stream
with the highest election id: when the primary's stream ends, the next highest becomes
primary at once. Every arbitration change is announced with a MasterArbitrationUpdate:
status OK to the primary, ALREADY_EXISTS to each backup, election_id = the primary's.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field

import grpc
from google.rpc import code_pb2
from p4.v1 import p4runtime_pb2

from softswitch.p4rt.errors import P4RTError

MAX_STREAMS_PER_ROLE = 16


def election_int(uint128: p4runtime_pb2.Uint128) -> int:
    return (uint128.high << 64) | uint128.low


@dataclass(eq=False)
class Client:
    """One StreamChannel; `outbox` feeds the stream's response generator."""

    device_id: int
    role: str = ""
    election_id: int = -1  # -1 until its first MasterArbitrationUpdate is accepted
    outbox: queue.Queue = field(default_factory=queue.Queue)
    packet_ins_dropped: int = 0

    @property
    def registered(self) -> bool:
        return self.election_id >= 0


class Arbiter:
    """Live clients per role and who is primary; thread safe."""

    def __init__(self, device_id: int) -> None:
        self.device_id = device_id
        self._lock = threading.Lock()
        self._roles: dict[str, list[Client]] = {}

    def _sorted(self, role: str) -> list[Client]:
        return self._roles.setdefault(role, [])

    def _notify(self, role: str, clients: list[Client]) -> None:
        live = self._roles.get(role, [])
        if not live:
            return
        primary = live[0]
        for c in clients:
            msg = p4runtime_pb2.StreamMessageResponse()
            arb = msg.arbitration
            arb.device_id = self.device_id
            if role:
                arb.role.name = role
            arb.election_id.high = primary.election_id >> 64
            arb.election_id.low = primary.election_id & ((1 << 64) - 1)
            if c is primary:
                arb.status.code = code_pb2.OK
                arb.status.message = "Is primary"
            else:
                arb.status.code = code_pb2.ALREADY_EXISTS
                arb.status.message = "Is backup"
            c.outbox.put(msg)

    def arbitrate(self, client: Client, role: str, election_id: int) -> None:
        """Handle a MasterArbitrationUpdate on `client`'s stream; raises P4RTError."""
        with self._lock:
            if client.registered and role != client.role:
                raise P4RTError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    "the role of a stream cannot change; open a new stream",
                )
            live = self._sorted(role)
            if any(c.election_id == election_id for c in live if c is not client):
                raise P4RTError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"election id {election_id} is already used by another controller",
                )
            if not client.registered and len(live) >= MAX_STREAMS_PER_ROLE:
                raise P4RTError(grpc.StatusCode.RESOURCE_EXHAUSTED, "too many streams")
            was_primary = bool(live) and live[0] is client
            if client.registered and client.election_id == election_id:
                self._notify(role, [client])
                return
            if client in live:
                live.remove(client)
            client.role = role
            client.election_id = election_id
            live.append(client)
            live.sort(key=lambda c: c.election_id, reverse=True)
            is_primary = live[0] is client
            if is_primary or was_primary:
                self._notify(role, live)
            else:
                self._notify(role, [client])

    def remove(self, client: Client) -> None:
        """The client's stream ended; promote the next highest if it was primary."""
        with self._lock:
            live = self._roles.get(client.role, [])
            if client not in live:
                return
            was_primary = live[0] is client
            live.remove(client)
            if was_primary:
                self._notify(client.role, live)

    def primary(self, role: str = "") -> Client | None:
        with self._lock:
            live = self._roles.get(role)
            return live[0] if live else None

    def check_writer(self, role: str, election: int | None) -> None:
        """PERMISSION_DENIED unless `election` (None if unset) is the primary's (PI: no
        stream, no id -> ok)."""
        with self._lock:
            live = self._roles.get(role)
            if not live:
                if election is None:
                    return
                raise P4RTError(grpc.StatusCode.PERMISSION_DENIED, "not primary (no stream open)")
            given = 0 if election is None else election  # unset reads as 0
            if given != live[0].election_id:
                raise P4RTError(grpc.StatusCode.PERMISSION_DENIED, "not primary")
