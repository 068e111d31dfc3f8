"""The operator's YAML configuration: typed, validated, with errors that name file and key.

``load_config(path)`` is the only way a config enters the gateway; everything downstream gets a
frozen, validated :class:`GatewayConfig`. Secrets are never inline: a backend's API key is a
reference to an environment variable or a file, resolved at start-up.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AnyHttpUrl,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
    field_validator,
    model_validator,
)

from gateway.admin.config import AdminConfig
from gateway.auth.config import AuthConfig
from gateway.backend_urls import check_backend_url
from gateway.chain.config import ChainConfig
from gateway.door.config import DoorConfig
from gateway.model_names import check_aliases
from gateway.objectives import ObjectivesConfig
from gateway.observability.config import LoggingConfig, TracingConfig
from gateway.placement import PlacementConfig
from gateway.pricing import PriceConfig
from gateway.quota.config import QuotaConfig
from gateway.signals.hub import SignalsConfig
from gateway.signals.rtt_policy import RttPolicy
from gateway.state.config import StateConfig
from gateway.tokenizer import check_tokenizer_paths
from routing.errors import RoutingError
from routing.policies import POLICIES, build_router
from routing.types import BackendKind, BackendSpec

Engine = Literal["vllm", "sglang", "tgi", "llamacpp", "openai", "meridian", "unknown"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


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
        )


class TimeoutsConfig(_Strict):
    connect_s: Annotated[float, Field(gt=0)] = Field(
        default=5.0, description="Connecting to a backend, in seconds."
    )
    first_token_s: Annotated[float, Field(gt=0)] = Field(
        default=60.0,
        description="An attempt without a first token within this long fails over to the next candidate.",
    )
    inter_token_s: Annotated[float, Field(gt=0)] = Field(
        default=60.0,
        description="A stream with no event for this long mid-stream is broken off (an error event, never a silent end).",
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
        description="A client that has not taken the buffered bytes within this long is cut off.",
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


class RoutingConfig(_Strict):
    policy: str = Field(
        default="predicted_ttft",
        description="The routing policy: predicted_ttft (Meridian's), or a baseline to compare "
        "against. Its parameters go in 'params'.",
        json_schema_extra={"enum": list[JsonValue](sorted(POLICIES))},  # build_router validates
    )
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="The policy's own parameters (validated by the policy; see routing/policies).",
    )
    seed: int = Field(
        default=0,
        description="Seed of the policy's random choices (ties, exploration), for reproducible runs.",
    )
    prefix_sweep_interval_s: float = Field(
        default=30.0,
        gt=0,
        description=(
            "How often the prefix index's expired entries are swept away in the background "
            "(incrementally, never stalling requests). An entry outlives its TTL by at most this."
        ),
    )


class GatewayConfig(_Strict):
    """The whole operator file."""

    version: Literal[1] = Field(
        default=1,
        description="Format version of this file. 1 is the current format; a file without "
        "'version' is read as 1 (docs/config-migration.md says what changes between versions).",
    )
    region: str | None = Field(None, description="Region this gateway runs in.")
    listen: ListenConfig = Field(
        default=ListenConfig(),
        description="Where the gateway listens: HTTP host and port, and the gRPC port.",
    )
    regions: list[RegionConfig] = Field(
        default_factory=list,
        description="The regions backends live in, with their location or round trip from this gateway. Optional; when given, every backend's region must be one of them.",
    )
    backends: Annotated[list[BackendConfig], Field(min_length=1)] = Field(
        description="The serving endpoints Meridian routes to (at least one)."
    )
    tokenizers: dict[str, str] = Field(
        default_factory=dict,
        description="A model's own tokenizer, for real prompt lengths and token-aligned prefix "
        "blocks: public model name -> path of its local tokenizer.json (read once at load with "
        "the 'tokenizers' package, never downloaded). Without one: UTF-8 bytes / 4.",
    )
    model_aliases: dict[str, str] = Field(
        default_factory=dict,
        description="More names for a public model: alias -> a name some backend lists in "
        "'models'. Requests by alias route, log and count as that model.",
    )
    routing: RoutingConfig = Field(
        default=RoutingConfig(),
        description="How a backend is chosen: the policy, its parameters and the random seed.",
    )
    timeouts: TimeoutsConfig = Field(
        default=TimeoutsConfig(),
        description="Upstream timeouts: connect, first token, between tokens, whole request.",
    )
    limits: LimitsConfig = Field(
        default=LimitsConfig(), description="Request body size and upstream attempts per request."
    )
    retry: RetryConfig = Field(
        default=RetryConfig(),
        description="Retries before the first token and the retry budget that bounds them.",
    )
    hedging: HedgingConfig = Field(
        default=HedgingConfig(),
        description="Opt-in hedging: also start the next candidate when the first is slow to its first token.",
    )
    route_classes: dict[Literal["interactive", "long_form"], RouteClassConfig] = Field(
        description="Timeouts and hedging per latency class (interactive, long_form), overriding the defaults.",
        default_factory=dict,
    )
    streams: StreamsConfig = Field(
        default=StreamsConfig(),
        description="How streams are written to clients: buffers, write timeout, early headers, keepalives.",
    )
    admission: AdmissionConfig = Field(
        default=AdmissionConfig(),
        description="Bounded concurrency and queueing per model and per tenant.",
    )
    drain: DrainConfig = Field(default=DrainConfig(), description="Graceful shutdown on SIGTERM.")
    reload: ReloadConfig = Field(
        default=ReloadConfig(),
        description="Reloading this file while running (SIGHUP or file change).",
    )
    signals: SignalsConfig = Field(
        default=SignalsConfig(),
        description="Live signals routing predicts from: probes, engine metrics, GeoIP, outlier detection.",
    )
    state: StateConfig = Field(
        default=StateConfig(),
        description="State shared between replicas: in memory (one process) or Redis (gateway/state/README.md).",
    )
    chain: ChainConfig = Field(
        default=ChainConfig(),
        description="Gateways forwarding to gateways: this gateway's id, hop limit and how it reads downstream summaries (gateway/chain).",
    )
    placement: PlacementConfig = Field(
        default=PlacementConfig(),
        description="Data residency and region preferences per tenant or client origin.",
    )
    auth: AuthConfig = Field(
        default_factory=lambda: AuthConfig(),
        description="Who may call: API keys, tenants from keys, hop keys (docs/security.md).",
    )
    quotas: QuotaConfig = Field(
        default_factory=lambda: QuotaConfig(),
        description="Requests/s and tokens/minute per API key and tenant (gateway/quota).",
    )
    door: DoorConfig = Field(
        default_factory=lambda: DoorConfig(),
        description="Client timeouts and connection caps at the HTTP door (docs/security.md).",
    )
    admin: AdminConfig = Field(
        default_factory=lambda: AdminConfig(),
        description="The admin listener: state, metrics, readiness details (gateway/admin).",
    )
    logging: LoggingConfig = Field(
        default=LoggingConfig(), description="Request log and log line format."
    )
    tracing: TracingConfig = Field(
        default=TracingConfig(), description="OpenTelemetry traces (off unless an exporter)."
    )
    objectives: ObjectivesConfig = Field(
        default=ObjectivesConfig(),
        description="TTFT objectives per tenant class (gateway/objectives.py)",
    )

    @model_validator(mode="after")
    def _cross_references(self) -> GatewayConfig:
        names = [b.name for b in self.backends]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"backend names must be unique; repeated: {', '.join(dupes)}")
        known = {r.name for r in self.regions}
        if known:
            for backend in self.backends:
                if backend.region not in known:
                    raise ValueError(
                        f"backend {backend.name!r} names region {backend.region!r}, which is not "
                        f"in 'regions' ({', '.join(sorted(known))})"
                    )
            if self.region is not None and self.region not in known:
                raise ValueError(f"'region' {self.region!r} is not in 'regions'")
        unknown = sorted(self.placement.regions_named() - known) if known else []
        if unknown:
            raise ValueError(f"placement names regions not in 'regions': {', '.join(unknown)}")
        geo = self.signals.geo
        if not geo.regions and geo.default_origin is not None and geo.default_origin not in known:
            raise ValueError(
                f"signals.geo.default_origin {geo.default_origin!r} is not in 'regions' "
                f"({', '.join(sorted(known)) or 'none configured'})"
            )
        served = {m for b in self.backends for m in b.models}
        check_aliases(self.model_aliases, served)
        check_tokenizer_paths(self.tokenizers, served)
        try:
            build_router(self.routing.policy, self.routing.params, self.routing.seed)
        except RoutingError as exc:
            raise ValueError(f"routing: {exc}") from None
        return self

    def models(self) -> list[str]:
        """Every name clients may ask for: the backends' public names and their aliases."""
        return sorted({m for b in self.backends for m in b.models} | set(self.model_aliases))


class ConfigError(Exception):
    """A configuration problem an operator can fix; the message says where and what."""


def _format_location(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def parse_config(data: Any, source: str = "<config>") -> GatewayConfig:
    try:
        return GatewayConfig.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = tuple(
                p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-"))
            )
            lines.append(f"{source}: {_format_location(loc)}: {err['msg']}")
        raise ConfigError("\n".join(lines)) from None


def load_config(path: str | Path) -> GatewayConfig:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return parse_config(data, str(path))


SCHEMA_ID = "urn:meridian:gateway-config:v1"


def json_schema() -> dict[str, Any]:
    """The file format as JSON Schema (2020-12), for editors: ``# yaml-language-server:
    $schema=...`` at the top of a config file points them at docs/config.schema.json."""
    schema = GatewayConfig.model_json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        **schema,
        "title": "Meridian gateway configuration",
    }
