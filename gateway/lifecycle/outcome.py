"""How a relayed stream ended, decided once for every door.

A door turns its wire events into one of these and hands it to the relay core; the core is
the only place that says what an ending means for the backend (outlier detection and the
router's learner) and for the ``meridian_requests_total`` outcome label. So a stream the
gateway itself ended — draining, the request's own deadline, an internal error — or one the
client abandoned never counts as the backend's fault, whichever door carried it.
"""

from __future__ import annotations

from enum import StrEnum

from gateway.signals.outlier import FailureKind


class Ending(StrEnum):
    COMPLETED = "completed"
    CLIENT_CANCELLED = "client_cancelled"  # the client left, or was cut off as too slow
    DRAINED = "drained"  # this gateway is shutting down
    DEADLINE = "deadline"  # the request's own total budget passed
    INTERNAL = "internal"  # the gateway's own fault (an impossible state)
    BACKEND_STALLED = "backend_stalled"  # nothing from upstream within the idle timeout
    BACKEND_FAULT = "backend_fault"  # upstream broke, sent an error event, or was cut short
    MALFORMED_UPSTREAM = "malformed_upstream"  # upstream sent what no OpenAI server sends


# StreamBroken kinds (gateway/stream.py and the doors) -> how the stream ended.
_BROKEN: dict[str, Ending] = {
    "gateway_draining": Ending.DRAINED,
    "deadline_exceeded": Ending.DEADLINE,
    "internal_error": Ending.INTERNAL,
    "upstream_stalled": Ending.BACKEND_STALLED,
    "upstream_malformed": Ending.MALFORMED_UPSTREAM,
}

# What each ending tells outlier detection and the learner: None = a success; CANCELLED = an
# ending that says nothing about the backend (released, not learned from).
_AGAINST_BACKEND: dict[Ending, FailureKind | None] = {
    Ending.COMPLETED: None,
    Ending.CLIENT_CANCELLED: FailureKind.CANCELLED,
    Ending.DRAINED: FailureKind.CANCELLED,
    Ending.DEADLINE: FailureKind.CANCELLED,
    Ending.INTERNAL: FailureKind.CANCELLED,
    Ending.BACKEND_STALLED: FailureKind.TIMEOUT,
    Ending.BACKEND_FAULT: FailureKind.SERVER_ERROR,
    Ending.MALFORMED_UPSTREAM: FailureKind.SERVER_ERROR,
}


def broken_ending(kind: str) -> Ending:
    """The ending of a stream that broke after its first token with ``StreamBroken(kind)``."""
    return _BROKEN.get(kind, Ending.BACKEND_FAULT)


def against_backend(ending: Ending) -> FailureKind | None:
    """How ``ending`` counts against the backend that served the stream."""
    return _AGAINST_BACKEND[ending]
