"""Typed keys for what the aiohttp application carries (``app[KEY]``)."""

from __future__ import annotations

from aiohttp import web

from gateway.config import GatewayConfig
from gateway.metrics import GatewayMetrics
from gateway.relay import Relay

CONFIG = web.AppKey("config", GatewayConfig)
RELAY = web.AppKey("relay", Relay)
METRICS = web.AppKey("metrics", GatewayMetrics)
# Set by start_gateway: its listeners bind with SO_REUSEPORT (a worker of `serve --workers N`).
REUSE_PORT = web.AppKey("reuse_port", bool)
