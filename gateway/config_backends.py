"""The fleet sections of the operator file: the listener, regions, secrets and backends with
their capacity (re-exported by :mod:`gateway.config`, which holds the file as a whole)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AnyHttpUrl,
    Field,
    field_validator,
    model_validator,
)

from gateway.auth.tls import HopTlsConfig, ListenTlsConfig
from gateway.backend_urls import check_backend_url
from gateway.config_base import ConfigError
from gateway.config_base import StrictSection as _Strict
from gateway.pricing import PriceConfig
from gateway.signals.rtt_policy import RttPolicy
from routing.types import BackendKind, BackendSpec

Engine = Literal["vllm", "sglang", "tgi", "llamacpp", "openai", "meridian", "unknown"]


class GrpcConnectionsConfig(_Strict):
    """How long a gRPC client's connection lives (gRPC's A9; both engines)."""

    max_age_s: Annotated[float, Field(gt=0)] | None = Field(
        default=600.0,
        description="Close each gRPC connection gracefully (GOAWAY; its calls finish) this long "
        "(+-10%) after it opened; the client reconnects and the kernel or a load balancer places "
        "it afresh, so one client's calls move between workers and replicas. None: never.",
    )
    max_age_grace_s: Annotated[float, Field(gt=0)] | None = Field(
        default=None,
        description="Calls still running this long after a connection's max age end UNAVAILABLE "
        "and it closes. None: they run to their end.",
    )
    max_idle_s: Annotated[float, Field(gt=0)] | None = Field(
        default=None,
        description="Close a gRPC connection gracefully once it has had no call for this long "
        "(it frees its place under door.max_connections). None: never.",
    )


class ListenConfig(_Strict):
    host: str = Field(
        default="127.0.0.1", description="Address the HTTP (and gRPC) listeners bind."
    )
    port: Annotated[int, Field(ge=0, le=65535)] = Field(
        default=8080, description="HTTP port (0: any free port)."
    )
    grpc_port: Annotated[int, Field(ge=0, le=65535)] | None = Field(
        default=None, description="gRPC port; None: no gRPC listener (0: any free port)."
    )
    grpc_engine: Literal["grpcio", "h2"] = Field(
        default="h2",
        description="What serves the gRPC listener: 'h2' (gRPC over HTTP/2 on the event loop "
        "itself, gateway/grpc_h2) or 'grpcio' (grpc.aio, with its C-core poller thread); the "
        "same servicers, health and reflection. h2 adds less TTFT and CPU per call "
        "(proto/README.md, 'Two engines').",
    )
    grpc_connections: GrpcConnectionsConfig = Field(
        default_factory=GrpcConnectionsConfig,
        description="Bounds on a gRPC connection's age and idleness.",
    )
    tls: ListenTlsConfig | None = Field(
        default=None,
        description="Serve the HTTP and gRPC listeners over TLS, optionally asking for client "
        "certificates (mTLS from other gateways; gateway/auth/tls.py). None: plain HTTP.",
    )


class Location(_Strict):
    lat: Annotated[float, Field(ge=-90, le=90)] = Field(description="Latitude in degrees.")
    lon: Annotated[float, Field(ge=-180, le=180)] = Field(description="Longitude in degrees.")


class RegionConfig(_Strict):
    name: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")] = Field(
        description="Region name (lower case, digits, dashes), as backends and placement name it."
    )
    location: Location | None = Field(
        default=None, description="Where the region is, for client-to-region distance."
    )
    # Round trip from this gateway to the region when nothing has been measured yet.
    rtt_ms: Annotated[float, Field(ge=0)] | None = Field(
        default=None,
        description="Round trip from this gateway to the region, in ms, when not probed.",
    )


class SecretRef(_Strict):
    """Where a secret lives. Exactly one of ``env`` or ``file``."""

    env: str | None = Field(
        default=None, description="Name of an environment variable holding the secret."
    )
    file: Path | None = Field(
        default=None, description="Path of a file holding the secret (trailing newline ignored)."
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> SecretRef:
        if (self.env is None) == (self.file is None):
            raise ValueError("give exactly one of 'env' (variable name) or 'file' (path)")
        return self

    def resolve(self) -> str:
        if self.env is not None:
            value = os.environ.get(self.env)
            if value is None:
                raise ConfigError(f"environment variable {self.env} is not set")
            return value.strip()
        path = self.file
        if path is None:  # the validator above refuses this; never a crash
            raise ConfigError("a secret needs 'env' or 'file'")
        try:
            return path.read_text().strip()
        except OSError as exc:
            raise ConfigError(f"cannot read secret file {path}: {exc.strerror}") from exc


class CapacityConfig(_Strict):
    """What cannot be observed cheaply: the engine's nominal speeds and the serverless policy."""

    max_num_seqs: Annotated[int, Field(ge=1)] = Field(
        default=256,
        description="Sequences the engine batches at once (vLLM --max-num-seqs): beyond it requests queue.",
    )
    prefill_tokens_per_s: Annotated[float, Field(gt=0)] = Field(
        default=10_000.0,
        description="Prompt tokens the engine prefills per second (the prefill term of predicted TTFT).",
    )
    itl_ms: Annotated[float, Field(gt=0)] = Field(
        default=20.0,
        description="One engine step (inter-token latency) at a half-full batch, in ms.",
    )
    first_token_overhead_ms: Annotated[float, Field(ge=0)] = Field(
        default=10.0,
        description="Fixed cost of a request's first token beyond prefill (scheduling, sampling), in ms.",
    )
    cold_start_ms: Annotated[float, Field(ge=0)] = Field(
        default=0.0,
        description="Serverless: time from scaled-to-zero to serving, in ms. 0 on a serverless backend is almost certainly wrong (check-config warns).",
    )
    idle_timeout_s: Annotated[float, Field(gt=0)] | None = Field(
        default=None,
        description="Serverless: idle time after which the platform scales it to zero. None: never (or unknown).",
    )
    # Token budget of one engine step (vLLM max_num_batched_tokens; chunked prefill).
    max_num_batched_tokens: Annotated[int, Field(ge=1)] = Field(
        default=2048,
        description="Token budget of one engine step (vLLM max_num_batched_tokens; chunked prefill).",
    )


class BackendConfig(_Strict):
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")] = Field(
        description="Unique name of this backend: in metrics, logs, X-Meridian-Route and Server-Timing."
    )
    region: str = Field(
        description="The region it runs in (one of 'regions' when those are listed)."
    )
    kind: BackendKind = Field(
        default=BackendKind.DEDICATED,
        description="dedicated (always on), serverless (may scale to zero: cold starts) or gateway (another Meridian).",
    )
    url: AnyHttpUrl = Field(
        description="Base URL of its OpenAI-compatible API, with or without the trailing /v1. No credentials in it: use api_key."
    )
    engine: Engine = Field(
        default="vllm",
        description="The serving engine, for its metric names (vllm, sglang, tgi, llamacpp); unknown for hosted APIs (not scraped).",
    )
    models: Annotated[list[str], Field(min_length=1)] = Field(
        description="Public names of the models it serves (what clients send; model_ids maps them to the backend's own ids)."
    )
    apis: list[Literal["chat", "completions", "embeddings", "responses", "messages"]] = Field(
        default=["chat", "completions", "embeddings"],
        description="Which APIs this backend serves. 'responses' (the OpenAI Responses API) "
        "and 'messages' (Anthropic Messages) must be declared; Messages requests also reach "
        "backends with 'chat', translated to chat completions.",
    )
    model_ids: dict[str, str] = Field(
        default_factory=dict,
        description="What this backend calls each public model, where it differs: public name "
        "(as in 'models') -> the backend's own model id (llama-server's .gguf path, vLLM's "
        "--served-model-name). The request body's 'model' is rewritten only for these.",
    )
    api_key: SecretRef | None = Field(
        default=None,
        description="The key sent upstream as a bearer token: {env: VAR} or {file: /path}, never inline.",
    )
    capacity: CapacityConfig = Field(
        default=CapacityConfig(),
        description="What cannot be observed cheaply: engine speeds, batch size, serverless cold start.",
    )
    max_connections: Annotated[int, Field(ge=1)] = Field(
        default=1024, description="Most open connections to this backend."
    )
    # Let canary probes reach a serverless backend (keeps it warm: costs money, hides cold starts).
    keep_warm: bool = Field(
        default=False,
        description="Let canary probes reach a serverless backend: keeps it warm, costs money, hides cold starts.",
    )
    allow_link_local: bool = Field(
        False,
        description="Allow a link-local or cloud-metadata host (169.254.0.0/16, fe80::/10, "
        "metadata.google.internal) as this backend's URL; refused by default.",
    )
    price: PriceConfig | None = Field(
        default=None, description="what requests cost here (slo_cost)"
    )
    rtt: RttPolicy = Field(
        default=RttPolicy(),
        description="the RTT routing uses: the probe's, + offset_ms, or the region's with "
        "probes health-only, or pin_ms (gateway/signals/rtt_policy.py)",
    )
    tls: HopTlsConfig | None = Field(
        default=None,
        description="TLS to this backend (https url): the CA its certificate must chain to "
        "and a client certificate to present (mTLS between gateway hops; gateway/auth/tls.py).",
    )

    @model_validator(mode="after")
    def _model_ids_name_served_models(self) -> BackendConfig:
        unknown = sorted(set(self.model_ids) - set(self.models))
        if unknown:
            raise ValueError(
                f"model_ids names models this backend does not list in 'models': "
                f"{', '.join(unknown)}"
            )
        return self

    @field_validator("url")
    @classmethod
    def _no_credentials_in_url(cls, url: AnyHttpUrl) -> AnyHttpUrl:
        if url.username or url.password:
            raise ValueError("credentials do not belong in the URL; use api_key: {env: ...}")
        return url

    @model_validator(mode="after")
    def _tls_needs_https(self) -> BackendConfig:
        if self.tls is not None and self.url.scheme != "https":
            raise ValueError("tls: needs an https:// url")
        return self

    @model_validator(mode="after")
    def _url_policy(self) -> BackendConfig:
        try:
            check_backend_url(self.url, self.allow_link_local)
        except ValueError as exc:
            raise ValueError(f"url: {exc}") from None
        return self

    def base_url(self) -> str:
        """The URL under which ``/v1/chat/completions`` lives, without a trailing slash."""
        text = str(self.url).rstrip("/")
        return text[: -len("/v1")] if text.endswith("/v1") else text

    def offered_apis(self) -> frozenset[str]:
        """The APIs clients may reach it by: ``apis``, plus Messages wherever chat is served
        (translated to chat completions)."""
        apis = frozenset(self.apis)
        return apis | {"messages"} if "chat" in apis else apis

    def spec(self) -> BackendSpec:
        cap = self.capacity
        return BackendSpec(
            name=self.name,
            region=self.region,
            kind=self.kind,
            models=frozenset(self.models),
            max_num_seqs=cap.max_num_seqs,
            prefill_tokens_per_s=cap.prefill_tokens_per_s,
            itl_ms=cap.itl_ms,
            first_token_overhead_ms=cap.first_token_overhead_ms,
            cold_start_ms=cap.cold_start_ms,
            idle_timeout_s=cap.idle_timeout_s,
            max_num_batched_tokens=cap.max_num_batched_tokens,
            price=None if self.price is None else self.price.price(),
            apis=self.offered_apis(),
        )
