"""Errors of the P4Runtime server and their translation to gRPC / google.rpc statuses.

A failed Write batch is reported as PI/BMv2 do it: gRPC status UNKNOWN, with the trailing
metadata "grpc-status-details-bin" holding a google.rpc.Status whose `details` carry one
p4.v1.Error per update, in update order (canonical_code OK for the updates that succeeded).
"""

from __future__ import annotations

import grpc
from google.rpc import status_pb2
from p4.v1 import p4runtime_pb2

from softswitch import state

STATUS_DETAILS_KEY = "grpc-status-details-bin"

# softswitch.state exceptions -> canonical codes (P4Runtime spec: Write RPC, counters).
# Anything else from the state (BadMatch, BadAction, BadValue, ...) is INVALID_ARGUMENT.
_STATE_CODES: tuple[tuple[type[state.StateError], grpc.StatusCode], ...] = (
    (state.EntryExists, grpc.StatusCode.ALREADY_EXISTS),
    (state.EntryNotFound, grpc.StatusCode.NOT_FOUND),
    (state.TableFull, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (state.BadIndex, grpc.StatusCode.OUT_OF_RANGE),
)


class P4RTError(Exception):
    """A request (or one update of a batch) failed with a gRPC status code."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def from_state_error(exc: state.StateError) -> P4RTError:
    """The P4Runtime error for an exception raised by a softswitch.state object."""
    for cls, code in _STATE_CODES:
        if isinstance(exc, cls):
            return P4RTError(code, str(exc))
    return P4RTError(grpc.StatusCode.INVALID_ARGUMENT, str(exc))


def rpc_code(code: grpc.StatusCode) -> int:
    """The google.rpc.Code number of a grpc.StatusCode."""
    return code.value[0]


def batch_status(results: list[P4RTError | None]) -> status_pb2.Status:
    """google.rpc.Status of a Write batch: UNKNOWN with one p4.v1.Error per update."""
    status = status_pb2.Status(code=rpc_code(grpc.StatusCode.UNKNOWN))
    failed = sum(r is not None for r in results)
    status.message = f"{failed} of {len(results)} updates failed"
    for result in results:
        error = p4runtime_pb2.Error()
        if result is not None:
            error.canonical_code = rpc_code(result.code)
            error.message = result.message
            error.space = "hotagg-softswitch"
        status.details.add().Pack(error)
    return status
