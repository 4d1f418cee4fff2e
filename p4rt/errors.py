"""The error of a P4Runtime request: a gRPC status code and a message."""

from __future__ import annotations

import grpc


class P4RTError(Exception):
    """A request (or one update of a batch) failed with a gRPC status code."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
