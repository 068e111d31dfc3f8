"""The request-handling sections of the operator file: timeouts, retries and hedging, latency
classes, stream writing, admission, drain, reload and size limits (re-exported by
:mod:`gateway.config`, which holds the file as a whole)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from gateway.config_base import StrictSection as _Strict
from gateway.lag_timeout import GIVEN_BACK


class TimeoutsConfig(_Strict):
    connect_s: Annotated[float, Field(gt=0)] = Field(
        default=5.0,
        description=(
            "Connecting to a backend, in seconds: its TCP handshake (a TLS one gets as long "
            "again). At the deadline the kernel is asked whether the handshake completed: an "
            "event loop too busy to see it in time is not the backend's fault."
        ),
    )
    first_token_s: Annotated[float, Field(gt=0)] = Field(
        default=60.0,
        description=(
            "An attempt without a first token within this long fails over to the next "
            f"candidate. {GIVEN_BACK}"
        ),
    )
    inter_token_s: Annotated[float, Field(gt=0)] = Field(
        default=60.0,
        description=(
            "A stream with no event for this long mid-stream is broken off (an error event, "
            f"never a silent end). {GIVEN_BACK}"
        ),
    )
    total_s: Annotated[float, Field(gt=0)] = Field(
        default=600.0,
        description="Deadline of the whole request, all attempts and the stream included.",
    )


class TimeoutOverrides(_Strict):
    """A route class's own stream timeouts; unset fields keep the top-level ``timeouts``."""

    first_token_s: Annotated[float, Field(gt=0)] | None = Field(
        default=None,
        description="Time to first token for this class; None: timeouts.first_token_s.",
    )
    inter_token_s: Annotated[float, Field(gt=0)] | None = Field(
        default=None,
        description="Longest gap between tokens for this class; None: timeouts.inter_token_s.",
    )
    total_s: Annotated[float, Field(gt=0)] | None = Field(
        default=None, description="Whole-request deadline for this class; None: timeouts.total_s."
    )


class RetryConfig(_Strict):
    """Retries (and hedges) before the first token, bounded by a budget over the client rate."""

    # Each client request adds this many retry tokens; a retry or hedge spends one.
    budget_ratio: Annotated[float, Field(ge=0, le=10)] = Field(
        default=0.2,
        description="Retry tokens each client request adds; a retry or hedge spends one (0.2: at most 20% extra attempts).",
    )
    # Tokens the bucket starts with and can hold, so a quiet gateway can still retry a few.
    budget_burst: Annotated[float, Field(ge=0)] = Field(
        default=10.0,
        description="Tokens the budget starts with and can hold, so a quiet gateway can still retry a few.",
    )
    # A backend's Retry-After keeps it out of the candidates for that long (capped here).
    honour_retry_after: bool = Field(
        default=True,
        description="Keep a backend that answered Retry-After out of the candidates for that long.",
    )
    max_retry_after_s: Annotated[float, Field(ge=0)] = Field(
        default=30.0,
        description="Cap on how long a backend's Retry-After keeps it out, in seconds.",
    )


class HedgingConfig(_Strict):
    """Opt-in: start the next candidate too when no first token has come by the hedge delay."""

    enabled: bool = Field(
        default=False,
        description="Start the next candidate too when no first token has come by the hedge delay; the first to answer wins.",
    )
    # None: the first candidate's predicted p90 TTFT (falls back to ``fallback_delay_ms``).
    delay_ms: Annotated[float, Field(gt=0)] | None = Field(
        default=None,
        description="Fixed hedge delay in ms. None: the first candidate's predicted p90 TTFT.",
    )
    min_delay_ms: Annotated[float, Field(ge=0)] = Field(
        default=20.0, description="Shortest hedge delay, in ms, whatever the prediction says."
    )
    fallback_delay_ms: Annotated[float, Field(gt=0)] = Field(
        default=500.0,
        description="Hedge delay when the policy predicts no TTFT and none has been observed, in ms.",
    )
    max_hedges: Annotated[int, Field(ge=1, le=4)] = Field(
        default=1, description="Extra attempts started by hedging per request."
    )


class RouteClassConfig(_Strict):
    """Overrides for one latency class (``interactive`` or ``long_form``)."""

    timeouts: TimeoutOverrides = Field(
        default=TimeoutOverrides(),
        description="Timeouts for this class, where they differ from 'timeouts'.",
    )
    hedging: HedgingConfig | None = Field(
        default=None, description="Hedging for this class; None: the top-level 'hedging'."
    )


class StreamsConfig(_Strict):
    """How a stream is written to the client."""

    # Bytes one stream may hold in the gateway (upstream read buffer + client write buffer).
    buffer_bytes: Annotated[int, Field(ge=4096)] = Field(
        default=64 * 1024,
        description="Bytes one stream may hold in the gateway (upstream read buffer plus client write buffer).",
    )
    # A client that has not taken the buffered bytes within this long is cut off.
    write_timeout_s: Annotated[float, Field(gt=0)] = Field(
        default=30.0,
        description="A client that has not taken the buffered bytes within this long is cut off. "
        f"{GIVEN_BACK}",
    )
    # Kernel send buffer of an SSE response's socket (token streams need little; a fixed size
    # keeps a stalled client from parking megabytes in the kernel). None: the OS autotunes it.
    send_buffer_bytes: Annotated[int, Field(ge=4096)] | None = Field(
        default=64 * 1024,
        description="Kernel send buffer of an SSE response's socket (a fixed size keeps a stalled client from parking megabytes in the kernel). None: the OS autotunes it.",
    )
    # never: status and headers wait for the first token (failures stay invisible);
    # when_waiting: commit a 200 once the first keepalive is due; always: at once.
    early_headers: Literal["never", "when_waiting", "always"] = Field(
        default="never",
        description="never: status and headers wait for the first token (failures stay invisible); when_waiting: commit a 200 once the first keepalive is due; always: at once.",
    )
    keepalive_s: Annotated[float, Field(gt=0)] | None = Field(
        default=None,
        description="Send an SSE comment this often while waiting for the first token (needs early_headers other than never). None: no keepalives.",
    )

    @model_validator(mode="after")
    def _keepalive_needs_headers(self) -> StreamsConfig:
        if self.keepalive_s is not None and self.early_headers == "never":
            raise ValueError(
                "keepalive_s needs the response headers out before the first token: "
                "set early_headers to 'when_waiting' or 'always'"
            )
        return self


class GateLimits(_Strict):
    max_concurrent: Annotated[int, Field(ge=1)] = Field(description="Requests served at once.")
    max_queue: Annotated[int, Field(ge=0)] = Field(
        default=0,
        description="Requests waiting for a slot beyond those; more get an immediate 429/503.",
    )


class AdmissionConfig(_Strict):
    """Bounded concurrency and queue per model and per tenant; beyond: a fast 503/429."""

    per_model: GateLimits | None = Field(
        default=None,
        description="Limits every model gets unless 'models' names it. None: unlimited.",
    )
    per_tenant: GateLimits | None = Field(
        default=None,
        description="Limits every tenant gets unless 'tenants' names it. None: unlimited.",
    )
    models: dict[str, GateLimits] = Field(
        default_factory=dict, description="Limits for particular models (public name -> limits)."
    )
    tenants: dict[str, GateLimits] = Field(
        default_factory=dict,
        description="Limits for particular tenants (X-Meridian-Tenant -> limits).",
    )
    queue_timeout_s: Annotated[float, Field(gt=0)] = Field(
        default=2.0, description="Longest a request waits in an admission queue before a 503."
    )
    retry_after_s: Annotated[float, Field(gt=0)] = Field(
        default=1.0, description="Retry-After sent with an admission refusal (429/503), in seconds."
    )


class DrainConfig(_Strict):
    """SIGTERM: readiness fails, then new requests get 503 and running ones get this long."""

    readiness_grace_s: Annotated[float, Field(ge=0)] = Field(
        default=0.0,
        description="After SIGTERM, how long /readyz fails while requests are still accepted (for load balancers to notice).",
    )
    deadline_s: Annotated[float, Field(ge=0)] = Field(
        default=30.0,
        description="How long running requests get to finish after draining starts; then they are cut.",
    )


class ReloadConfig(_Strict):
    """SIGHUP always reloads; with a poll interval the config file's changes do too."""

    watch_interval_s: Annotated[float, Field(gt=0)] | None = Field(
        default=2.0,
        description="How often the config file is checked for changes, in seconds. None: reload on SIGHUP only.",
    )


class LimitsConfig(_Strict):
    max_body_bytes: Annotated[int, Field(ge=1024)] = Field(
        default=4 * 1024 * 1024, description="Largest request body accepted; larger gets 413."
    )
    max_attempts: Annotated[int, Field(ge=1, le=10)] = Field(
        default=3,
        description="Upstream attempts per request (first try, retries and hedges together).",
    )
