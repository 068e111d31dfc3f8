"""Every door's HTTP routes, registered by gateway/http_api.py with one call."""

from __future__ import annotations

from aiohttp import web

from gateway.doors import embeddings, models, responses
from gateway.doors.messages import door as messages


def add_door_routes(app: web.Application) -> None:
    models.add_routes(app)
    embeddings.add_routes(app)
    responses.add_routes(app)
    messages.add_routes(app)
