"""Every path a request can take, on both doors, leaves every request counter at zero.

Success, each failure kind before the first token, the client leaving while it waits and
mid-stream, admission refusal, the drain deadline mid-stream, and streams open across config
reloads (a new router, then a new fleet without their backends): afterwards every relay state's
active count, drain membership, admission slots, the router's reservations, the hub's in-flight
counts and the ``meridian_upstream_in_flight`` gauge are all back to zero.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import grpc
import pytest

from gateway.grpc.client import inference_stub
from gateway.grpc.mount import GRPC_SERVER
from proto.meridian.v1 import inference_pb2 as pb
from tests.grpc.grpc_support import chat
from tests.reliability.zero_rig import (
    Rig,
    body_for,
    http_status,
    http_wait,
    no_invalid_transition,
    rig_fixture,  # noqa: F401 (the ``rig`` fixture)
)
from tests.servers import arrivals, engine_holds, leave_once_admitted, settle


async def test_every_http_path_returns_every_counter_to_zero(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    url = rig.gateway.url
    assert await http_status(url, body_for("ok")) == 200
    assert await http_status(url, body_for("ok", stream=False)) == 200
    assert await http_status(url, body_for("e500")) == 502
    assert await http_status(url, body_for("e429")) == 429
    assert await http_status(url, body_for("refused")) == 503
    await rig.back_to_zero()
    # The client leaves while waiting for the first token, and mid-stream.
    await leave_once_admitted(rig.emulators["stall"], [http_wait(url, body_for("stall"))])
    await rig.back_to_zero()
    async with aiohttp.ClientSession() as session:
        response = await session.post(
            url + "/v1/chat/completions", json=body_for("slow", tokens=500)
        )
        assert await response.content.readany()
        response.close()
    await rig.back_to_zero()
    # Admission refuses a second request while one holds m-stall's only slot.
    async with aiohttp.ClientSession() as session:
        arrived = arrivals(rig.emulators["stall"])  # an earlier stalled one may still be held
        holder = asyncio.ensure_future(
            _wait_on(session.post(url + "/v1/chat/completions", json=body_for("stall")))
        )
        await settle(lambda: arrived() == 1)
        assert await http_status(url, body_for("stall")) == 503
        holder.cancel()
        assert isinstance(
            (await asyncio.gather(holder, return_exceptions=True))[0], asyncio.CancelledError
        )
    await rig.back_to_zero()
    # The drain deadline ends a running stream.
    async with aiohttp.ClientSession() as session:
        async with session.post(
            url + "/v1/chat/completions", json=body_for("slow", tokens=500)
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
        arrived = arrivals(rig.emulators["stall"])
        call = stub.ChatCompletion(chat(model="m-stall", max_tokens=4))
        await settle(lambda: arrived() == 1)
        call.cancel()
        await rig.back_to_zero()
        call = stub.ChatCompletion(chat(model="m-slow", max_tokens=500))
        assert (await call.read()).choices
        call.cancel()
        await rig.back_to_zero()
        # Admission refusal while one call holds m-stall's slot, then the holder leaves.
        arrived = arrivals(rig.emulators["stall"])  # the cancelled one may still be held
        holder = stub.ChatCompletion(chat(model="m-stall", max_tokens=4))
        await settle(lambda: arrived() == 1)
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
    assert await http_status(rig.gateway.url, body_for("ok")) == 200
    assert await http_status(rig.gateway.url, body_for("single")) == 404


def _retired(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "retired upstream pool" in r.getMessage()]


async def test_streams_across_reloads_return_every_counter_to_zero_http(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="meridian.reload")
    url = rig.gateway.url + "/v1/chat/completions"
    async with aiohttp.ClientSession() as session:
        holder = await session.post(url, json=body_for("single", tokens=500))
        assert await holder.content.readany()
        waiter = asyncio.ensure_future(_read_all(session, url, body_for("single", tokens=4)))
        stalled = asyncio.ensure_future(_wait_on(session.post(url, json=body_for("stall"))))
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
