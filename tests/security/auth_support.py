"""Keys and configs for the auth tests, and an upstream that records the tenant it was sent."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import orjson
from aiohttp import web

from gateway.auth.keys import digest, new_key
from gateway.grpc.client import inference_stub
from proto.meridian.v1 import inference_pb2 as pb
from tests.servers import hang_bound, serving

MODEL = "test-model"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 2}


@dataclass(frozen=True)
class IssuedKey:
    key: str
    entry: dict[str, Any]

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


async def until(predicate: Callable[[], bool], within_s: float = 10.0) -> None:
    """Until ``predicate`` holds (an event the test waits for), bounded so a bug fails loudly."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + hang_bound(within_s)
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not met")
        await asyncio.sleep(0.01)


def issue(
    tenant: str,
    models: list[str] | None = None,
    scopes: list[str] | None = None,
    expired: bool = False,
) -> IssuedKey:
    key, key_id = new_key()
    entry: dict[str, Any] = {"id": key_id, "sha256": digest(key), "tenant": tenant}
    if models is not None:
        entry["models"] = models
    if scopes is not None:
        entry["scopes"] = scopes
    if expired:
        entry["expires_at"] = (datetime.now(UTC) - timedelta(seconds=1)).isoformat()
    return IssuedKey(key, entry)


@dataclass
class Recorder:
    url: str = ""
    tenants: list[str | None] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)


async def _streamed(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    chunk = {
        "id": "x",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": MODEL,
        "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}],
    }
    await response.write(b"data: " + orjson.dumps(chunk) + b"\n\ndata: [DONE]\n\n")
    await response.write_eof()
    return response


@contextlib.asynccontextmanager
async def recording_backend() -> AsyncIterator[Recorder]:
    """An OpenAI-compatible upstream (one chunk when streaming) that notes each
    X-Meridian-Tenant."""
    recorder = Recorder()

    async def chat(request: web.Request) -> web.StreamResponse:
        recorder.tenants.append(request.headers.get("X-Meridian-Tenant"))
        recorder.bodies.append(orjson.loads(await request.read()))
        if recorder.bodies[-1].get("stream"):
            return await _streamed(request)
        body = {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": MODEL,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "hi"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    async with serving(app) as url:
        recorder.url = url
        yield recorder


async def grpc_call(
    target: str,
    metadata: tuple[tuple[str, str], ...] = (),
    credentials: grpc.ChannelCredentials | None = None,
) -> grpc.StatusCode:
    """One streamed chat completion over gRPC (TLS with ``credentials``); its status."""
    request = pb.ChatCompletionRequest(
        model=MODEL, messages=[pb.ChatMessage(role="user", text="hi")], max_tokens=2
    )
    channel = (
        grpc.aio.insecure_channel(target)
        if credentials is None
        else grpc.aio.secure_channel(target, credentials)
    )
    async with channel:
        call = inference_stub(channel).ChatCompletion(request, metadata=metadata, timeout=30)
        try:
            async for _ in call:
                pass
        except grpc.aio.AioRpcError as error:
            return error.code()
    return grpc.StatusCode.OK
