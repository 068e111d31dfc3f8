"""Doors beyond chat and completions, each its own small package on the shared relay core.

A door turns its wire format into an :class:`~gateway.inbound.InboundRequest` and the relay's
events back into its wire format; routing, attempts, retries, timing and outcome accounting
are the core's (gateway/relay.py). Adding a door touches its own package plus one line in
:func:`add_door_routes`.
"""

from __future__ import annotations

from aiohttp import web

from gateway.doors import models


def add_door_routes(app: web.Application) -> None:
    models.add_routes(app)
