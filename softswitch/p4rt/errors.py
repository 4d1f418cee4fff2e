"""Errors of the P4Runtime server and their translation to gRPC / google.rpc statuses.

A failed Write batch is reported as the spec ("Write RPC", "Error Reporting") and PI/BMv2
(device_mgr.cpp, P4ErrorReporter) do it: gRPC status UNKNOWN, with the trailing metadata
"grpc-status-details-bin" holding a google.rpc.Status whose `details` carry one p4.v1.Error
per update, in update order (an empty Error, i.e. canonical_code OK, for the updates that
succeeded), and whose code and message equal the gRPC status's.

That list travels in HTTP/2 trailers, and gRPC clients refuse trailers beyond their
metadata limit (C core, so Python and C++: 8 KiB soft, where it starts refusing at random,
16 KiB hard), answering RESOURCE_EXHAUSTED "received metadata size exceeds ..." instead of
the error. PI sends the list whatever its size, so a client of BMv2 loses the error of a
failing batch of ~230 updates or more. Here the list is kept within DETAILS_BUDGET, in
steps: (1) every failed update's message, each at most MAX_UPDATE_MESSAGE characters;
(2) if that is too large, the messages of the first FULL_RECORDS failures only, the others
with their code alone (the list still says which update failed how); (3) if even that is
too large, no list: the top-level message says so, with the failures per code and the first
few. Clients that need every update's code send batches small enough for step 2 (about 100
updates; controller.client.WRITE_BATCH).
"""

from __future__ import annotations

import collections

import grpc
from google.rpc import status_pb2
from p4.v1 import p4runtime_pb2

from p4rt.errors import P4RTError
from softswitch import state

STATUS_DETAILS_KEY = "grpc-status-details-bin"
SPACE = "hotagg-softswitch"
# Bytes of the serialized google.rpc.Status: with the top-level message (twice: grpc-message
# and Status.message) and the other trailers, the metadata stays under gRPC's 8 KiB.
DETAILS_BUDGET = 6 << 10
MAX_TOP_MESSAGE = 400  # characters of the top-level message
MAX_UPDATE_MESSAGE = 200  # characters of one update's message
FULL_RECORDS = 5  # failures that keep their message in step 2
FIRST_LISTED = 3  # failures quoted in the top-level message

# softswitch.state exceptions -> canonical codes (P4Runtime spec: Write RPC, counters).
# Anything else from the state (BadMatch, BadAction, BadValue, ...) is INVALID_ARGUMENT.
_STATE_CODES: tuple[tuple[type[state.StateError], grpc.StatusCode], ...] = (
    (state.EntryExists, grpc.StatusCode.ALREADY_EXISTS),
    (state.EntryNotFound, grpc.StatusCode.NOT_FOUND),
    (state.TableFull, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (state.BadIndex, grpc.StatusCode.OUT_OF_RANGE),
)


def from_state_error(exc: state.StateError) -> P4RTError:
    """The P4Runtime error for an exception raised by a softswitch.state object."""
    for cls, code in _STATE_CODES:
        if isinstance(exc, cls):
            return P4RTError(code, str(exc))
    return P4RTError(grpc.StatusCode.INVALID_ARGUMENT, str(exc))


def rpc_code(code: grpc.StatusCode) -> int:
    """The google.rpc.Code number of a grpc.StatusCode."""
    return code.value[0]


def clip(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, saying how long it was."""
    if len(text) <= limit:
        return text
    tail = f"... ({len(text)} characters)"
    return text[: max(0, limit - len(tail))] + tail


def _record(result: P4RTError | None, with_message: bool) -> p4runtime_pb2.Error:
    error = p4runtime_pb2.Error()
    if result is not None:
        error.canonical_code = rpc_code(result.code)
        if with_message:
            error.message = clip(result.message, MAX_UPDATE_MESSAGE)
            error.space = SPACE
    return error


def batch_status(results: list[P4RTError | None]) -> status_pb2.Status:
    """google.rpc.Status of a Write batch with at least one failure: code UNKNOWN, one
    p4.v1.Error per update if they fit DETAILS_BUDGET (module docstring), and the
    top-level message to send as the gRPC status details too."""
    failed = [(i, e) for i, e in enumerate(results) if e is not None]
    head = f"{len(failed)} of {len(results)} updates failed"
    quoted = "; ".join(
        f"update {i}: {e.code.name}: {clip(e.message, 80)}" for i, e in failed[:FIRST_LISTED]
    )
    status = status_pb2.Status(code=rpc_code(grpc.StatusCode.UNKNOWN))
    for step in (1, 2):
        del status.details[:]
        full = len(failed) if step == 1 else FULL_RECORDS
        n = 0
        for result in results:
            status.details.add().Pack(_record(result, n < full))
            n += result is not None
        note = "" if step == 1 else f"; messages after the first {full} failures left out"
        status.message = clip(f"{head}{note}; first: {quoted}", MAX_TOP_MESSAGE)
        if status.ByteSize() <= DETAILS_BUDGET:
            return status
    del status.details[:]
    codes = collections.Counter(e.code.name for _, e in failed)
    per_code = ", ".join(f"{n} {name}" for name, n in codes.most_common())
    status.message = clip(
        f"{head} ({per_code}); the per-update errors are left out, they exceed what a gRPC "
        f"client accepts: send smaller batches; first: {quoted}",
        MAX_TOP_MESSAGE,
    )
    return status
