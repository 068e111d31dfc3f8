"""The live status page: ``GET /status`` (HTML that refreshes itself) and ``GET /status.json``
(the same data). Regions and backends with their health, ejections, live predicted vs observed
TTFT, traffic share, in-flight requests and cold/warm state.

Served on the admin listener only (gateway/admin: loopback by default; the public port answers
404, as for a path that does not exist). :func:`add_status_routes` mounts it on any
application that has the gateway's relay. Nothing here runs on the request path: each call
reads the current relay state and the observer's live numbers.
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

import gateway
from gateway.admin import ADMIN, admin_only
from gateway.observability.fleet_status import backend_statuses
from gateway.observability.status_page import STATUS_HTML
from gateway.relay import Relay
from gateway.state.wiring import STATE
from gateway.state_keys import RELAY

STATUS_PATH = "/status"
STATUS_JSON_PATH = "/status.json"


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def status(relay: Relay, state_health: dict[str, Any] | None) -> dict[str, Any]:
    """What the page shows, as JSON."""
    state = relay.state
    config = state.config
    snapshot = state.fleet.snapshot()
    health = state.fleet.health()
    live = relay.observer.metrics.live
    shares = live.shares(time.perf_counter())
    entries = backend_statuses(state)
    backends = []
    for entry in entries:
        seen = live.backends.get(entry.name)
        signals = snapshot.backends.get(entry.name)
        spec = signals.spec if signals is not None else None
        idle = spec.idle_timeout_s if spec is not None else None
        last = signals.last_traffic_at if signals is not None else None
        warm = idle is None or (last is not None and snapshot.taken_at - last < idle)
        backends.append(
            {
                "name": entry.name,
                "region": entry.region,
                "kind": entry.kind,
                "models": list(entry.models),
                "health": "ejected"
                if entry.ejected_for_s is not None
                else ("ok" if entry.usable else "failing"),
                "ejected_for_s": _round(entry.ejected_for_s),
                "ejections": state.fleet.outlier.ejection_count(entry.name),
                "in_flight": entry.in_flight,
                "warm": warm,
                "requests": seen.requests if seen is not None else 0,
                "traffic_share": round(shares.get(entry.name, 0.0), 4),
                "observed_ttft_ms": _round(seen.observed_ttft_ms) if seen else None,
                "predicted_ttft_ms": _round(seen.predicted_ttft_ms) if seen else None,
            }
        )
    regions: dict[str, list[str]] = {}
    for entry in entries:
        regions.setdefault(entry.region, []).append(entry.name)
    return {
        "gateway": {
            "id": config.chain.id,
            "region": config.region,
            "version": gateway.__version__,
            "policy": config.routing.policy,
            "draining": relay.drain.not_ready,
            "panic": health.panic,
        },
        "state": state_health,
        "regions": [{"name": name, "backends": names} for name, names in sorted(regions.items())],
        "backends": backends,
        "requests": relay.live.summary(),  # live requests by lifecycle state, the oldest
    }


async def status_json(request: web.Request) -> web.Response:
    shared = request.app.get(STATE)
    health = shared.health() if shared is not None else None
    state_health = (
        {"backend": health.backend, "status": str(health.status)} if health is not None else None
    )
    return web.json_response(status(request.app[RELAY], state_health))


async def status_page(request: web.Request) -> web.Response:
    return web.Response(text=STATUS_HTML, content_type="text/html", charset="utf-8")


def add_status_routes(app: web.Application) -> None:
    app.router.add_get(STATUS_PATH, status_page)
    app.router.add_get(STATUS_JSON_PATH, status_json)
    if ADMIN in app:  # the gateway's application: the admin listener only
        admin_only(app, STATUS_PATH)
        admin_only(app, STATUS_JSON_PATH)
