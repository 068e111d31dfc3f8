"""The summary a gateway publishes for the gateways that forward to it (the wire format).

``GET /v1/meridian/summary[?via=<caller id>,...]`` answers, per model, the TTFT its best
backend would give a request with nothing to prefill, and the gateways that figure passes
through (``path``, this gateway first). Unknown fields are ignored when reading, so a newer
gateway can add some without breaking an older poller.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

SUMMARY_PATH = "/v1/meridian/summary"


class _Wire(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class ModelSummary(_Wire):
    # None: served, but the publisher's policy makes no TTFT prediction (e.g. round robin).
    ttft_ms: Annotated[float, Field(ge=0)] | None
    ttft_p90_ms: Annotated[float, Field(ge=0)] | None = None
    path: Annotated[list[str], Field(min_length=1, max_length=64)]


class GatewaySummary(_Wire):
    gateway: Annotated[str, Field(min_length=1, max_length=128)]
    region: str | None = None
    models: dict[str, ModelSummary] = Field(default_factory=dict)
    # Ids of the gateways this one forwards to (as far as it knows): lets a caller spot a
    # loop configuration before any request takes it.
    forwards_to: list[str] = Field(default_factory=list)
    max_age_s: float = 0.0  # how long the publisher reuses this answer


@dataclass(frozen=True, slots=True)
class DownstreamReport:
    """What the poller keeps of one gateway-kind backend's last good summary."""

    gateway_id: str
    region: str | None
    # Per model, only the entries usable from here; None when the remote gateway predicts
    # nothing (routing then models the backend like any other instead of filtering it).
    ttft_ms: dict[str, float] | None
    paths: dict[str, tuple[str, ...]]
    forwards_to: frozenset[str]
    as_of: float  # monotonic, when it was fetched
