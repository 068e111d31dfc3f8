"""W3C Trace Context (``traceparent``): keep the trace id, give each hop its own span id.

A gateway is one span of the request's trace: the incoming ``traceparent`` names the caller's
span (our parent); we forward a ``traceparent`` with the same trace id and our own span id, so
the next hop's parent is us. A missing or malformed header starts a new trace (the spec's rule:
never propagate what cannot be parsed), and ``tracestate`` travels only with a valid parent.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass

_TRACEPARENT = re.compile(
    r"^(?P<version>[0-9a-f]{2})-(?P<trace>[0-9a-f]{32})-(?P<parent>[0-9a-f]{16})"
    r"-(?P<flags>[0-9a-f]{2})(?P<rest>-.*)?$"
)
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16
_UNSAMPLED = "00"


@dataclass(frozen=True, slots=True)
class TraceContext:
    """This hop's place in the trace."""

    trace_id: str
    span_id: str  # this hop's span
    parent_id: str | None  # the caller's span; None when this hop started the trace
    flags: str
    tracestate: str | None = None

    def traceparent(self) -> str:
        """What the next hop receives: same trace, this hop as the parent."""
        return f"00-{self.trace_id}-{self.span_id}-{self.flags}"


@dataclass(frozen=True, slots=True)
class ParentSpan:
    trace_id: str
    span_id: str
    flags: str


def parse_traceparent(value: str | None) -> ParentSpan | None:
    """The caller's span, or None when the header is absent or not valid W3C."""
    if not value:
        return None
    match = _TRACEPARENT.match(value.strip())
    if match is None:
        return None
    version = match["version"]
    if version == "ff" or (version == "00" and match["rest"] is not None):
        return None
    trace, parent = match["trace"], match["parent"]
    if trace == _ZERO_TRACE or parent == _ZERO_SPAN:
        return None
    return ParentSpan(trace, parent, match["flags"])


def random_hex(nbytes: int) -> str:
    """Random, never all zeros (an all-zero id is invalid in W3C Trace Context)."""
    while True:
        value = secrets.token_hex(nbytes)
        if value.strip("0"):
            return value


def child_span(
    traceparent: str | None,
    tracestate: str | None = None,
    new_id: Callable[[int], str] = random_hex,
) -> TraceContext:
    """This hop's span under ``traceparent``, or the root of a new trace."""
    parent = parse_traceparent(traceparent)
    if parent is None:
        return TraceContext(new_id(16), new_id(8), None, _UNSAMPLED)
    return TraceContext(parent.trace_id, new_id(8), parent.span_id, parent.flags, tracestate)
