"""The operator's YAML configuration: typed, validated, with errors that name file and key.

``load_config(path)`` is the only way a config enters the gateway; everything downstream gets a
frozen, validated :class:`GatewayConfig`. Secrets are never inline: a backend's API key is a
reference to an environment variable or a file, resolved at start-up.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    Field,
    JsonValue,
    ValidationError,
    model_validator,
)

from gateway.admin.config import AdminConfig
from gateway.auth.config import AuthConfig
from gateway.chain.config import ChainConfig
from gateway.config_backends import (
    BackendConfig as BackendConfig,
)
from gateway.config_backends import (
    CapacityConfig as CapacityConfig,
)
from gateway.config_backends import (
    Engine as Engine,
)
from gateway.config_backends import (
    ListenConfig as ListenConfig,
)
from gateway.config_backends import (
    Location as Location,
)
from gateway.config_backends import (
    RegionConfig as RegionConfig,
)
from gateway.config_backends import (
    SecretRef as SecretRef,
)
from gateway.config_base import ConfigError as ConfigError
from gateway.config_base import StrictSection as _Strict
from gateway.config_policies import (
    AdmissionConfig as AdmissionConfig,
)
from gateway.config_policies import (
    DrainConfig as DrainConfig,
)
from gateway.config_policies import (
    GateLimits as GateLimits,
)
from gateway.config_policies import (
    HedgingConfig as HedgingConfig,
)
from gateway.config_policies import (
    LimitsConfig as LimitsConfig,
)
from gateway.config_policies import (
    ReloadConfig as ReloadConfig,
)
from gateway.config_policies import (
    RetryConfig as RetryConfig,
)
from gateway.config_policies import (
    RouteClassConfig as RouteClassConfig,
)
from gateway.config_policies import (
    StreamsConfig as StreamsConfig,
)
from gateway.config_policies import (
    TimeoutOverrides as TimeoutOverrides,
)
from gateway.config_policies import (
    TimeoutsConfig as TimeoutsConfig,
)
from gateway.http_socket.config import DoorConfig
from gateway.model_names import check_aliases
from gateway.objectives import ObjectivesConfig
from gateway.observability.config import LoggingConfig, TracingConfig
from gateway.pinning.config import DnsConfig
from gateway.placement import PlacementConfig
from gateway.quota.config import QuotaConfig
from gateway.signals.hub import SignalsConfig
from gateway.state.config import StateConfig
from gateway.tokenizer import check_tokenizer_paths
from routing.errors import RoutingError
from routing.policies import POLICIES, build_router


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
            "(incrementally, never stalling requests). An entry outlives its TTL by at most this. "
            "Refilled quota buckets are swept at the same interval."
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
    dns: DnsConfig = Field(
        default_factory=lambda: DnsConfig(),
        description="Backend host names pinned to resolved addresses (gateway/pinning).",
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
