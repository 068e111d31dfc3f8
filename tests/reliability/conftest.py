"""Real servers on loopback: in-process emulated backends and gateways on ephemeral ports."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.app import RunningGateway, start_gateway
from gateway.config import GatewayConfig
from loadtests.emulator.config import EmulatedBackendConfig, EngineParams, FaultConfig
from loadtests.emulator.server import RunningEmulator, start_emulated_backend
from tests.reliability.support import FAST_ENGINE, MODEL, EmulatorFactory, GatewayFactory


@pytest.fixture
async def emulator() -> AsyncIterator[EmulatorFactory]:
    started: list[RunningEmulator] = []

    async def make(
        name: str,
        *,
        engine: EngineParams = FAST_ENGINE,
        faults: FaultConfig | None = None,
        **kwargs: Any,
    ) -> RunningEmulator:
        config = EmulatedBackendConfig(
            name=name, models=(MODEL,), engine=engine, faults=faults or FaultConfig(), **kwargs
        )
        running = await start_emulated_backend(config)
        started.append(running)
        return running

    yield make
    for running in started:
        await running.close()


@pytest.fixture
async def gateway() -> AsyncIterator[GatewayFactory]:
    started: list[RunningGateway] = []

    async def make(config: GatewayConfig) -> RunningGateway:
        running = await start_gateway(config, "127.0.0.1", 0)
        started.append(running)
        return running

    yield make
    for running in started:
        await running.close()
