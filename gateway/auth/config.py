"""``auth:`` in the operator file: who may call the gateway, and as which tenant."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

Scope = Literal["inference", "admin"]
KEY_ID_PATTERN = r"^[a-z0-9]{8}$"
TENANT_PATTERN = r"^[A-Za-z0-9._\-]{1,64}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KeyEntry(_Strict):
    """One API key, as ``meridian keys create`` prints it: the key itself is never stored."""

    id: Annotated[str, Field(pattern=KEY_ID_PATTERN, description="The key's public id.")]
    sha256: Annotated[
        str, Field(pattern=r"^[0-9a-f]{64}$", description="SHA-256 of the whole key, hex.")
    ]
    tenant: Annotated[str, Field(pattern=TENANT_PATTERN, description="Tenant the key acts for.")]
    models: list[str] = Field(
        default_factory=list, description="Models the key may use; empty: every model."
    )
    scopes: list[Scope] = Field(
        default_factory=lambda: list[Scope](["inference"]), description="inference, admin, or both."
    )
    expires_at: datetime | None = Field(default=None, description="No use after this instant.")


class AuthConfig(_Strict):
    mode: Literal["keys", "off"] | None = Field(
        default=None,
        description="keys: every request needs a valid Bearer key. off: anyone who reaches the "
        "port is trusted (the tenant header is believed). Unset: keys when any key source is "
        "configured; otherwise off with a warning on a loopback listener, and a refusal to "
        "start on any other address.",
    )
    keys: list[KeyEntry] = Field(default_factory=list, description="Keys from this file.")
    redis_keys: bool = Field(
        default=True,
        description="With state.backend redis, also read keys from Redis (meridian keys "
        "create --redis-url ...), refreshed in the background.",
    )
    refresh_s: Annotated[float, Field(gt=0)] = Field(
        default=5.0, description="How often Redis keys are re-read (revocations take this long)."
    )
    trusted_listener: bool = Field(
        default=False,
        description="The public listener sits behind something that already authenticated the "
        "client: no key is required and the tenant header is believed.",
    )
    tenant_header: str = Field(
        default="X-Meridian-Tenant",
        description="The header a trusted listener or an authenticated hop takes the tenant from.",
    )
    cache_salt_secret_env: str | None = Field(
        default=None,
        description="Environment variable holding the secret of per-tenant vLLM cache_salt "
        "(HMAC of the tenant): tenants never share an engine's prefix cache.",
    )
    hop_keys: list[str] = Field(
        default_factory=list,
        description="SHA-256 (hex) of the secrets upstream Meridian gateways send as their "
        "Bearer key (their kind: gateway backend's api_key); such a hop's tenant header is "
        "believed.",
    )
