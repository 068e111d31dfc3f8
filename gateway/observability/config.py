"""The ``logging:`` section of the gateway config: the request log and the log line format."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LoggingConfig(_Section):
    format: Literal["auto", "text", "json"] = Field(
        default="auto",
        description="Log line format: json (one object a line), text (key=value), or auto: "
        "json unless stderr is a terminal.",
    )
    requests: bool = Field(
        default=True,
        description="Write one request-log line per request when it ends (off switch).",
    )
    sample_rate: float = Field(
        default=1.0,
        ge=0.0,
        le=1.0,
        description="Share of successful requests that get a request-log line (chosen by a "
        "hash of the request id, so every hop of a chain keeps the same ones). Failed and "
        "cancelled requests are always logged.",
    )
    prefix_hashes: bool = Field(
        default=False,
        description="Also write each routed request's prefix block hashes (hex, tenant-salted, "
        "no prompt text; about 17 bytes per block of 16 tokens) so `meridian sim --replay` of "
        "this log shares prefixes as the traffic did. Off by default: a hash lets whoever "
        "holds the log test whether a prompt they can guess was sent.",
    )


class TracingConfig(_Section):
    exporter: Literal["none", "otlp", "console"] = Field(
        default="none",
        description="Where spans go: none (tracing off: no span is built, traceparent is still "
        "continued), otlp (OTLP over HTTP; needs the 'otlp' extra: pip install "
        "'meridian-gateway[otlp]'), console (stdout, for a look).",
    )
    endpoint: str | None = Field(
        default=None,
        description="OTLP/HTTP traces endpoint, e.g. http://collector:4318/v1/traces (default: "
        "the exporter's, or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT).",
    )
    sample_ratio: float = Field(
        default=1.0,
        ge=0.0,
        le=1.0,
        description="Share of traces this gateway starts that are sampled; a request arriving "
        "with a traceparent follows its caller's sampled flag.",
    )
    service_name: str = Field(default="meridian", description="The spans' service.name.")
