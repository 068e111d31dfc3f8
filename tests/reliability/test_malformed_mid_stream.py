"""A mid-stream event that is JSON but not shaped like its format's events (``"choices": 5``,
a choice or a delta that is not an object, a Responses ``type`` that is a list, a Messages
``delta`` that is a number) ends the stream as ``upstream_malformed`` on every door (chat,
completions, Messages translated and native, Responses, and gRPC): counted,
the door's own error event to the client with Meridian's words only (no exception text, no
upstream address), nothing raised inside the gateway, the upstream connection closed and every
request counter back to zero. Before the fix each of these raised TypeError/AttributeError in
the grammar or in the Messages translator and the handler crashed after the headers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import grpc
import orjson
import pytest
from aiohttp import web

from gateway.config import parse_config
from gateway.grpc.client import inference_stub
from gateway.grpc.mount import GRPC_SERVER
from gateway.state_keys import METRICS, RELAY
from tests.grpc.grpc_support import chat as grpc_chat
from tests.reliability.support import (
    MODEL,
    SETTLE_S,
    GatewayFactory,
    config_data,
    metric_value,
    wait_for,
)
from tests.servers import serving


def data(obj: Any, name: str | None = None) -> bytes:
    head = b"event: " + name.encode() + b"\n" if name else b""
    return head + b"data: " + orjson.dumps(obj) + b"\n\n"


def chunk(choice: dict[str, Any]) -> bytes:
    return data({"id": "c", "object": "chat.completion.chunk", "model": MODEL, "choices": [choice]})


CHAT_TOKEN = chunk({"index": 0, "delta": {"content": "tok"}, "finish_reason": None})
TEXT_TOKEN = chunk({"index": 0, "text": "tok", "finish_reason": None})
MESSAGES_START = [
    data({"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 1}}}),
    data({"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}),
]
MESSAGES_TOKEN = data({"type": "content_block_delta", "index": 0, "delta": {"text": "tok"}})
RESPONSES_START = data({"type": "response.created", "response": {"id": "r"}})
MALFORMED_WORDS = "upstream sent a malformed data event"  # gateway/stream.py, for any malformed
RESPONSES_TOKEN = data({"type": "response.output_text.delta", "delta": "tok"})


@dataclass(frozen=True)
class Case:
    door: str  # the client's path
    apis: list[str]  # what the backend declares
    before: list[bytes]  # well-formed events, two of them tokens
    bad: Any  # the malformed event's JSON
    after: bytes  # what a correct stream would go on with

    @property
    def id(self) -> str:
        return f"{self.door}:{orjson.dumps(self.bad).decode()}"


CHAT = ["chat", "completions"]
CASES = [
    Case("/v1/chat/completions", CHAT, [CHAT_TOKEN] * 2, {"choices": 5}, b"data: [DONE]\n\n"),
    Case("/v1/chat/completions", CHAT, [CHAT_TOKEN] * 2, {"choices": [5]}, b"data: [DONE]\n\n"),
    Case(
        "/v1/chat/completions",
        CHAT,
        [CHAT_TOKEN] * 2,
        {"choices": [{"delta": 3}]},
        b"data: [DONE]\n\n",
    ),
    Case("/v1/completions", CHAT, [TEXT_TOKEN] * 2, {"choices": True}, b"data: [DONE]\n\n"),
    # A Messages client on a chat-only backend: the translator read the delta and crashed.
    Case("/v1/messages", CHAT, [CHAT_TOKEN] * 2, {"choices": [{"delta": 3}]}, b"data: [DONE]\n\n"),
    Case(
        "/v1/messages",
        CHAT,
        [CHAT_TOKEN] * 2,
        {"choices": [{"delta": {"tool_calls": [{"function": "f"}]}}]},
        b"data: [DONE]\n\n",
    ),
    Case(
        "/v1/messages",
        ["chat", "messages"],
        [*MESSAGES_START, MESSAGES_TOKEN, MESSAGES_TOKEN],
        {"type": "content_block_delta", "index": 0, "delta": 3},
        data({"type": "message_stop"}, "message_stop"),
    ),
    Case(
        "/v1/responses",
        ["chat", "responses"],
        [RESPONSES_START, RESPONSES_TOKEN, RESPONSES_TOKEN],
        {"type": ["response.output_text.delta"], "delta": "x"},
        data({"type": "response.completed", "response": {}}),
    ),
    Case(
        "/v1/responses",
        ["chat", "responses"],
        [RESPONSES_START, RESPONSES_TOKEN, RESPONSES_TOKEN],
        {"type": "response.failed", "response": 5},
        data({"type": "response.completed", "response": {}}),
    ),
]


@dataclass
class Scripted:
    """A backend that writes ``first``, waits for ``go`` (the client saw a token: the stream
    has started), writes ``then`` and keeps writing keepalive comments until the gateway
    closes the connection (``closed`` is set then)."""

    url: str = ""
    first: list[bytes] = field(default_factory=list)
    then: list[bytes] = field(default_factory=list)
    go: asyncio.Event = field(default_factory=asyncio.Event)
    closed: asyncio.Event = field(default_factory=asyncio.Event)


@pytest.fixture
async def upstream() -> AsyncIterator[Scripted]:
    scripted = Scripted()

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        try:
            await response.write(b"".join(scripted.first))
            await scripted.go.wait()
            await response.write(b"".join(scripted.then))
            while True:  # a live upstream that would go on: only the gateway can end this
                await asyncio.sleep(0.01)
                await response.write(b": keepalive\n\n")
        except (ConnectionError, asyncio.CancelledError):
            scripted.closed.set()
        return response

    app = web.Application()
    for path in ("/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/responses"):
        app.router.add_post(path, handler)
    async with serving(app) as url:
        scripted.url = url
        yield scripted


def request_body(door: str) -> dict[str, Any]:
    if door == "/v1/completions":
        return {"model": MODEL, "prompt": "hello", "stream": True}
    if door == "/v1/responses":
        return {"model": MODEL, "input": "hello", "stream": True}
    body: dict[str, Any] = {"model": MODEL, "stream": True, "max_tokens": 8}
    body["messages"] = [{"role": "user", "content": "hello"}]
    return body


def error_event(events: list[bytes]) -> tuple[bytes, dict[str, Any]]:
    """The stream's one error event: its bytes and its JSON."""
    errors = []
    for event in events:
        payload = event.split(b"data: ", 1)[-1]
        if payload.startswith(b"{") and b'"error"' in payload:
            obj = orjson.loads(payload)
            if obj.get("type") == "error" or isinstance(obj.get("error"), dict):
                errors.append((event, obj))
    [error] = errors
    return error


def error_kind(door: str, obj: dict[str, Any]) -> str:
    """OpenAI ``error.code``, Responses ``code``; a Messages error carries only its type and
    Meridian's message (the kind itself is in the metric)."""
    if door == "/v1/messages":
        assert obj["error"]["type"] == "api_error"
        return str(obj["error"]["message"])
    if door == "/v1/responses":
        return str(obj["code"])
    return str(obj["error"]["code"])


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
async def test_a_malformed_event_mid_stream_ends_it_as_upstream_malformed(
    upstream: Scripted,
    gateway: GatewayFactory,
    case: Case,
    caplog: pytest.LogCaptureFixture,
) -> None:
    upstream.first[:] = case.before
    upstream.then[:] = [data(case.bad), case.after]
    config = config_data({"scripted": upstream.url})
    config["backends"][0]["apis"] = case.apis
    running = await gateway(parse_config(config, "<test>"))
    caplog.set_level(logging.WARNING)
    async with aiohttp.ClientSession() as session:
        async with session.post(running.url + case.door, json=request_body(case.door)) as reply:
            assert reply.status == 200
            raw = b""
            while b"tok" not in raw:  # the first token: headers are out, the stream is on
                part = await asyncio.wait_for(reply.content.readany(), SETTLE_S)
                assert part, "the stream ended before its first token"
                raw += part
            upstream.go.set()
            raw += await asyncio.wait_for(reply.content.read(), SETTLE_S)
    events = [e for e in raw.split(b"\n\n") if e]
    assert sum(b"tok" in e for e in events) >= 2  # the stream had started
    event, error = error_event(events)
    # Messages errors have no code: Meridian's fixed words for a malformed event instead
    malformed = MALFORMED_WORDS if case.door == "/v1/messages" else "upstream_malformed"
    assert error_kind(case.door, error) == malformed
    assert case.after not in raw  # ended at the bad event, not after it
    port = upstream.url.rsplit(":", 1)[1].encode()
    for leak in (b"Error", b"object", b"has no attribute", b"127.0.0.1", port):
        assert leak not in event, f"{leak!r} reached the client"
    labels = {"backend": "scripted", "kind": "upstream_malformed"}
    assert metric_value(running, "meridian_stream_errors_total", labels) == 1
    await asyncio.wait_for(upstream.closed.wait(), SETTLE_S)  # the upstream socket let go
    relay = running.app[RELAY]
    await wait_for(lambda: relay.state.active == 0 and relay.drain.in_flight == 0, SETTLE_S)
    gauge = {"backend": "scripted"}
    assert metric_value(running, "meridian_upstream_in_flight", gauge) == 0
    crashes = [r for r in caplog.records if r.exc_info is not None]
    assert not crashes, [r.getMessage() for r in crashes]


GRPC_CASES = [
    ({"choices": 5}, "upstream_malformed"),  # the grammar: the relay's StreamBroken
    # A shape the grammar accepts but the proto cannot hold: the converter's own refusal, in
    # the servicer, handed back to the core, which counts it like the grammar's.
    ({"choices": [{"delta": {"tool_calls": [{"index": "x"}]}}]}, "upstream_malformed"),
]


@pytest.mark.parametrize(
    ("bad", "kind"), GRPC_CASES, ids=[orjson.dumps(c[0]).decode() for c in GRPC_CASES]
)
async def test_a_malformed_event_mid_stream_on_the_grpc_door(
    upstream: Scripted,
    gateway: GatewayFactory,
    bad: Any,
    kind: str | None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    upstream.first[:] = [CHAT_TOKEN, CHAT_TOKEN]
    upstream.then[:] = [data(bad), b"data: [DONE]\n\n"]
    config = config_data({"scripted": upstream.url})
    config["listen"] = {"host": "127.0.0.1", "port": 0, "grpc_port": 0}
    running = await gateway(parse_config(config, "<test>"))
    caplog.set_level(logging.WARNING)
    target = running.app[GRPC_SERVER].target
    async with grpc.aio.insecure_channel(target) as channel:
        call = inference_stub(channel).ChatCompletion(grpc_chat(max_tokens=8, model=MODEL))
        received = []
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for chunk in call:
                received.append(chunk)
                upstream.go.set()  # the stream is on: now the bad event
    assert received, "the failure came after the first token"
    assert caught.value.code() is grpc.StatusCode.INTERNAL
    details = caught.value.details() or ""
    port = upstream.url.rsplit(":", 1)[1]
    for leak in ("Error", "object", "invalid literal", "127.0.0.1", port):
        assert leak not in details, f"{leak!r} reached the client: {details}"
    await asyncio.wait_for(upstream.closed.wait(), SETTLE_S)
    relay = running.app[RELAY]
    await wait_for(lambda: relay.state.active == 0 and relay.drain.in_flight == 0, SETTLE_S)
    if kind is not None:
        labels = {"backend": "scripted", "kind": kind}
        assert metric_value(running, "meridian_stream_errors_total", labels) == 1
    statuses = {
        s.labels["status"]
        for family in running.app[METRICS].registry.collect()
        for s in family.samples
        if s.name == "meridian_requests_total" and s.labels["protocol"] == "grpc"
    }
    assert statuses and "cancelled" not in statuses, statuses  # the backend's, not the client's
    crashes = [r for r in caplog.records if r.exc_info is not None]
    assert not crashes, [r.getMessage() for r in crashes]
