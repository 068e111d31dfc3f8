"""The admin listener's configuration (``admin:`` in the operator file)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field


class AdminConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = Field(
        default="127.0.0.1",
        description="Address of the admin listener. Loopback by default: only this host "
        "reaches it. In a pod, 0.0.0.0 lets Prometheus scrape it; keep it off any Service.",
    )
    port: Annotated[int, Field(ge=0, le=65535)] | None = Field(
        default=None,
        description="Port of the admin listener; 0 = ephemeral. None: the public port + 1, "
        "or ephemeral when the public port is.",
    )
    public_metrics: bool = Field(
        default=False, description="Also serve /metrics on the public listener (it names backends)."
    )

    def port_for(self, public_port: int) -> int:
        if self.port is not None:
            return self.port
        return 0 if public_port == 0 else public_port + 1
