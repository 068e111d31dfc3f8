"""``dns:`` in the operator file."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field


class DnsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    pin: bool = Field(
        default=True,
        description="Resolve backend host names at start and every refresh_s, off the request "
        "path, and connect only to the addresses pinned then; an answer that turns to a "
        "link-local/metadata address, or from public to private addresses, is refused and the "
        "old pin kept (docs/security.md). false: resolve on every new connection.",
    )
    refresh_s: Annotated[float, Field(gt=0)] = Field(
        default=30.0, description="How often pinned host names are resolved again."
    )
    resolve_timeout_s: Annotated[float, Field(gt=0)] = Field(
        default=5.0, description="How long one resolution may take before the old pin stays."
    )
