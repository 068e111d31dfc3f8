"""Every path a request can take, on both doors, leaves every request counter at zero.

Success, each failure kind before the first token, the client leaving while it waits and
mid-stream, admission refusal, the drain deadline mid-stream, and streams open across config
reloads (a new router, then a new fleet without their backends): afterwards every relay state's
active count, drain membership, admission slots, the router's reservations, the hub's in-flight
counts and the ``meridian_upstream_in_flight`` gauge are all back to zero.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest

from gateway.app import RunningGateway, start_gateway
from gateway.config import parse_config
from gateway.errors import ApiError
from gateway.grpc.client import inference_stub
from gateway.grpc.mount import GRPC_SERVER
from gateway.inbound import Endpoint
from gateway.lifecycle.call import CoreCall
from gateway.lifecycle.core import Arrival
from gateway.relay_state import RelayState
from gateway.reload import Reloader
from gateway.state_keys import RELAY
from loadtests.emulator.config import EmulatedBackendConfig, FaultConfig
from loadtests.emulator.server import RunningEmulator, start_emulated_backend
from proto.meridian.v1 import inference_pb2 as pb
from tests.grpc.grpc_support import FAST_ENGINE, chat
from tests.reliability.support import metric_value, router_in_flight
from tests.servers import engine_holds, leave_once_admitted, refusing_port, settle

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


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
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


def _body(model: str, stream: bool = True, tokens: int = 4) -> dict[str, Any]:
    return {
        "model": f"m-{model}",
        "stream": stream,
        "max_tokens": tokens,
        "messages": [{"role": "user", "content": "hi"}],
    }


async def _http(url: str, body: dict[str, Any]) -> int:
    async with aiohttp.ClientSession() as session:
        async with session.post(url + "/v1/chat/completions", json=body) as response:
            await response.read()
            return response.status


async def _http_wait(url: str, body: dict[str, Any]) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.post(url + "/v1/chat/completions", json=body) as response:
            raise AssertionError(f"answered before the client left: {response.status}")


def no_invalid_transition(caplog: pytest.LogCaptureFixture) -> None:
    """Every path walked the lifecycle table (gateway/lifecycle/states.py) without an event
    its state refuses: the relay core logs one as an impossible state."""
    refused = [r.getMessage() for r in caplog.records if r.name == "meridian.lifecycle"]
    assert not refused


async def test_every_http_path_returns_every_counter_to_zero(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    url = rig.gateway.url
    assert await _http(url, _body("ok")) == 200
    assert await _http(url, _body("ok", stream=False)) == 200
    assert await _http(url, _body("e500")) == 502
    assert await _http(url, _body("e429")) == 429
    assert await _http(url, _body("refused")) == 503
    await rig.back_to_zero()
    # The client leaves while waiting for the first token, and mid-stream.
    await leave_once_admitted(rig.emulators["stall"], [_http_wait(url, _body("stall"))])
    await rig.back_to_zero()
    async with aiohttp.ClientSession() as session:
        response = await session.post(url + "/v1/chat/completions", json=_body("slow", tokens=500))
        assert await response.content.readany()
        response.close()
    await rig.back_to_zero()
    # Admission refuses a second request while one holds m-stall's only slot.
    async with aiohttp.ClientSession() as session:
        holder = asyncio.ensure_future(
            _wait_on(session.post(url + "/v1/chat/completions", json=_body("stall")))
        )
        await settle(lambda: engine_holds(rig.emulators["stall"]) == 1)
        assert await _http(url, _body("stall")) == 503
        holder.cancel()
        assert isinstance(
            (await asyncio.gather(holder, return_exceptions=True))[0], asyncio.CancelledError
        )
    await rig.back_to_zero()
    # The drain deadline ends a running stream.
    async with aiohttp.ClientSession() as session:
        async with session.post(
            url + "/v1/chat/completions", json=_body("slow", tokens=500)
        ) as response:
            assert await response.content.readany()
            rig.relay.drain.end_everything()
            assert b"gateway_draining" in await response.read()
    await rig.back_to_zero()
    no_invalid_transition(caplog)


async def _wait_on(request: Any) -> None:
    async with request as response:
        raise AssertionError(f"answered before the client left: {response.status}")


async def test_every_grpc_path_returns_every_counter_to_zero(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    target = rig.gateway.app[GRPC_SERVER].target
    async with grpc.aio.insecure_channel(target) as channel:
        stub = inference_stub(channel)

        async def run(model: str, tokens: int = 4) -> grpc.StatusCode:
            call = stub.ChatCompletion(chat(model=f"m-{model}", max_tokens=tokens))
            try:
                async for _ in call:
                    pass
            except grpc.aio.AioRpcError as error:
                return error.code()
            return grpc.StatusCode.OK

        assert await run("ok") is grpc.StatusCode.OK
        assert await run("e500") is not grpc.StatusCode.OK
        assert await run("e429") is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert await run("refused") is grpc.StatusCode.UNAVAILABLE
        await rig.back_to_zero()
        # The client cancels while waiting for the first token, and mid-stream.
        call = stub.ChatCompletion(chat(model="m-stall", max_tokens=4))
        await settle(lambda: engine_holds(rig.emulators["stall"]) == 1)
        call.cancel()
        await rig.back_to_zero()
        call = stub.ChatCompletion(chat(model="m-slow", max_tokens=500))
        assert (await call.read()).choices
        call.cancel()
        await rig.back_to_zero()
        # Admission refusal while one call holds m-stall's slot, then the holder leaves.
        holder = stub.ChatCompletion(chat(model="m-stall", max_tokens=4))
        await settle(lambda: engine_holds(rig.emulators["stall"]) == 1)
        assert await run("stall") is grpc.StatusCode.UNAVAILABLE
        holder.cancel()
        await rig.back_to_zero()
        # The drain deadline ends a running stream.
        call = stub.ChatCompletion(chat(model="m-slow", max_tokens=500))
        assert (await call.read()).choices
        rig.relay.drain.end_everything()
        with pytest.raises(grpc.aio.AioRpcError):
            while await call.read() is not grpc.aio.EOF:
                pass
        await rig.back_to_zero()
        no_invalid_transition(caplog)


async def _across_reloads(rig: Rig) -> None:
    """With streams open on ``single`` (one mid-stream, one waiting for its slot) and ``stall``
    (waiting for its first token): reload a new router, then a fleet without either backend.
    New requests see the new configuration; the open ones keep theirs."""
    first = rig.states[0]
    await settle(
        lambda: (
            engine_holds(rig.emulators["single"]) == 2 and engine_holds(rig.emulators["stall"]) == 1
        )
    )
    assert first.active == 3
    second = await rig.reload(routing={"seed": 7})
    assert second.router is not first.router and second.fleet is first.fleet
    kept = [b for b in rig.data["backends"] if b["name"] not in {"single", "stall"}]
    third = await rig.reload(backends=kept, admission={})
    assert third.fleet is not first.fleet and third.admission is not first.admission
    assert first.active == 3 and third.active == 0
    assert await _http(rig.gateway.url, _body("ok")) == 200
    assert await _http(rig.gateway.url, _body("single")) == 404


def _retired(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "retired upstream pool" in r.getMessage()]


async def test_streams_across_reloads_return_every_counter_to_zero_http(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="meridian.reload")
    url = rig.gateway.url + "/v1/chat/completions"
    async with aiohttp.ClientSession() as session:
        holder = await session.post(url, json=_body("single", tokens=500))
        assert await holder.content.readany()
        waiter = asyncio.ensure_future(_read_all(session, url, _body("single", tokens=4)))
        stalled = asyncio.ensure_future(_wait_on(session.post(url, json=_body("stall"))))
        await _across_reloads(rig)
        # The holder leaves mid-stream: the waiter gets the removed backend's slot and finishes.
        holder.close()
        status, raw = await waiter
        assert status == 200 and b"data: [DONE]" in raw and b"error" not in raw
        stalled.cancel()
        assert isinstance(
            (await asyncio.gather(stalled, return_exceptions=True))[0], asyncio.CancelledError
        )
    await rig.back_to_zero()
    # The old states retire once idle: the removed backends' two pools close then, not before.
    await settle(lambda: len(_retired(caplog)) == 2)
    assert "closed 2 retired upstream pool(s)" in _retired(caplog)
    no_invalid_transition(caplog)


async def _read_all(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any]
) -> tuple[int, bytes]:
    async with session.post(url, json=body) as response:
        return response.status, await response.read()


async def test_streams_across_reloads_return_every_counter_to_zero_grpc(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="meridian.reload")
    target = rig.gateway.app[GRPC_SERVER].target
    async with grpc.aio.insecure_channel(target) as channel:
        stub = inference_stub(channel)
        holder = stub.ChatCompletion(chat(model="m-single", max_tokens=500))
        assert (await holder.read()).choices
        waiter = stub.ChatCompletion(chat(model="m-single", max_tokens=4))
        stalled = stub.ChatCompletion(chat(model="m-stall", max_tokens=4))
        await _across_reloads(rig)
        # The gRPC model listing follows the reload too (it kept the start-up config).
        listed = {m.id for m in (await stub.ListModels(pb.ListModelsRequest())).models}
        assert "m-ok" in listed and not listed & {"m-single", "m-stall"}
        holder.cancel()
        replies = [reply async for reply in waiter]
        assert replies and await waiter.code() is grpc.StatusCode.OK
        stalled.cancel()
        await rig.back_to_zero()
    await settle(lambda: len(_retired(caplog)) == 2)
    assert "closed 2 retired upstream pool(s)" in _retired(caplog)
    no_invalid_transition(caplog)


def _requests(rig: Rig, model: str, outcome: str) -> float:
    labels = {"protocol": "http", "endpoint": "chat", "model": model, "status": outcome}
    return metric_value(rig.gateway, "meridian_requests_total", labels)


async def test_a_call_left_as_its_open_finished_is_released_and_counted_once(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """The HTTP door's keepalive open: the client leaves in the instant the open finished, so
    the door never renders the call. Its ``finally: call.close()`` ends it like every other
    request (it used to call ``Relay.finish`` itself, and ``meridian_requests_total`` never
    counted it): released, not learned from, counted once as cancelled."""
    body = json.dumps(_body("slow", tokens=500)).encode()
    arrival = Arrival("http", Endpoint.CHAT, body, "left-at-open", "default", time.perf_counter())
    call = CoreCall(rig.relay, arrival)
    before = _requests(rig, "m-slow", "cancelled")
    await call.open()
    assert call.started and rig.counters()["active"] == 1
    assert _requests(rig, "m-slow", "cancelled") == before  # not counted while it is open
    call.close()
    call.close()  # once, however often the door's paths close it
    assert _requests(rig, "m-slow", "cancelled") == before + 1
    await rig.back_to_zero()
    no_invalid_transition(caplog)


async def test_a_refused_call_is_counted_once_and_closes_to_nothing(rig: Rig) -> None:
    body = json.dumps(_body("refused")).encode()
    call = CoreCall(
        rig.relay, Arrival("http", Endpoint.CHAT, body, "r", "default", time.perf_counter())
    )
    before = _requests(rig, "m-refused", "503")
    with pytest.raises(ApiError) as refused:
        await call.open()
    assert refused.value.status == 503 and not call.started
    call.close()  # nothing to end: the relay core released it all
    assert _requests(rig, "m-refused", "503") == before + 1
    await rig.back_to_zero()


async def test_a_client_that_leaves_before_its_first_token_is_counted_once_on_both_doors(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """Cancelled while awaiting the first token: released by the relay core, and counted once
    in meridian_requests_total as cancelled, the same on both doors (it was not counted)."""

    def cancelled(protocol: str) -> float:
        labels = {"protocol": protocol, "endpoint": "chat", "model": "m-stall"}
        return metric_value(
            rig.gateway, "meridian_requests_total", {**labels, "status": "cancelled"}
        )

    http, grpc_before = cancelled("http"), cancelled("grpc")  # the rig is shared by the file
    url = rig.gateway.url
    await leave_once_admitted(rig.emulators["stall"], [_http_wait(url, _body("stall"))])
    await rig.back_to_zero()
    await settle(lambda: cancelled("http") == http + 1)
    target = rig.gateway.app[GRPC_SERVER].target
    async with grpc.aio.insecure_channel(target) as channel:
        call = inference_stub(channel).ChatCompletion(chat(model="m-stall", max_tokens=4))
        await settle(lambda: engine_holds(rig.emulators["stall"]) == 1)
        call.cancel()
        await rig.back_to_zero()
    await settle(lambda: cancelled("grpc") == grpc_before + 1)
    assert cancelled("http") == http + 1  # once, not again
    no_invalid_transition(caplog)
