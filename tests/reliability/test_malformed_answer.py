"""A non-streaming answer that is not a JSON object of its format (``{"choices": 5}``, a choice
or a message that is not an object, a list, not JSON at all) is a failed attempt, like a
malformed event before the first token: the next backend is tried, and when none answers
properly the client gets the door's own error (OpenAI's or Anthropic's shape), never a 500
with a traceback in the log, never a 200 counted as a success. Before the fix the Messages
door's translation of such a chat answer raised inside the handler (500 in OpenAI's shape on
an Anthropic door, counted as a 200), and the OpenAI door relayed the bytes as a 200.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from gateway.config import parse_config
from gateway.state_keys import RELAY
from tests.reliability.support import (
    MODEL,
    SETTLE_S,
    GatewayFactory,
    config_data,
    metric_value,
    wait_for,
)
from tests.servers import serving

GOOD = {
    "id": "c1",
    "object": "chat.completion",
    "model": MODEL,
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "fine"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}
MALFORMED: list[bytes] = [
    orjson.dumps({"choices": 5}),
    orjson.dumps({"choices": [5]}),
    orjson.dumps({"choices": [{"message": 3}]}),
    orjson.dumps({"choices": [{"message": {"tool_calls": [{"function": "f"}]}}]}),
    orjson.dumps([1]),
    b"not json at all",
]
DOORS = ["/v1/chat/completions", "/v1/messages"]


@dataclass
class Answering:
    """A backend that answers every POST with ``body`` (status 200, JSON content type)."""

    body: bytes = b""
    url: str = ""
    calls: list[str] = field(default_factory=list)


async def _answering(answer: Answering) -> web.Application:
    async def handler(request: web.Request) -> web.Response:
        await request.read()
        answer.calls.append(request.path)
        return web.Response(body=answer.body, content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    return app


@pytest.fixture
async def pair() -> AsyncIterator[tuple[Answering, Answering]]:
    bad, good = Answering(), Answering(orjson.dumps(GOOD))
    async with serving(await _answering(bad)) as bad_url, serving(await _answering(good)) as url:
        bad.url, good.url = bad_url, url
        yield bad, good


def _body() -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}


def _config(urls: dict[str, str]) -> dict[str, Any]:
    config = config_data(urls)
    for backend in config["backends"]:
        backend["apis"] = ["chat"]  # a Messages client is translated to chat
    config["routing"] = {"policy": "round_robin"}
    return config


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("body", MALFORMED, ids=[b.decode()[:40] for b in MALFORMED])
async def test_no_backend_answers_properly_the_client_gets_its_doors_error(
    pair: tuple[Answering, Answering],
    gateway: GatewayFactory,
    door: str,
    body: bytes,
    caplog: pytest.LogCaptureFixture,
) -> None:
    bad, _ = pair
    bad.body = body
    running = await gateway(parse_config(_config({"bad": bad.url}), "<test>"))
    caplog.set_level(logging.WARNING)
    async with aiohttp.ClientSession() as session:
        async with session.post(running.url + door, json=_body()) as reply:
            status, text = reply.status, await reply.text()
    assert 500 < status < 600 and status != 500, (status, text)
    error = orjson.loads(text)
    if door == "/v1/messages":
        assert error["type"] == "error" and isinstance(error["error"]["message"], str)
    else:
        assert isinstance(error["error"]["code"], str)
    port = bad.url.rsplit(":", 1)[1]
    for leak in ("Error", "Traceback", "127.0.0.1", port, "not json"):
        assert leak not in text, f"{leak!r} reached the client"
    labels = {"backend": "bad", "outcome": "malformed"}
    assert metric_value(running, "meridian_upstream_attempts_total", labels) >= 1
    relay = running.app[RELAY]
    await wait_for(lambda: relay.state.active == 0 and relay.drain.in_flight == 0, SETTLE_S)
    crashes = [r for r in caplog.records if r.exc_info is not None]
    assert not crashes, [r.getMessage() for r in crashes]


@pytest.mark.parametrize("door", DOORS)
async def test_a_malformed_answer_moves_the_request_to_the_next_backend(
    pair: tuple[Answering, Answering], gateway: GatewayFactory, door: str
) -> None:
    bad, good = pair
    bad.body = orjson.dumps({"choices": [{"message": 3}]})
    running = await gateway(parse_config(_config({"bad": bad.url, "good": good.url}), "<test>"))
    replies = []
    async with aiohttp.ClientSession() as session:
        for _ in range(2):  # round robin: one of the two starts on the bad backend
            async with session.post(running.url + door, json=_body()) as reply:
                replies.append((reply.status, await reply.json()))
    assert [status for status, _ in replies] == [200, 200], replies
    for _, answer in replies:
        text = (
            answer["content"][0]["text"]
            if door == "/v1/messages"
            else (answer["choices"][0]["message"]["content"])
        )
        assert text == "fine"
    assert len(bad.calls) == 1 and len(good.calls) == 2
    labels = {"backend": "bad", "outcome": "malformed"}
    assert metric_value(running, "meridian_upstream_attempts_total", labels) == 1
