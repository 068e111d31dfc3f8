"""A cheap OpenAI-compatible streaming backend for overhead benchmarks on a small host.

    python -m loadtests.mock_backend --model M [--ttft-ms 20] [--itl-ms 5] [--port 0]

``meridian emulate`` runs an engine model (batches, prefill, KV cache, faults) in aiohttp and
spends ~0.7 ms of CPU per 16-token stream; on a 2-core host that is CPU the gateway under test
cannot have, so a throughput ratio there measures the emulator as much as the gateway. This
server does only what an overhead benchmark needs, on a bare ``asyncio.Protocol`` with
``httptools``: ``POST /v1/chat/completions`` answered with the first token ``--ttft-ms`` after
the request and one token every ``--itl-ms`` after that (one timer and one write per token,
vLLM's chunk format, a ``usage`` chunk when ``stream_options.include_usage``, then
``[DONE]``); ``GET /v1/models`` and ``/health`` for probes; ``GET /metrics`` with vLLM's
running/waiting gauges. No queueing: every request is served at once, so its latency is the
schedule's and the CPU it costs is what the table charges it.

Prints ``{"url": ...}`` then ``{"ready": true}`` on stdout, as ``meridian emulate`` does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import socket
import time
from dataclasses import dataclass
from typing import Any, cast

import httptools
import orjson

_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)
_END = b"0\r\n\r\n"
_DONE = b"data: [DONE]\n\n"


@dataclass(frozen=True)
class Schedule:
    model: str
    ttft_s: float
    itl_s: float
    default_tokens: int = 16


def _chunk(payload: bytes) -> bytes:
    """One HTTP/1.1 chunk of a chunked body."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _response(status: int, body: bytes, content_type: bytes = b"application/json") -> bytes:
    reason = {200: b"OK", 400: b"Bad Request", 404: b"Not Found"}.get(status, b"Error")
    return b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s" % (
        status,
        reason,
        content_type,
        len(body),
        body,
    )


class _Stream:
    """One streamed completion: its event bytes built from a template, one timer per token."""

    __slots__ = ("conn", "handle", "left", "prefix", "sent", "usage")

    def __init__(self, conn: _Connection, request_id: int, tokens: int, usage: bytes | None):
        self.conn = conn
        self.left = tokens
        self.sent = 0
        model = conn.server.schedule.model.encode()
        self.prefix = b'data: {"id":"chatcmpl-mock-%d","object":"chat.completion.chunk",' % (
            request_id
        ) + b'"created":%d,"model":"%s",' % (int(time.time()), model)
        self.usage = usage
        self.handle: asyncio.TimerHandle | None = None

    def token(self) -> None:
        self.handle = None
        transport = self.conn.transport
        if transport is None or transport.is_closing():
            self.conn.server.running -= 1
            return
        self.left -= 1
        self.sent += 1
        last = self.left <= 0
        event = self.prefix + (
            b'"choices":[{"index":0,"delta":{"content":" tok"},"logprobs":null,'
            + (b'"finish_reason":"length"}]}\n\n' if last else b'"finish_reason":null}]}\n\n')
        )
        if self.sent == 1:  # the role chunk first, as vLLM sends it
            event = (
                self.prefix + b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},'
                b'"logprobs":null,"finish_reason":null}]}\n\n' + event
            )
        if not last:
            transport.write(_chunk(event))
            loop = self.conn.server.loop
            self.handle = loop.call_later(self.conn.server.schedule.itl_s, self.token)
            return
        if self.usage is not None:
            event += self.prefix + b'"choices":[],"usage":' + self.usage + b"}\n\n"
        transport.write(_chunk(event + _DONE) + _END)
        self.conn.server.running -= 1
        self.conn.finished()


class MockServer:
    def __init__(self, schedule: Schedule, loop: asyncio.AbstractEventLoop) -> None:
        self.schedule = schedule
        self.loop = loop
        self.running = 0
        self.served = 0
        self._ids = itertools.count(1)
        self._models = orjson.dumps(
            {
                "object": "list",
                "data": [{"id": schedule.model, "object": "model", "owned_by": "mock"}],
            }
        )

    def next_id(self) -> int:
        return next(self._ids)

    def models(self) -> bytes:
        return _response(200, self._models)

    def metrics(self) -> bytes:
        label = b'{model_name="%s"}' % self.schedule.model.encode()
        page = b"vllm:num_requests_running%s %d\nvllm:num_requests_waiting%s 0\n" % (
            label,
            self.running,
            label,
        )
        return _response(200, page, b"text/plain; version=0.0.4")


class _Connection(asyncio.Protocol):
    """One client connection: HTTP/1.1 keep-alive, one request at a time."""

    def __init__(self, server: MockServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.body: list[bytes] = []
        self.stream: _Stream | None = None
        self.close_after = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # a token goes out now

    def connection_lost(self, exc: Exception | None) -> None:
        if self.stream is not None and self.stream.handle is not None:
            self.stream.handle.cancel()
            self.server.running -= 1
        self.stream = None
        self.transport = None

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self._reply(_response(400, b'{"error":"bad request"}'), close=True)

    # httptools callbacks
    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        url, body = self.url, b"".join(self.body)
        self.url, self.body = b"", []
        self.close_after = not self.parser.should_keep_alive()
        method = self.parser.get_method()
        path = url.split(b"?", 1)[0]
        if method == b"POST" and path == b"/v1/chat/completions":
            self._chat(body)
        elif method == b"GET" and path == b"/v1/models":
            self._reply(self.server.models())
        elif method == b"GET" and path == b"/health":
            self._reply(_response(200, b"{}"))
        elif method == b"GET" and path == b"/metrics":
            self._reply(self.server.metrics())
        else:
            self._reply(_response(404, b'{"error":"not found"}'))

    def _chat(self, raw: bytes) -> None:
        try:
            request: Any = orjson.loads(raw)
            tokens = int(request.get("max_tokens") or self.server.schedule.default_tokens)
        except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
            self._reply(_response(400, b'{"error":"the body is not a JSON object"}'))
            return
        if not request.get("stream"):
            self._reply(_response(400, b'{"error":"this mock only streams"}'))
            return
        options = request.get("stream_options") or {}
        usage = None
        if isinstance(options, dict) and options.get("include_usage"):
            prompt = max(1, len(raw) // 4)
            usage = b'{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}' % (
                prompt,
                max(tokens, 1),
                prompt + max(tokens, 1),
            )
        assert self.transport is not None
        self.transport.write(_HEAD)
        server = self.server
        server.running += 1
        server.served += 1
        self.stream = stream = _Stream(self, server.next_id(), max(tokens, 1), usage)
        stream.handle = server.loop.call_later(server.schedule.ttft_s, stream.token)

    def finished(self) -> None:
        self.stream = None
        if self.close_after and self.transport is not None:
            self.transport.close()

    def _reply(self, response: bytes, close: bool = False) -> None:
        if self.transport is None:
            return
        self.transport.write(response)
        if close or self.close_after:
            self.transport.close()


async def serve(schedule: Schedule, host: str = "127.0.0.1", port: int = 0) -> None:
    loop = asyncio.get_running_loop()
    server = MockServer(schedule, loop)
    listener = await loop.create_server(
        lambda: _Connection(server), host, port, backlog=4096, reuse_address=True
    )
    bound = listener.sockets[0].getsockname()
    print(orjson.dumps({"url": f"http://{bound[0]}:{bound[1]}"}).decode(), flush=True)
    print(orjson.dumps({"ready": True}).decode(), flush=True)
    async with listener:
        await listener.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.mock_backend", description=__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--ttft-ms", type=float, default=20.0)
    parser.add_argument("--itl-ms", type=float, default=5.0)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    import uvloop

    schedule = Schedule(args.model, args.ttft_ms / 1000, args.itl_ms / 1000)
    with contextlib.suppress(KeyboardInterrupt):
        uvloop.run(serve(schedule, args.host, args.port))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
