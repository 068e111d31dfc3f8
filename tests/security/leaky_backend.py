"""An upstream that misbehaves the way real ones do: it echoes credentials and internal details
in its error bodies. A real aiohttp server on loopback; each request is answered by ``mode``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import orjson
from aiohttp import web

from tests.servers import serving

BACKEND_CANARY = "sk-backendCANARY7f3a9c2e5d1b"
CLIENT_CANARY = "sk-clientCANARY4e8b0d6a2f9c"
INTERNAL = "ConnectionKey(host='10.11.12.13', port=8000)"


@dataclass
class LeakyBackend:
    url: str
    mode: str = "401"
    requests: int = 0
    seen_auth: list[str] = field(default_factory=list)
    # event_mid: the error event waits for this, so it is surely after the first token.
    release: asyncio.Event = field(default_factory=asyncio.Event)


def _error(status: int, message: str) -> web.Response:
    body = {"error": {"message": message, "type": "error", "code": None}}
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


def _chunk(text: str) -> bytes:
    obj = {
        "id": "x",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
    }
    return b"data: " + orjson.dumps(obj) + b"\n\n"


async def _answer(request: web.Request, state: LeakyBackend) -> web.StreamResponse:
    state.requests += 1
    auth = request.headers.get("Authorization", "")
    state.seen_auth.append(auth)
    mode = state.mode
    if mode == "401":
        return _error(401, f"Incorrect API key provided: {auth[7:]}. Find your key at ...")
    if mode == "500":
        return _error(500, f"Traceback: OSError at {INTERNAL} key={BACKEND_CANARY}")
    if mode == "400":
        return _error(
            400,
            f"This model's maximum context length is 4096 tokens (key {BACKEND_CANARY}, "
            "http://10.11.12.13:8000/v1)",
        )
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    if mode == "event_first":  # an error event before any token
        await response.write(b"data: " + orjson.dumps({"error": {"message": auth}}) + b"\n\n")
    else:  # "event_mid": one token, then an error event carrying the key
        await response.write(_chunk("hi"))
        await state.release.wait()
        await response.write(
            b"data: "
            + orjson.dumps({"error": {"message": f"engine died, key {auth} at {INTERNAL}"}})
            + b"\n\n"
        )
    await response.write_eof()
    return response


@contextlib.asynccontextmanager
async def leaky_backend(mode: str = "401") -> AsyncIterator[LeakyBackend]:
    app = web.Application()
    state = LeakyBackend(url="", mode=mode)

    async def handler(request: web.Request) -> web.StreamResponse:
        return await _answer(request, state)

    app.router.add_post("/v1/chat/completions", handler)
    app.router.add_post("/v1/completions", handler)
    async with serving(app) as url:
        state.url = url
        yield state
