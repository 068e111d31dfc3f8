"""Errors of the shared-state layer, as values with a kind an operator can act on."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class StateErrorKind(StrEnum):
    CONFIG = "config"  # the state: section is wrong; the message names the key
    UNAVAILABLE = "unavailable"  # the store could not be reached, timed out or is paused
    CIRCUIT_OPEN = "circuit_open"  # the breaker refused the call without trying
    PROTOCOL = "protocol"  # the store answered something we cannot read


@dataclass(frozen=True, slots=True)
class StateError:
    kind: StateErrorKind
    message: str

    def __str__(self) -> str:
        return f"state {self.kind}: {self.message}"


class StateUnavailable(Exception):
    """Raised by store calls (never by the request-path API) when the store cannot serve."""

    def __init__(self, error: StateError) -> None:
        super().__init__(str(error))
        self.error = error


def unavailable(message: str) -> StateUnavailable:
    return StateUnavailable(StateError(StateErrorKind.UNAVAILABLE, message))
