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
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 8080
    grpc_port: Annotated[int, Field(ge=0, le=65535)] | None = None


class Location(_Strict):
    lat: Annotated[float, Field(ge=-90, le=90)]
    lon: Annotated[float, Field(ge=-180, le=180)]


class RegionConfig(_Strict):
    name: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")]
    location: Location | None = None
    # Round trip from this gateway to the region when nothing has been measured yet.
    rtt_ms: Annotated[float, Field(ge=0)] | None = None


class SecretRef(_Strict):
    """Where a secret lives. Exactly one of ``env`` or ``file``."""

    env: str | None = None
    file: Path | None = None

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
        assert self.file is not None
        try:
            return self.file.read_text().strip()
        except OSError as exc:
            raise ConfigError(f"cannot read secret file {self.file}: {exc.strerror}") from exc


class CapacityConfig(_Strict):
    """What cannot be observed cheaply: the engine's nominal speeds and the serverless policy."""

    max_num_seqs: Annotated[int, Field(ge=1)] = 256
    prefill_tokens_per_s: Annotated[float, Field(gt=0)] = 10_000.0
    itl_ms: Annotated[float, Field(gt=0)] = 20.0  # one engine step at a half-full batch
    first_token_overhead_ms: Annotated[float, Field(ge=0)] = 10.0
    cold_start_ms: Annotated[float, Field(ge=0)] = 0.0
    idle_timeout_s: Annotated[float, Field(gt=0)] | None = None
    # Token budget of one engine step (vLLM max_num_batched_tokens; chunked prefill).
    max_num_batched_tokens: Annotated[int, Field(ge=1)] = 2048


class BackendConfig(_Strict):
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")]
    region: str
    kind: BackendKind = BackendKind.DEDICATED
    url: AnyHttpUrl
    engine: Engine = "vllm"
    models: Annotated[list[str], Field(min_length=1)]
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
    api_key: SecretRef | None = None
    capacity: CapacityConfig = CapacityConfig()
    max_connections: Annotated[int, Field(ge=1)] = 1024
    # Let canary probes reach a serverless backend (keeps it warm: costs money, hides cold starts).
    keep_warm: bool = False
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
    connect_s: Annotated[float, Field(gt=0)] = 5.0
    first_token_s: Annotated[float, Field(gt=0)] = 60.0
    inter_token_s: Annotated[float, Field(gt=0)] = 60.0
    total_s: Annotated[float, Field(gt=0)] = 600.0


class TimeoutOverrides(_Strict):
    """A route class's own stream timeouts; unset fields keep the top-level ``timeouts``."""

    first_token_s: Annotated[float, Field(gt=0)] | None = None
    inter_token_s: Annotated[float, Field(gt=0)] | None = None
    total_s: Annotated[float, Field(gt=0)] | None = None


class RetryConfig(_Strict):
    """Retries (and hedges) before the first token, bounded by a budget over the client rate."""

    # Each client request adds this many retry tokens; a retry or hedge spends one.
    budget_ratio: Annotated[float, Field(ge=0, le=10)] = 0.2
    # Tokens the bucket starts with and can hold, so a quiet gateway can still retry a few.
    budget_burst: Annotated[float, Field(ge=0)] = 10.0
    # A backend's Retry-After keeps it out of the candidates for that long (capped here).
    honour_retry_after: bool = True
    max_retry_after_s: Annotated[float, Field(ge=0)] = 30.0


class HedgingConfig(_Strict):
    """Opt-in: start the next candidate too when no first token has come by the hedge delay."""

    enabled: bool = False
    # None: the first candidate's predicted p90 TTFT (falls back to ``fallback_delay_ms``).
    delay_ms: Annotated[float, Field(gt=0)] | None = None
    min_delay_ms: Annotated[float, Field(ge=0)] = 20.0
    fallback_delay_ms: Annotated[float, Field(gt=0)] = 500.0
    max_hedges: Annotated[int, Field(ge=1, le=4)] = 1


class RouteClassConfig(_Strict):
    """Overrides for one latency class (``interactive`` or ``long_form``)."""

    timeouts: TimeoutOverrides = TimeoutOverrides()
    hedging: HedgingConfig | None = None


class StreamsConfig(_Strict):
    """How a stream is written to the client."""

    # Bytes one stream may hold in the gateway (upstream read buffer + client write buffer).
    buffer_bytes: Annotated[int, Field(ge=4096)] = 64 * 1024
    # A client that has not taken the buffered bytes within this long is cut off.
    write_timeout_s: Annotated[float, Field(gt=0)] = 30.0
    # Kernel send buffer of an SSE response's socket (token streams need little; a fixed size
    # keeps a stalled client from parking megabytes in the kernel). None: the OS autotunes it.
    send_buffer_bytes: Annotated[int, Field(ge=4096)] | None = 64 * 1024
    # never: status and headers wait for the first token (failures stay invisible);
    # when_waiting: commit a 200 once the first keepalive is due; always: at once.
    early_headers: Literal["never", "when_waiting", "always"] = "never"
    keepalive_s: Annotated[float, Field(gt=0)] | None = None

    @model_validator(mode="after")
    def _keepalive_needs_headers(self) -> StreamsConfig:
        if self.keepalive_s is not None and self.early_headers == "never":
            raise ValueError(
                "keepalive_s needs the response headers out before the first token: "
                "set early_headers to 'when_waiting' or 'always'"
            )
        return self


class GateLimits(_Strict):
    max_concurrent: Annotated[int, Field(ge=1)]
    max_queue: Annotated[int, Field(ge=0)] = 0


class AdmissionConfig(_Strict):
    """Bounded concurrency and queue per model and per tenant; beyond: a fast 503/429."""

    per_model: GateLimits | None = None
    per_tenant: GateLimits | None = None
    models: dict[str, GateLimits] = Field(default_factory=dict)
    tenants: dict[str, GateLimits] = Field(default_factory=dict)
    queue_timeout_s: Annotated[float, Field(gt=0)] = 2.0
    retry_after_s: Annotated[float, Field(gt=0)] = 1.0


class DrainConfig(_Strict):
    """SIGTERM: readiness fails, then new requests get 503 and running ones get this long."""

    readiness_grace_s: Annotated[float, Field(ge=0)] = 0.0
    deadline_s: Annotated[float, Field(ge=0)] = 30.0


class ReloadConfig(_Strict):
    """SIGHUP always reloads; with a poll interval the config file's changes do too."""

    watch_interval_s: Annotated[float, Field(gt=0)] | None = 2.0


class LimitsConfig(_Strict):
    max_body_bytes: Annotated[int, Field(ge=1024)] = 4 * 1024 * 1024
    max_attempts: Annotated[int, Field(ge=1, le=10)] = 3


class RoutingConfig(_Strict):
    policy: str = Field(
        default="predicted_ttft",
        description="The routing policy: predicted_ttft (Meridian's), or a baseline to compare "
        "against. Its parameters go in 'params'.",
        json_schema_extra={"enum": list[JsonValue](sorted(POLICIES))},  # build_router validates
    )
    params: dict[str, Any] = Field(default_factory=dict)
    seed: int = 0
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
    listen: ListenConfig = ListenConfig()
    regions: list[RegionConfig] = Field(default_factory=list)
    backends: Annotated[list[BackendConfig], Field(min_length=1)]
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
    routing: RoutingConfig = RoutingConfig()
    timeouts: TimeoutsConfig = TimeoutsConfig()
    limits: LimitsConfig = LimitsConfig()
    retry: RetryConfig = RetryConfig()
    hedging: HedgingConfig = HedgingConfig()
    route_classes: dict[Literal["interactive", "long_form"], RouteClassConfig] = Field(
        default_factory=dict
    )
    streams: StreamsConfig = StreamsConfig()
    admission: AdmissionConfig = AdmissionConfig()
    drain: DrainConfig = DrainConfig()
    reload: ReloadConfig = ReloadConfig()
    signals: SignalsConfig = SignalsConfig()
    state: StateConfig = StateConfig()  # shared between replicas (gateway/state/README.md)
    chain: ChainConfig = ChainConfig()  # gateways forwarding to gateways (gateway/chain)
    placement: PlacementConfig = PlacementConfig()
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
