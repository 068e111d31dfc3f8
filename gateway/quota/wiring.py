"""Quotas wired into a gateway: shared through the state store when replicas share one (a
refiller task claims allowances in the background), this replica's own buckets otherwise."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from aiohttp import web
from prometheus_client import CollectorRegistry

from gateway.quota.allowance import AllowanceLink
from gateway.quota.config import QuotaConfig
from gateway.quota.limiter import QUOTAS, Quotas
from gateway.quota.refill import Refiller
from gateway.state.wiring import SharedState

REFILLER = web.AppKey("quota_refiller", Refiller)


def install_quotas(
    app: web.Application, config: QuotaConfig, registry: CollectorRegistry, shared: SharedState
) -> Quotas:
    """``app[QUOTAS]``; with shared state also ``app[REFILLER]`` and its task. Call after
    ``install_shared_state``: the refiller stops before the store closes."""
    link = None
    if shared.shared_between_replicas and (config.per_key or config.per_tenant or config.tenants):
        link = AllowanceLink(config.allowance)
    quotas = Quotas(config, registry, link=link)
    app[QUOTAS] = quotas
    if link is not None:
        refiller = Refiller(link, shared.sync, registry)
        app[REFILLER] = refiller

        async def refilling(app: web.Application) -> AsyncIterator[None]:
            task = asyncio.create_task(refiller.run(), name="meridian-quota-refiller")
            yield
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

        app.cleanup_ctx.append(refilling)
    return quotas
