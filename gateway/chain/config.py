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

GATEWAY_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"


class SummaryPollConfig(BaseModel):
    """How this gateway reads the summary of each gateway-kind backend (never per request)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    interval_s: Annotated[float, Field(gt=0)] = 2.0
    jitter: Annotated[float, Field(ge=0, lt=1)] = 0.2
    timeout_s: Annotated[float, Field(gt=0)] = 1.0
    # A report older than this is dropped: the backend is then modelled like any other one.
    drop_after_s: Annotated[float, Field(gt=0)] = 60.0
    max_bytes: Annotated[int, Field(ge=1024)] = 256 * 1024


class ChainConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: Annotated[str, Field(pattern=GATEWAY_ID_PATTERN)] | None = None
    # Gateways a request may pass through, this one included.
    max_hops: Annotated[int, Field(ge=1, le=16)] = 3
    summary: SummaryPollConfig = SummaryPollConfig()
    # How long the summary endpoint reuses its answer (the probe interval is a good match).
    summary_cache_s: Annotated[float, Field(ge=0)] = 1.0

    def gateway_id(self, region: str | None) -> str:
        if self.id is not None:
            return self.id
        if region is not None:
            return f"{region}-gw"
        return socket.gethostname().split(".")[0] or "meridian"
