"""The OpenAI-compatible HTTP door: its routes, and the gateway's own endpoints (models,
health, readiness, metrics).

``/v1/chat/completions`` and ``/v1/completions`` are thin: the request runs through
:func:`gateway.doors.sse_door.serve` (every HTTP door's runner) on the door-neutral relay core
(:mod:`gateway.lifecycle.core`), answered in the OpenAI wire format.
"""

from __future__ import annotations

import logging

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gateway.admin import on_admin_listener
from gateway.doors.models import model_object
from gateway.doors.sse_door import serve
from gateway.inbound import Endpoint
from gateway.lifecycle.core import TENANT_HEADER as TENANT_HEADER
from gateway.state.wiring import STATE
from gateway.state_keys import METRICS, RELAY
from gateway.workers.metrics_view import METRICS_VIEW

log = logging.getLogger("meridian.http")

# Other branches' doors may still import the runner from here (gateway/doors/sse_door.py).
_completion = serve


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await serve(request, Endpoint.CHAT)


async def completions(request: web.Request) -> web.StreamResponse:
    return await serve(request, Endpoint.COMPLETIONS)


async def list_models(request: web.Request) -> web.Response:
    config = request.app[RELAY].config
    data = [model_object(model) for model in config.models()]
    return web.json_response(
        {"object": "list", "data": data}, dumps=lambda o: orjson.dumps(o).decode()
    )


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "alive"})


async def readyz(request: web.Request) -> web.Response:
    relay = request.app[RELAY]
    health = relay.fleet.health()
    draining = relay.drain.not_ready
    ready = bool(health.usable) and not draining
    if not on_admin_listener(request):  # the public side learns ready or not, nothing more
        return web.json_response({"ready": ready}, status=200 if ready else 503)
    body = {
        "ready": ready,
        "draining": draining,
        "backends_usable": len(health.usable),
        "backends_total": len(relay.pool.clients),
        "backends_ejected": sorted(health.ejected_until),
        "panic": health.panic,
    }
    if STATE in request.app:  # degraded shared state is reported, but is no reason to stop
        body["state"] = request.app[STATE].health().as_dict()
    return web.json_response(body, status=200 if ready else 503)


async def metrics_endpoint(request: web.Request) -> web.Response:
    if (host_view := request.app.get(METRICS_VIEW)) is not None:  # --workers N: every worker
        page: web.Response = await host_view(request)
        return page
    payload = generate_latest(request.app[METRICS].registry)
    return web.Response(body=payload, headers={"Content-Type": CONTENT_TYPE_LATEST})


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/v1/models", list_models)
    from gateway.doors.routes import add_door_routes  # the doors build on this module

    add_door_routes(app)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_endpoint)
