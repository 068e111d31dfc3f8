"""In-process servers on loopback ephemeral ports, closed when the test ends: emulated backends
and gateways. Test packages wrap these in their own fixtures with their own model and engine."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web

from gateway.app import RunningGateway, start_gateway
from gateway.config import GatewayConfig
from loadtests.emulator.config import EmulatedBackendConfig, EngineParams, FaultConfig
from loadtests.emulator.server import RunningEmulator, start_emulated_backend

EmulatorFactory = Callable[..., Awaitable[RunningEmulator]]
GatewayFactory = Callable[..., Awaitable[RunningGateway]]


@contextlib.asynccontextmanager
async def emulators(
    model: str, default_engine: EngineParams, default_name: str = "b1"
) -> AsyncIterator[EmulatorFactory]:
    started: list[RunningEmulator] = []

    async def make(
        name: str = default_name,
        *,
        engine: EngineParams = default_engine,
        faults: FaultConfig | None = None,
        **kwargs: Any,
    ) -> RunningEmulator:
        config = EmulatedBackendConfig(
            name=name,
            models=kwargs.pop("models", (model,)),
            engine=engine,
            faults=faults or FaultConfig(),
            **kwargs,
        )
        running = await start_emulated_backend(config)
        started.append(running)
        return running

    try:
        yield make
    finally:
        for running in started:
            await running.close()


@contextlib.asynccontextmanager
async def gateways() -> AsyncIterator[GatewayFactory]:
    started: list[RunningGateway] = []

    async def make(config: GatewayConfig) -> RunningGateway:
        running = await start_gateway(config, "127.0.0.1", 0)
        started.append(running)
        return running

    try:
        yield make
    finally:
        for running in started:
            await running.close()


@contextlib.asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    """A scripted aiohttp app (an upstream that replays bytes) on a loopback port: its URL."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()
