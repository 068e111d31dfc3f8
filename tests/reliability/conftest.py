"""Real servers on loopback: in-process emulated backends and gateways on ephemeral ports."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.reliability.support import FAST_ENGINE, MODEL
from tests.servers import EmulatorFactory, GatewayFactory, emulators, gateways


@pytest.fixture
async def emulator() -> AsyncIterator[EmulatorFactory]:
    async with emulators(MODEL, FAST_ENGINE) as make:
        yield make


@pytest.fixture
async def gateway() -> AsyncIterator[GatewayFactory]:
    async with gateways() as make:
        yield make
