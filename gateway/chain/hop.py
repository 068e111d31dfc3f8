"""Entering a gateway: the loop check, the hop headers to forward, and what routing must avoid.

Every gateway a request passes through appends its id to ``X-Meridian-Via`` (in order) and
counts ``X-Meridian-Hops``. A gateway that finds its own id in the incoming list refuses the
request (508 Loop Detected): it has been here before, and forwarding would only go round again.
It also refuses when one more hop would exceed ``chain.max_hops``. Otherwise it routes with
every gateway-kind backend that leads to a gateway on the list (or to itself) excluded, so a
loop is cut where it would close, and forwards the list with its own id added.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from gateway.chain.trace import TraceContext, child_span
from gateway.errors import ApiError
from gateway.inbound import InboundRequest

VIA_HEADER = "X-Meridian-Via"
HOPS_HEADER = "X-Meridian-Hops"
TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
# What a door passes from the client's request to the relay; on the way out each is replaced.
HOP_HEADERS = (VIA_HEADER, HOPS_HEADER, TRACEPARENT, TRACESTATE)
_OWNED = frozenset(h.lower() for h in HOP_HEADERS)
_MAX_VIA_ENTRIES = 64  # far beyond any sane max_hops; bounds the work a hostile header causes
LOOP_STATUS = 508  # Loop Detected (RFC 5842)


class ChainErrorKind(StrEnum):
    LOOP = "loop_detected"
    TOO_MANY_HOPS = "too_many_hops"


@dataclass(frozen=True, slots=True)
class ChainError:
    kind: ChainErrorKind
    message: str

    def api_error(self) -> ApiError:
        return ApiError(LOOP_STATUS, self.message, "server_error", self.kind.value)


@dataclass(frozen=True, slots=True)
class HopContext:
    """One request's passage through this gateway."""

    gateway_id: str
    via: tuple[str, ...]  # gateways before this one, in order
    trace: TraceContext
    exclude: frozenset[str]  # gateway-kind backends that would lead back along ``via``

    @property
    def hop_number(self) -> int:
        """1 for the gateway the client called, 2 for the next, ..."""
        return len(self.via) + 1

    def forward_headers(self, base: Mapping[str, str]) -> dict[str, str]:
        """``base`` with this hop's via list, hop count and child ``traceparent``."""
        headers = {k: v for k, v in base.items() if k.lower() not in _OWNED}
        headers[VIA_HEADER] = ", ".join((*self.via, self.gateway_id))
        headers[HOPS_HEADER] = str(self.hop_number)
        headers[TRACEPARENT] = self.trace.traceparent()
        if self.trace.tracestate:
            headers[TRACESTATE] = self.trace.tracestate
        return headers

    def apply(self, inbound: InboundRequest) -> InboundRequest:
        """``inbound`` with routing told to avoid the backends that would close a loop."""
        if not self.exclude:
            return inbound
        profile = replace(inbound.profile, exclude=inbound.profile.exclude | self.exclude)
        return replace(inbound, profile=profile)

    def info(self) -> dict[str, Any]:
        """This hop's identity, for the end-of-stream timing line."""
        return {
            "gateway": self.gateway_id,
            "hop": self.hop_number,
            "trace_id": self.trace.trace_id,
            "span_id": self.trace.span_id,
            "parent_span_id": self.trace.parent_id,
        }


def _lowered(headers: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


def parse_via(value: str | None) -> tuple[str, ...]:
    if not value:
        return ()
    return tuple(part.strip() for part in value.split(",") if part.strip())[:_MAX_VIA_ENTRIES]


def _hop_count(value: str | None) -> int:
    try:
        return max(0, int(value)) if value is not None else 0
    except ValueError:
        return 0


def enter_hop(
    gateway_id: str,
    max_hops: int,
    headers: Mapping[str, str],
    downstream_ids: Mapping[str, str],
) -> HopContext | ChainError:
    """Check the request may enter this gateway; ``downstream_ids`` maps each gateway-kind
    backend to the id its remote gateway reports (learned by the summary poller)."""
    lowered = _lowered(headers)
    via = parse_via(lowered.get(VIA_HEADER.lower()))
    if gateway_id in via:
        path = " -> ".join((*via, gateway_id))
        return ChainError(
            ChainErrorKind.LOOP,
            f"loop detected: the request already passed through gateway {gateway_id!r} "
            f"(path {path}); a gateway-kind backend on that path leads back here: remove it "
            "or point it at a gateway not on the path",
        )
    hops_before = max(len(via), _hop_count(lowered.get(HOPS_HEADER.lower())))
    if hops_before + 1 > max_hops:
        return ChainError(
            ChainErrorKind.TOO_MANY_HOPS,
            f"too many gateway hops: gateway {gateway_id!r} would be hop {hops_before + 1}, "
            f"over chain.max_hops={max_hops} (via {', '.join(via) or 'unknown'})",
        )
    seen = {*via, gateway_id}
    exclude = frozenset(name for name, remote in downstream_ids.items() if remote in seen)
    trace = child_span(lowered.get(TRACEPARENT), lowered.get(TRACESTATE))
    return HopContext(gateway_id, via, trace, exclude)
