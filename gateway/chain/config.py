"""The ``chain:`` section: this gateway's identity in a chain of gateways, and its limits.

A gateway's id names its *tier* (every replica of one regional gateway shares it), because
what must never happen is a request re-entering a tier it already passed through. Without an
explicit ``id`` it is ``<region>-gw``; a gateway with no region falls back to the host name,
which is only unique per replica (fine for a lone gateway, wrong for a replicated tier: set
``id``).
"""

from __future__ import annotations

import socket
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from gateway.lag_timeout import NOT_THE_BACKENDS

GATEWAY_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"


class SummaryPollConfig(BaseModel):
    """How this gateway reads the summary of each gateway-kind backend (never per request)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    interval_s: Annotated[float, Field(gt=0)] = Field(
        default=2.0, description="Seconds between polls of each downstream gateway's summary."
    )
    jitter: Annotated[float, Field(ge=0, lt=1)] = Field(
        default=0.2, description="Random spread of the interval, as a fraction of it."
    )
    timeout_s: Annotated[float, Field(gt=0)] = Field(
        default=1.0,
        description=f"A poll taking longer fails. {NOT_THE_BACKENDS}",
    )
    # A report older than this is dropped: the backend is then modelled like any other one.
    drop_after_s: Annotated[float, Field(gt=0)] = Field(
        default=60.0,
        description="A summary older than this is dropped: the downstream gateway is then modelled like any backend.",
    )
    max_bytes: Annotated[int, Field(ge=1024)] = Field(
        default=256 * 1024, description="Largest summary read."
    )


class ChainConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: Annotated[str, Field(pattern=GATEWAY_ID_PATTERN)] | None = Field(
        default=None,
        description="This gateway's id in a chain (X-Meridian-Via, hop timing). Default: '<region>-gw', else the host name.",
    )
    # Gateways a request may pass through, this one included.
    max_hops: Annotated[int, Field(ge=1, le=16)] = Field(
        default=3,
        description="Gateways a request may pass through, this one included; beyond: 508.",
    )
    summary: SummaryPollConfig = Field(
        default=SummaryPollConfig(),
        description="How this gateway polls the summary of each gateway-kind backend.",
    )
    # How long the summary endpoint reuses its answer (the probe interval is a good match).
    summary_cache_s: Annotated[float, Field(ge=0)] = Field(
        default=1.0,
        description="How long this gateway's own summary endpoint reuses its answer, in seconds.",
    )

    def gateway_id(self, region: str | None) -> str:
        if self.id is not None:
            return self.id
        if region is not None:
            return f"{region}-gw"
        return socket.gethostname().split(".")[0] or "meridian"
