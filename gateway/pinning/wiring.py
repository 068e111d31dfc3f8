"""DNS pins wired into a gateway: resolved before the listener opens (a link-local answer
refuses the start, as a literal link-local URL refuses the config), then every
``dns.refresh_s`` in the background."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence

from aiohttp import web
from prometheus_client import CollectorRegistry

from gateway.config_backends import BackendConfig
from gateway.config_base import ConfigError
from gateway.pinning.config import DnsConfig
from gateway.pinning.pins import DnsPins

DNS_PINS = web.AppKey("dns_pins", DnsPins)


def dns_pins(
    config: DnsConfig,
    backends: Callable[[], Sequence[BackendConfig]],
    registry: CollectorRegistry,
) -> DnsPins | None:
    """The pins (their ``resolver`` goes to the upstream pool), or None with ``dns.pin: false``."""
    return DnsPins(config, backends, registry) if config.pin else None


def install_dns_pins(app: web.Application, pins: DnsPins | None) -> None:
    if pins is None:
        return
    app[DNS_PINS] = pins

    async def pinning(app: web.Application) -> AsyncIterator[None]:
        refused = await pins.refresh()
        if refused:
            await pins.close()
            raise ConfigError(
                f"{refused[0]}: set 'allow_link_local: true' on the backend if that is really "
                "where it runs"
            )
        task = asyncio.create_task(pins.run(), name="meridian-dns-pins")
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await pins.close()

    app.cleanup_ctx.append(pinning)
