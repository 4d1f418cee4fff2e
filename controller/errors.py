"""The controller's exceptions: every gRPC failure becomes one of these, with a readable message.

`SwitchClient` translates `grpc.RpcError` once (`translate_rpc_error`), unpacking the per-update
`p4.v1.Error` list that P4Runtime servers put into `grpc-status-details-bin` (as p4runtime-shell's
P4RuntimeWriteException does), so callers catch `ControllerError` subclasses, never grpc errors.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from google.rpc import code_pb2, status_pb2
from p4.v1 import p4runtime_pb2


class ControllerError(Exception):
    """Base of every error the controller raises."""


class SwitchUnreachable(ControllerError):
    """No P4Runtime server answers at the address (or the stream broke)."""


class SwitchTimeout(SwitchUnreachable):
    """The switch did not answer an RPC within its deadline."""


class NotPrimary(ControllerError):
    """This client is not the primary controller, so it may not write."""


class PipelineError(ControllerError):
    """The switch has no pipeline, or one that does not fit our P4Info."""


class NoPipeline(PipelineError):
    pass


class PipelineMismatch(PipelineError):
    pass


class BadInput(ControllerError):
    """Input the user can fix: a malformed key, a value too wide, a bad file."""


class UnknownName(BadInput):
    """A table/action/field name that the P4Info does not have."""


class UnknownJob(ControllerError):
    pass


class BudgetExceeded(ControllerError):
    """The controller's own budget is used up: a job's slot range, the switch's slots, the
    job indices. Raised before anything is written."""


class AlreadyExists(ControllerError):
    """A controller-level object (e.g. a job) exists already."""


class NotFound(ControllerError):
    """A controller-level object (e.g. a hot key to evict) does not exist."""


class RpcFailed(ControllerError):
    """Any other RPC failure; the message carries the gRPC code and details."""


@dataclass(frozen=True)
class UpdateError:
    """One failed update of a batch: its index in the caller's list, code name, message."""

    index: int
    code: str
    message: str


class WriteError(ControllerError):
    """A Write failed; `errors` lists every failed update (index into the caller's list)."""

    def __init__(self, errors: list[UpdateError]) -> None:
        self.errors = errors
        super().__init__(self._summary())

    def _summary(self) -> str:
        if not self.errors:
            return "write failed"
        first = self.errors[0]
        more = f" (and {len(self.errors) - 1} more failed updates)" if len(self.errors) > 1 else ""
        return f"update {first.index} failed: {first.code}: {first.message}{more}"


class TableFull(WriteError):
    pass


class EntryExists(WriteError):
    pass


class EntryNotFound(WriteError):
    pass


class BadEntry(WriteError):
    pass


# A batch's exception class is chosen from its first failed update.
_WRITE_ERROR_BY_CODE: dict[str, type[WriteError]] = {
    "RESOURCE_EXHAUSTED": TableFull,
    "ALREADY_EXISTS": EntryExists,
    "NOT_FOUND": EntryNotFound,
    "INVALID_ARGUMENT": BadEntry,
    "OUT_OF_RANGE": BadEntry,
}


def write_error(errors: list[UpdateError]) -> WriteError:
    """The WriteError subclass for `errors`, chosen by the first failed update's code."""
    return _WRITE_ERROR_BY_CODE.get(errors[0].code, WriteError)(errors)


def _details(err: grpc.RpcError) -> str:
    try:
        return str(err.details() or "")
    except Exception:  # some RpcError objects carry no details at all
        return ""


def _code(err: grpc.RpcError) -> grpc.StatusCode | None:
    try:
        return err.code()
    except Exception:
        return None


def _update_errors(
    err: grpc.RpcError, base_index: int, batch_len: int | None
) -> list[UpdateError] | None:
    """The non-OK `p4.v1.Error`s of a failed Write, or None if the server sent no list, or
    one whose length is not the batch's (its positions would name the wrong updates)."""
    try:
        metadata = err.trailing_metadata() or ()
    except Exception:
        return None
    for key, value in metadata:
        if key != "grpc-status-details-bin":
            continue
        status = status_pb2.Status()
        status.ParseFromString(value)
        if batch_len is not None and len(status.details) != batch_len:
            return None
        out = []
        for i, detail in enumerate(status.details):
            p4_error = p4runtime_pb2.Error()
            if not detail.Unpack(p4_error) or p4_error.canonical_code == code_pb2.OK:
                continue
            name = code_pb2.Code.Name(p4_error.canonical_code)
            out.append(UpdateError(base_index + i, name, p4_error.message))
        return out or None
    return None


def translate_rpc_error(
    err: grpc.RpcError, addr: str, what: str, base_index: int = 0, batch_len: int | None = None
) -> ControllerError:
    """One grpc.RpcError -> the matching ControllerError (call once, at the RPC boundary).

    `what` names the operation for the message; for a Write, `base_index` is the index of the
    batch's first update in the caller's list and `batch_len` its number of updates.
    """
    code = _code(err)
    details = _details(err)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and "metadata size exceeds" in details:
        # our own gRPC refused the answer's trailers (the error list of a big failing
        # batch): not a full table
        return RpcFailed(f"{what}: the switch's error was too large to receive: {details}")
    if code == grpc.StatusCode.UNAVAILABLE:
        return SwitchUnreachable(f"switch at {addr} unreachable during {what}: {details}")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return SwitchTimeout(f"switch at {addr} did not answer {what} in time (see --timeout)")
    if code == grpc.StatusCode.PERMISSION_DENIED:
        return NotPrimary(
            f"{what} refused: this client is not the primary controller of {addr} "
            f"(use a higher --election-id): {details}"
        )
    if code == grpc.StatusCode.FAILED_PRECONDITION and "pipeline" in details.lower():
        return NoPipeline(f"{what}: {details} (push one with 'hotagg-ctl pipeline push')")
    if what == "SetForwardingPipelineConfig" and code == grpc.StatusCode.INVALID_ARGUMENT:
        return PipelineMismatch(f"the switch at {addr} refused the pipeline: {details}")
    if what == "Write":
        errors = _update_errors(err, base_index, batch_len)
        if errors is None and code is not None and code.name in _WRITE_ERROR_BY_CODE:
            # A server may answer a failed batch with one plain status instead of details.
            errors = [UpdateError(base_index, code.name, details)]
        if errors:
            return write_error(errors)
    name = code.name if code is not None else "UNKNOWN"
    return RpcFailed(f"{what} failed: {name}: {details}")
