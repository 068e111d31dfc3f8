"""States the code's own logic rules out, handled without ``assert`` on the request path.

An ``assert`` that fires while serving is a crash with a traceback in the server log and a
bare 500 from the framework. :class:`ImpossibleState` is raised instead; the door that catches
it logs it once, at error level, with the request id, and answers with :func:`internal_error`:
a protocol-native error that names the request id and nothing internal.
"""

from __future__ import annotations

import logging

from gateway.errors import ApiError

log = logging.getLogger("meridian.impossible")


class ImpossibleState(Exception):
    """The request reached a state its lifecycle rules out (a bug, not bad input)."""


def internal_error(request_id: str, door: str, exc: BaseException) -> ApiError:
    """Log ``exc`` for the operator (once; with its traceback when it is a bug rather than an
    :class:`ImpossibleState` the code named) and return what the client is told instead."""
    trace = None if isinstance(exc, ImpossibleState) else exc
    log.error("impossible state request_id=%s door=%s: %s", request_id, door, exc, exc_info=trace)
    return ApiError(
        500,
        f"internal error in the gateway; quote request id {request_id}",
        "server_error",
        "internal_error",
    )
