"""Authentication at the HTTP door: the middleware, and its start-up with the application.

Order of middlewares: ``openai_errors`` → :func:`auth_gate` → ``admin_gate``. The gate decides
the request's :class:`Principal` (``request[PRINCIPAL]``) before anything reads the body:
a missing or bad key is a 401 that costs no parsing, no routing and no upstream call.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web
from prometheus_client import CollectorRegistry

from gateway.admin import on_admin_listener
from gateway.auth.authenticator import Authenticator, KeyRing, authorize
from gateway.auth.config import AuthConfig
from gateway.auth.keys import PRINCIPAL, Principal, StoredKey
from gateway.errors import ApiError
from gateway.quota.limiter import Quotas
from gateway.state_keys import CONFIG

log = logging.getLogger("meridian.auth")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

AUTH = web.AppKey("authenticator", Authenticator)
_OPEN_PATHS = frozenset({"/healthz", "/readyz"})


def auth_enabled(config: AuthConfig) -> bool:
    """``mode`` when set; unset: on exactly when the file configures keys."""
    if config.mode is not None:
        return config.mode == "keys"
    return bool(config.keys or config.hop_keys)


def check_listener(config: AuthConfig, host: str) -> None:
    """Refuse to serve a non-loopback address with auth merely unconfigured (never silently)."""
    if config.mode is not None or auth_enabled(config):
        return
    if not _is_loopback(host):
        from gateway.config import ConfigError

        raise ConfigError(
            f"listen.host {host} is reachable from other hosts and 'auth' is not configured: "
            "set auth.mode: keys (with auth.keys or Redis keys), or auth.mode: off to let "
            "anyone who reaches the port in"
        )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def install_auth(app: web.Application, config: AuthConfig) -> Authenticator:
    ring = KeyRing(StoredKey.from_entry(entry) for entry in config.keys)
    authenticator = app[AUTH] = Authenticator(config, ring, auth_enabled(config))
    _log_mode(config, authenticator.enabled)
    return authenticator


def _log_mode(config: AuthConfig, enabled: bool) -> None:
    if enabled:
        log.info(
            "auth: API keys required (%d from the config file, %d hop keys, trusted listener: %s)",
            len(config.keys),
            len(config.hop_keys),
            config.trusted_listener,
        )
    elif config.mode == "off":  # the operator's explicit choice: said once, not alarmed
        log.info(
            "auth is OFF (auth.mode: off): every client is trusted and its %s header believed",
            config.tenant_header,
        )
    else:
        log.warning(
            "auth is OFF because 'auth' is not configured (allowed on loopback only): every "
            "client is trusted; set auth.mode: keys, or auth.mode: off to say so"
        )


def shared_keys_ctx(
    redis_factory: Callable[[], object], prefix: str, registry: CollectorRegistry
) -> Callable[[web.Application], AsyncIterator[None]]:
    """A cleanup_ctx entry: keys from Redis, refreshed in the background while the app runs."""

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        from gateway.auth.redis_keys import KeyRefresher

        authenticator = app[AUTH]
        client = redis_factory()
        refresher = KeyRefresher(
            client,
            prefix,
            authenticator.ring,
            authenticator.config.refresh_s,
            registry,
        )
        await refresher.refresh_once()  # at start-up, once: keys work from the first request
        refresher.start()
        yield
        await refresher.stop()
        close = getattr(client, "aclose", None)
        if close is not None:
            await close()

    return lifecycle


def door_check(
    authenticator: Authenticator, quotas: Quotas | None = None
) -> Callable[[str | None, str | None, str], Principal]:
    """For a door without middleware (gRPC): authenticate, authorize the model, take one
    request from the key's and tenant's quotas (429 → RESOURCE_EXHAUSTED; its tokens are not
    counted there, but a key out of tokens is refused); who the call acts for (its tenant, and
    its key, whose class sets the objective: gateway/objectives.py)."""

    def check(authorization: str | None, claimed_tenant: str | None, model: str) -> Principal:
        principal = authenticator.authenticate(authorization, claimed_tenant)
        authorize(principal, model)
        if quotas is not None:
            quotas.admit(principal.key_id, principal.tenant, 0)
        return principal

    return check


def principal_of(request: web.Request) -> Principal:
    found = request.get(PRINCIPAL)
    if isinstance(found, Principal):
        return found
    # Not through the gate (an admin-listener request): act as the gateway itself, no tenant.
    return Principal("default", None, frozenset({"inference"}), frozenset(), "admin-listener")


def _certificate_hop(request: web.Request) -> bool:
    """The connection presented a client certificate the listener's client CA signed (the
    handshake refuses any other), and the listener takes such clients for gateway hops."""
    tls = request.app[CONFIG].listen.tls
    if tls is None or tls.client_ca_file is None or not tls.client_cert_hops:
        return False
    transport = request.transport
    return transport is not None and bool(transport.get_extra_info("peercert"))


@web.middleware
async def auth_gate(request: web.Request, handler: Handler) -> web.StreamResponse:
    authenticator = request.app.get(AUTH)
    if authenticator is None or request.path in _OPEN_PATHS or on_admin_listener(request):
        return await handler(request)
    tenant_header = request.headers.get(authenticator.config.tenant_header)
    if _certificate_hop(request):
        request[PRINCIPAL] = authenticator.certificate_hop(tenant_header)
        return await handler(request)
    try:
        request[PRINCIPAL] = authenticator.authenticate(
            request.headers.get("Authorization"), tenant_header
        )
    except ApiError as err:
        return err.to_response({"WWW-Authenticate": 'Bearer realm="meridian"'})
    return await handler(request)
