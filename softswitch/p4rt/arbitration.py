"""Primary/backup arbitration of StreamChannel clients (P4Runtime spec section 5), per role.

As in PI (the server inside simple_switch_grpc), the primary of a role is the live stream
with the highest election id: when the primary's stream ends, the next highest becomes
primary at once. Every arbitration change is announced with a MasterArbitrationUpdate:
status OK to the primary, ALREADY_EXISTS to each backup, election_id = the primary's.

Roles: the server has no role configuration (every role has full pipeline access, as an
unset role.config means in the spec), so a role comes into being when a stream first
arbitrates for it; the default role "" always exists. A Write (or SetForwardingPipeline-
Config) is checked as the spec's Write RPC section orders it: a role the device does not
know -> NOT_FOUND; not the primary of its role according to its election id ->
PERMISSION_DENIED. Unlike PI (pi_server.cpp Write: "if there are no connections, we accept
all Write requests with no election_id ... may need to be changed in production"), a write
for a role with no open stream, or without an election id, is refused: the spec's
"Unset Election ID" section makes an unset id lower than any other, so it is never primary.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field

import grpc
from google.rpc import code_pb2
from p4.v1 import p4runtime_pb2

from p4rt.errors import P4RTError

MAX_STREAMS_PER_ROLE = 16  # PI: DeviceState::max_connections
MAX_ROLES = 16  # named roles a device remembers, besides the default role
MAX_ROLE_NAME = 256  # characters


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
        self._roles: dict[str, list[Client]] = {"": []}  # every known role, live or not

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
            if len(role) > MAX_ROLE_NAME:
                raise P4RTError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"role name of {len(role)} characters: at most {MAX_ROLE_NAME}",
                )
            if role not in self._roles and len(self._roles) > MAX_ROLES:
                raise P4RTError(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"too many roles: this switch remembers {MAX_ROLES} named roles",
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
        """NOT_FOUND for a role the device does not know; PERMISSION_DENIED unless
        `election` (None if unset) is the election id of the role's live primary."""
        with self._lock:
            live = self._roles.get(role)
            if live is None:
                raise P4RTError(
                    grpc.StatusCode.NOT_FOUND,
                    f"unknown role {_clip(role)!r}: no stream has arbitrated for it",
                )
            name = f"role {_clip(role)!r}" if role else "the default role"
            if not live:
                raise P4RTError(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"not primary: no controller stream is open for {name}",
                )
            if election is None:
                raise P4RTError(
                    grpc.StatusCode.PERMISSION_DENIED,
                    "not primary: the request has no election id",
                )
            if election != live[0].election_id:
                raise P4RTError(grpc.StatusCode.PERMISSION_DENIED, f"not primary for {name}")


def _clip(text: str, limit: int = 64) -> str:
    """A client-chosen name as error messages quote it: at most `limit` characters."""
    return text if len(text) <= limit else text[:limit] + "..."
