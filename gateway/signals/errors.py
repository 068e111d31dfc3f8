"""Signal failures as values: a kind an operator can grep for, and a message they can act on."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeGuard


class SignalErrorKind(StrEnum):
    TIMEOUT = "timeout"
    CONNECT = "connect"  # refused, reset, DNS: the backend is not reachable
    HTTP_STATUS = "http_status"  # reachable but answered with an error status
    TOO_LARGE = "too_large"  # a metrics page beyond the configured byte bound
    MALFORMED = "malformed"  # not parseable as what we asked for
    MISSING_METRICS = "missing_metrics"  # parseable, but none of the engine's names present
    PROTOCOL = "protocol"  # anything else the HTTP client rejected
    # The deadline passed while the gateway's own event loop was too busy to look
    # (gateway/lag_timeout.py): no verdict on the backend, neither a failure nor a sample.
    LAGGED = "lagged"


@dataclass(frozen=True, slots=True)
class SignalError:
    kind: SignalErrorKind
    message: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


def is_lagged(result: object) -> TypeGuard[SignalError]:
    """A probe, canary, scrape or poll whose deadline passed while the gateway's loop was too
    busy to look (gateway/lag_timeout.py): no verdict on the backend."""
    return isinstance(result, SignalError) and result.kind is SignalErrorKind.LAGGED


class ErrorTransitions:
    """Logs a backend's signal errors once per change of state, not once per attempt.

    A backend that times out every two seconds for an hour produces one warning when it starts
    and one info line when it recovers; a change of error kind is a new state and logs again.
    """

    def __init__(self, logger: logging.Logger, what: str) -> None:
        self._logger = logger
        self._what = what
        self._state: dict[str, SignalErrorKind | None] = {}

    def update(self, backend: str, error: SignalError | None) -> bool:
        """Record the latest outcome; return whether it changed the backend's state."""
        kind = error.kind if error is not None else None
        previous = self._state.get(backend)
        self._state[backend] = kind
        if kind == previous:
            return False
        if error is not None:
            self._logger.warning("%s of backend %s failing: %s", self._what, backend, error)
        elif previous is not None:
            self._logger.info("%s of backend %s recovered (was %s)", self._what, backend, previous)
        return True
