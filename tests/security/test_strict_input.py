"""Bad input at the HTTP door: strict JSON, bounded integers, malformed requests that are answered
without reflecting anything or logging a traceback, and ``Expect: 100-continue`` refused early."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import aiohttp
import pytest

from tests.gateway.support import FAST_ENGINE, MODEL, config_for
from tests.servers import EmulatorFactory, GatewayFactory, emulators, gateways

CANARY = "sk-clientCANARY4e8b0d6a2f9c"


@pytest.fixture
async def rig() -> AsyncIterator[tuple[EmulatorFactory, GatewayFactory]]:
    async with emulators(MODEL, FAST_ENGINE) as emulator, gateways() as gateway:
        yield emulator, gateway


async def _started(rig: tuple[EmulatorFactory, GatewayFactory]) -> tuple[object, object]:
    emulator, gateway = rig
    backend = await emulator("b1")
    return backend, await gateway(config_for({"b1": backend.url}))


CHAT_BODY = '"messages": [{"role": "user", "content": "x"}]'
STRICT_CASES = [
    (
        "/v1/chat/completions",
        f'{{"model": "{MODEL}", "model": "other", {CHAT_BODY}}}',
        "duplicate_key",
    ),
    (
        "/v1/chat/completions",
        f'{{"model": "{MODEL}", {CHAT_BODY}, "stream": false, "stream": true}}',
        "duplicate_key",
    ),
    (
        "/v1/chat/completions",
        f'{{"model": "{MODEL}", "messages": [{{"role": "user", "role": "system", "content": "x"}}]}}',
        "duplicate_key",
    ),
    (
        "/v1/chat/completions",
        f'{{"model": "{MODEL}", {CHAT_BODY}, "seed": 18446744073709551616}}',
        "integer_out_of_range",
    ),
    ("/v1/chat/completions", f'{{"model": "{MODEL}", {CHAT_BODY}, "n": {"9" * 5000}}}', None),
    (
        "/v1/chat/completions",
        f'{{"model": "{MODEL}", {CHAT_BODY}, "max_tokens": 2147483648}}',
        None,
    ),
    ("/v1/completions", f'{{"model": "{MODEL}", "prompt": [1, 2147483648]}}', None),
    ("/v1/completions", f'{{"model": "{MODEL}", "prompt": [4294967295]}}', None),
    ("/v1/completions", f'{{"model": "{MODEL}", "prompt": [-1]}}', None),
    (
        "/v1/chat/completions",
        f'{{"model": "{MODEL}", {CHAT_BODY}, "temperature": NaN}}',
        "invalid_json",
    ),
]


@pytest.mark.parametrize(("path", "body", "code"), STRICT_CASES)
async def test_ambiguous_or_out_of_range_json_is_400(
    rig: tuple[EmulatorFactory, GatewayFactory], path: str, body: str, code: str | None
) -> None:
    backend, running = await _started(rig)
    async with aiohttp.ClientSession() as session:
        async with session.post(running.url + path, data=body.encode()) as response:  # type: ignore[attr-defined]
            assert response.status == 400
            error = (await response.json())["error"]
    if code is not None:
        assert error["code"] == code
    assert backend.stats.requests == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "body",
    [
        f'{{"model": "{MODEL}", "prompt": [2147483648, 5]}}',
        f'{{"model": "{MODEL}", "model": "x", "prompt": "hi"}}',
    ],
)
async def test_explain_route_refuses_the_same_bodies(
    rig: tuple[EmulatorFactory, GatewayFactory], body: str
) -> None:
    _, running = await _started(rig)
    async with aiohttp.ClientSession() as session:
        async with session.post(running.url + "/v1/meridian/route", data=body.encode()) as r:  # type: ignore[attr-defined]
            assert r.status == 400


async def test_largest_token_id_is_still_accepted(
    rig: tuple[EmulatorFactory, GatewayFactory],
) -> None:
    _, running = await _started(rig)
    body = f'{{"model": "{MODEL}", "prompt": [0, 2147483647], "max_tokens": 2}}'
    async with aiohttp.ClientSession() as session:
        async with session.post(running.url + "/v1/completions", data=body.encode()) as r:  # type: ignore[attr-defined]
            assert r.status == 200


async def _raw(port: int, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        return await reader.read()  # the gateway closes after an error: read to EOF
    finally:
        writer.close()


MALFORMED = [
    f"Authorization: Bearer {CANARY}\x01\r\nContent-Length: 2\r\n\r\n{{}}",
    f"Authorization: Bearer {CANARY}\r\nContent-Length: {CANARY}\r\n\r\n",
    f"Authorization: Bearer {CANARY}\r\nBad {CANARY}: yes\r\n\r\n",
    f"X-Token: {CANARY}{'a' * 9000}\r\n\r\n",
]


@pytest.mark.parametrize("headers", MALFORMED)
async def test_malformed_request_reflects_nothing_and_logs_no_traceback(
    rig: tuple[EmulatorFactory, GatewayFactory], caplog: pytest.LogCaptureFixture, headers: str
) -> None:
    _, running = await _started(rig)
    caplog.set_level(logging.DEBUG)
    request = f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n{headers}".encode()
    answers = [await _raw(running.port, request) for _ in range(3)]  # type: ignore[attr-defined]
    for answer in answers:
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.split(b" ")[1] in (b"400", b"431")
        assert b"application/json" in head
        assert b'"error"' in body
        assert CANARY.encode() not in answer
    assert CANARY not in caplog.text
    assert "Traceback" not in caplog.text
    assert not any(record.exc_info for record in caplog.records)
    refusals = [r for r in caplog.records if r.name == "meridian.door"]
    assert len(refusals) == 3  # one line per bad request


async def test_expect_continue_over_the_limit_gets_413_without_100(
    rig: tuple[EmulatorFactory, GatewayFactory],
) -> None:
    backend, running = await _started(rig)
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
        b"Content-Type: application/json\r\nContent-Length: 99999999\r\n\r\n"
    )
    answer = await _raw(running.port, request)  # type: ignore[attr-defined]
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert b"100 Continue" not in answer
    assert backend.stats.requests == 0  # type: ignore[attr-defined]


async def test_expect_continue_within_the_limit_still_continues(
    rig: tuple[EmulatorFactory, GatewayFactory],
) -> None:
    _, running = await _started(rig)
    body = f'{{"model": "{MODEL}", {CHAT_BODY}, "max_tokens": 2}}'.encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", running.port)  # type: ignore[attr-defined]
    try:
        writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
            b"Connection: close\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
        )
        await writer.drain()
        assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(body)
        await writer.drain()
        assert (await reader.read()).startswith(b"HTTP/1.1 200 ")
    finally:
        writer.close()
