"""Helpers for the emulator's real-socket tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest

from loadtests.emulator.config import EmulatedBackendConfig
from loadtests.emulator.server import RunningEmulator, start_emulated_backend


@pytest.fixture
async def start() -> AsyncIterator[Callable[..., object]]:
    started: list[RunningEmulator] = []

    async def _start(**fields: object) -> RunningEmulator:
        fields.setdefault("name", "emu")
        fields.setdefault("models", ["m"])
        emulator = await start_emulated_backend(EmulatedBackendConfig.model_validate(fields))
        started.append(emulator)
        return emulator

    yield _start
    for emulator in started:
        await emulator.close()
