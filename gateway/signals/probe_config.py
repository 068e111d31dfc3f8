"""What the active probes and canaries are configured with (``signals.probes`` in the
gateway's config); the loops that use it are :mod:`gateway.signals.probes`."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from gateway.lag_timeout import NOT_THE_BACKENDS


class CanaryConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = Field(
        default=False,
        description="Send 1-token canary generations to measure warm TTFT and detect cold starts.",
    )
    path: str = Field(
        default="/v1/chat/completions",
        description="Path of the canary request (a chat completion).",
    )
    prompt: str = Field(default="Reply with one word.", description="The canary's prompt.")
    interval_s: float = Field(
        default=60.0, gt=0, description="Seconds between canaries of each backend."
    )
    jitter: float = Field(
        default=0.2,
        ge=0,
        lt=1,
        description="Random spread of the interval, as a fraction of it (0.2: +-20%).",
    )
    timeout_s: float = Field(
        default=10.0,
        gt=0,
        description=(
            "A canary without its first token within this long counts as failed."
            f" {NOT_THE_BACKENDS}"
        ),
    )
    # A TTFT above cold_factor x the warm estimate, and by at least cold_min_excess_ms, is a
    # cold start rather than a slow warm response.
    cold_factor: float = Field(
        default=4.0,
        gt=1,
        description="A canary TTFT above this multiple of the warm estimate (and above it by cold_min_excess_ms) is a cold start.",
    )
    cold_min_excess_ms: float = Field(
        default=300.0,
        ge=0,
        description="Least excess over the warm TTFT, in ms, for a canary to count as a cold start.",
    )


class ProbeConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = Field(
        default=True, description="Probe each backend for reachability and round trip."
    )
    path: str = Field(
        default="/v1/models", description="Path of the probe request (cheap: the model list)."
    )
    interval_s: float = Field(
        default=5.0, gt=0, description="Seconds between probes of each backend."
    )
    jitter: float = Field(
        default=0.2, ge=0, lt=1, description="Random spread of the interval, as a fraction of it."
    )
    timeout_s: float = Field(
        default=2.0,
        gt=0,
        description=f"A probe taking longer fails. {NOT_THE_BACKENDS}",
    )
    concurrency: int = Field(
        default=8, ge=1, description="Probes running at once across all backends."
    )
    ewma_alpha: float = Field(
        default=0.3,
        gt=0,
        le=1,
        description="Weight of the newest probe in the smoothed RTT (0..1].",
    )
    measure_fresh: bool = Field(
        default=True,
        description="Also time a probe on a new connection (connect + request), not only on a pooled one.",
    )
    unhealthy_after: int = Field(
        default=3,
        ge=1,
        description="Failed probes in a row after which a backend counts as unhealthy.",
    )
    canary: CanaryConfig = Field(
        default=CanaryConfig(),
        description="1-token canary generations: warm TTFT and cold-start detection.",
    )
