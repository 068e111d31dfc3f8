"""Typed keys for what the aiohttp application carries (``app[KEY]``)."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from gateway.config import GatewayConfig
from gateway.metrics import GatewayMetrics
from gateway.relay import Relay

CONFIG = web.AppKey("config", GatewayConfig)
RELAY = web.AppKey("relay", Relay)
METRICS = web.AppKey("metrics", GatewayMetrics)


@dataclass(frozen=True, slots=True)
class PublicBind:
    """How start_gateway binds the public listeners, the gRPC one too: the address (``serve
    --host`` over ``listen.host``) and SO_REUSEPORT (a worker of ``serve --workers N``)."""

    host: str
    reuse_port: bool = False


PUBLIC_BIND = web.AppKey("public_bind", PublicBind)
