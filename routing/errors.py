"""Errors routing/ can report: values with a kind and a message an operator can act on."""

from __future__ import annotations

from enum import StrEnum


class ErrorKind(StrEnum):
    UNKNOWN_POLICY = "unknown_policy"
    BAD_PARAMS = "bad_params"
    BAD_REQUEST = "bad_request"


class RoutingError(ValueError):
    """Raised at the edge of routing/ (configuration, request parsing), never mid-decision."""

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message
