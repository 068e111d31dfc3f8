"""The rig of the counters-back-to-zero tests: one emulated backend per behaviour, a gateway
with both doors, and every request counter the relay keeps (see ``Rig.counters``)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.app import RunningGateway, start_gateway
from gateway.config import parse_config
from gateway.relay_state import RelayState
from gateway.reload import Reloader
from gateway.state_keys import RELAY
from loadtests.emulator.config import EmulatedBackendConfig, FaultConfig
from loadtests.emulator.server import RunningEmulator, start_emulated_backend
from tests.grpc.grpc_support import FAST_ENGINE
from tests.reliability.support import metric_value, router_in_flight
from tests.servers import refusing_port, settle

SLOW = FAST_ENGINE.model_copy(update={"decode_base_ms": 20.0})
# One model per behaviour, each served by its own backend.
FAULTS = {
    "ok": FaultConfig(),
    "e500": FaultConfig(error_rate=1.0),
    "e429": FaultConfig(rate_limit_rate=1.0, retry_after_s=0.0),
    "stall": FaultConfig(stall_ms=600_000.0),
    "slow": FaultConfig(),
    "single": FaultConfig(),  # one batch slot: a second request waits for the first to leave
}
ENGINES = {"single": SLOW.model_copy(update={"max_num_seqs": 1})}


class Rig:
    def __init__(
        self,
        gateway: RunningGateway,
        emulators: dict[str, RunningEmulator],
        data: dict[str, Any],
        reloader: Reloader,
    ) -> None:
        self.gateway, self.emulators, self.data = gateway, emulators, data
        self.relay = gateway.app[RELAY]
        self.reloader = reloader
        self.states: list[RelayState] = [self.relay.state]  # every state a reload left behind

    async def reload(self, **changes: Any) -> RelayState:
        """Write the config with ``changes`` and reload it as SIGHUP does; the new state."""
        self.reloader.path.write_text(json.dumps({**self.data, **changes}))
        assert await self.reloader.reload("test")
        self.states.append(self.relay.state)
        return self.relay.state

    def counters(self) -> dict[str, float]:
        relay = self.relay
        names = [*self.emulators, "refused"]

        def each(part: str) -> list[Any]:  # the states' distinct routers, hubs, admissions
            return list({id(getattr(s, part)): getattr(s, part) for s in self.states}.values())

        return {
            "active": sum(state.active for state in self.states),
            "drain": relay.drain.in_flight,
            "admission": sum(admission.held() for admission in each("admission")),
            "hub": sum(fleet.in_flight(n) for fleet in each("fleet") for n in names),
            "router": sum(router_in_flight(r, n) for r in each("router") for n in names),
            "gauge": sum(
                metric_value(self.gateway, "meridian_upstream_in_flight", {"backend": n})
                for n in names
            ),
        }

    async def back_to_zero(self) -> None:
        await settle(lambda: not any(self.counters().values()))


@pytest.fixture(name="rig")
async def rig_fixture(tmp_path: Path) -> AsyncIterator[Rig]:
    """Six emulated backends (one per behaviour, ``FAULTS``), a refusing port and a gateway
    with both doors; a ``Reloader`` on a config file for the reload paths."""
    async with AsyncExitStack() as stack:
        emulators = {}
        for name, faults in FAULTS.items():
            emulator = await start_emulated_backend(
                EmulatedBackendConfig(
                    name=name,
                    models=(f"m-{name}",),
                    engine=ENGINES.get(name, SLOW),
                    faults=faults,
                )
            )
            stack.push_async_callback(emulator.close)
            emulators[name] = emulator
        backends = [
            {"name": n, "region": "local", "url": e.url + "/v1", "models": [f"m-{n}"]}
            for n, e in emulators.items()
        ]
        backends.append(
            {
                "name": "refused",
                "region": "local",
                "url": f"http://127.0.0.1:{refusing_port()}/v1",
                "models": ["m-refused"],
            }
        )
        data: dict[str, Any] = {
            "listen": {"host": "127.0.0.1", "port": 0, "grpc_port": 0},
            "backends": backends,
            "timeouts": {"first_token_s": 600.0},
            "admission": {"models": {"m-stall": {"max_concurrent": 1, "max_queue": 0}}},
            "signals": {"outlier": {"enabled": False}},
            "reload": {"watch_interval_s": None},
        }
        gateway = await start_gateway(parse_config(data, "<zero-test>"))
        stack.push_async_callback(gateway.close)
        reloader = Reloader(gateway.app[RELAY], tmp_path / "gateway.json")
        stack.push_async_callback(reloader.close)
        yield Rig(gateway, emulators, data, reloader)


def body_for(model: str, stream: bool = True, tokens: int = 4) -> dict[str, Any]:
    return {
        "model": f"m-{model}",
        "stream": stream,
        "max_tokens": tokens,
        "messages": [{"role": "user", "content": "hi"}],
    }


async def http_status(url: str, body: dict[str, Any]) -> int:
    async with aiohttp.ClientSession() as session:
        async with session.post(url + "/v1/chat/completions", json=body) as response:
            await response.read()
            return response.status


async def http_wait(url: str, body: dict[str, Any]) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.post(url + "/v1/chat/completions", json=body) as response:
            raise AssertionError(f"answered before the client left: {response.status}")


def no_invalid_transition(caplog: pytest.LogCaptureFixture) -> None:
    """Every path walked the lifecycle table (gateway/lifecycle/states.py) without an event
    its state refuses: the relay core logs one as an impossible state."""
    refused = [r.getMessage() for r in caplog.records if r.name == "meridian.lifecycle"]
    assert not refused


def requests_counted(rig: Rig, model: str, outcome: str, protocol: str = "http") -> float:
    """``meridian_requests_total`` for one chat model, outcome and door."""
    labels = {"protocol": protocol, "endpoint": "chat", "model": model, "status": outcome}
    return metric_value(rig.gateway, "meridian_requests_total", labels)
