"""Which listener a request came in on, and the gate that keeps admin routes off the public one."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web

from gateway.auth.keys import PRINCIPAL
from gateway.errors import ApiError

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# Served on both listeners: probes must work wherever the prober stands; the route explainer
# guards itself (loopback, no proxy headers); chained gateways poll the summary.
_BOTH = frozenset({"/healthz", "/readyz", "/v1/meridian/route", "/v1/meridian/summary"})


@dataclass
class AdminListener:
    """Admin-only path prefixes, and the local ports the admin listener is bound to (or the
    Unix socket paths: a worker of ``--workers N`` serves its peers on one)."""

    prefixes: set[str] = field(default_factory=set)
    ports: set[int | str] = field(default_factory=set)

    def is_admin_path(self, path: str) -> bool:
        if path in self.prefixes:
            return True
        return any(path.startswith(prefix + "/") for prefix in self.prefixes)


ADMIN = web.AppKey("admin_listener", AdminListener)


def install_admin(app: web.Application, public_metrics: bool = False) -> AdminListener:
    listener = app[ADMIN] = AdminListener()
    listener.prefixes.update({"/v1/meridian/state"})
    if not public_metrics:
        listener.prefixes.add("/metrics")
    return listener


def admin_only(app: web.Application, path: str) -> None:
    """Serve ``path`` (and everything under it) on the admin listener only."""
    app[ADMIN].prefixes.add(path.rstrip("/") or "/")


def _local_port(request: web.Request) -> int | str | None:
    transport = request.transport
    if transport is None:
        return None
    sockname = transport.get_extra_info("sockname")
    if isinstance(sockname, str) and sockname:  # a Unix socket: its path
        return sockname
    if isinstance(sockname, tuple) and len(sockname) >= 2:
        return int(sockname[1])
    return None


def on_admin_listener(request: web.Request) -> bool:
    listener = request.app.get(ADMIN)
    return listener is not None and _local_port(request) in listener.ports


def _not_found(request: web.Request) -> ApiError:
    # The same answer as a path that does not exist: the public side learns nothing.
    return ApiError(
        404, f"Not Found: {request.method} {request.path}", "invalid_request_error", "not_found"
    )


def _has_admin_scope(request: web.Request) -> bool:
    """An API key with the ``admin`` scope (gateway/auth) reaches admin routes publicly."""
    principal = request.get(PRINCIPAL)
    return principal is not None and "admin" in principal.scopes


@web.middleware
async def admin_gate(request: web.Request, handler: Handler) -> web.StreamResponse:
    listener = request.app.get(ADMIN)
    if listener is None:
        return await handler(request)
    admin_socket = _local_port(request) in listener.ports
    path = request.path
    if admin_socket:
        if path not in _BOTH and not listener.is_admin_path(path):
            raise _not_found(request)
    elif listener.is_admin_path(path) and not _has_admin_scope(request):
        raise _not_found(request)
    return await handler(request)
