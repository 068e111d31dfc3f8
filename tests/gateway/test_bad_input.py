"""Bad input gets an OpenAI-shaped 4xx, and no upstream request is made."""

from __future__ import annotations

import aiohttp
import pytest

from tests.gateway.support import MODEL, config_for

CASES = [
    ("/v1/chat/completions", b"{not json", 400, "invalid_json"),
    ("/v1/chat/completions", b"[1, 2]", 400, None),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}]}', 400, None),
    ("/v1/chat/completions", b'{"model": 5, "messages": []}', 400, None),
    ("/v1/chat/completions", b'{"model": "test-model"}', 400, None),
    ("/v1/chat/completions", b'{"model": "test-model", "messages": "hi"}', 400, None),
    ("/v1/chat/completions", b'{"model": "test-model", "messages": [{"content": "x"}]}', 400, None),
    (
        "/v1/chat/completions",
        b'{"model": "test-model", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}',
        400,
        None,
    ),
    (
        "/v1/chat/completions",
        b'{"model": "test-model", "messages": [{"role": "user", "content": "x"}], "max_tokens": -1}',
        400,
        None,
    ),
    (
        "/v1/chat/completions",
        b'{"model": "test-model", "messages": [{"role": "user", "content": "x"}], "n": 0}',
        400,
        None,
    ),
    ("/v1/completions", b'{"model": "test-model", "prompt": "x", "n": "2"}', 400, None),
    (
        "/v1/chat/completions",
        b'{"model": "nope", "messages": [{"role": "user", "content": "x"}]}',
        404,
        "model_not_found",
    ),
    ("/v1/completions", b'{"model": "test-model"}', 400, None),
    ("/v1/completions", b'{"model": "test-model", "prompt": [1, "a"]}', 400, None),
    ("/v1/nowhere", b"{}", 404, "not_found"),
]


@pytest.mark.parametrize(("path", "body", "status", "code"), CASES)
async def test_bad_request_is_rejected_before_any_upstream(
    emulator, gateway, path: str, body: bytes, status: int, code: str | None
) -> None:
    backend = await emulator("b1")
    running = await gateway(config_for({"b1": backend.url}))
    async with aiohttp.ClientSession() as session:
        async with session.post(
            running.url + path, data=body, headers={"Content-Type": "application/json"}
        ) as response:
            assert response.status == status
            payload = await response.json()
    error = payload["error"]
    assert isinstance(error["message"], str) and error["message"]
    assert error["type"]
    if code is not None:
        assert error["code"] == code
    assert backend.stats.requests == 0


async def test_body_over_the_limit_is_413(emulator, gateway) -> None:
    backend = await emulator("b1")
    running = await gateway(config_for({"b1": backend.url}, limits={"max_body_bytes": 2048}))
    big = {"model": MODEL, "messages": [{"role": "user", "content": "x" * 5000}]}
    async with aiohttp.ClientSession() as session:
        async with session.post(running.url + "/v1/chat/completions", json=big) as response:
            assert response.status == 413
            payload = await response.json()
    assert payload["error"]["code"] == "request_too_large"
    assert backend.stats.requests == 0


async def test_wrong_method_is_openai_shaped(emulator, gateway) -> None:
    backend = await emulator("b1")
    running = await gateway(config_for({"b1": backend.url}))
    async with aiohttp.ClientSession() as session:
        async with session.get(running.url + "/v1/chat/completions") as response:
            assert response.status == 405
            payload = await response.json()
    assert payload["error"]["code"] == "method_not_allowed"
