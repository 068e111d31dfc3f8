"""A minimal OpenAI-style streaming server with exact timing, to measure the load generator alone.

    .venv/bin/python -m loadtests.bench.pacer --ttft-ms 100 --itl-ms 40 [--port 0]

Prints ``{"url": ...}`` then ``{"ready": true}``. Every request gets its first token exactly
``ttft`` after its body arrived and then one token every ``itl`` (``max_tokens`` of them), each
on its own timer, with usage and ``[DONE]`` at the end. No engine, no batching, no aiohttp: a
raw asyncio protocol writing prebuilt bytes, a few microseconds a token, so at a thousand
streams it stays far from saturating a core and what the generator reports beyond the
configured values is the generator's (and the machine's) own error. The emulator
(``meridian emulate``) is the faithful server; this one is the ruler.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from typing import cast

import orjson

from loadtests.bench.cli import run_fast

HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    b"Transfer-Encoding: chunked\r\nX-Meridian-Route: backend=pacer\r\n\r\n"
)
TOKEN_EVENT = b'data: {"choices":[{"index":0,"delta":{"content":" tok"},"finish_reason":null}]}\n\n'
LAST_EVENT = (
    b'data: {"choices":[{"index":0,"delta":{"content":" end"},"finish_reason":"length"}]}\n\n'
)


def _http_chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


TOKEN_CHUNK = _http_chunk(TOKEN_EVENT)


def _closing(tokens: int) -> bytes:
    usage = {"prompt_tokens": 0, "completion_tokens": tokens, "total_tokens": tokens}
    tail = b"data: " + orjson.dumps({"choices": [], "usage": usage}) + b"\n\ndata: [DONE]\n\n"
    return _http_chunk(LAST_EVENT) + _http_chunk(tail) + b"0\r\n\r\n"


class PacerProtocol(asyncio.Protocol):
    """One keep-alive connection; one request at a time, as the bench client sends them."""

    def __init__(self, ttft_s: float, itl_s: float) -> None:
        self._ttft_s = ttft_s
        self._itl_s = itl_s
        self._buffer = b""
        self._transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self._timers: list[asyncio.TimerHandle] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in self._timers:
            timer.cancel()
        self._transport = None

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        length = 0
        for line in self._buffer[:end].split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if len(self._buffer) < end + 4 + length:
            return
        body = self._buffer[end + 4 : end + 4 + length]
        self._buffer = self._buffer[end + 4 + length :]
        tokens = max(1, int(orjson.loads(body).get("max_tokens") or 16))
        self._schedule(tokens)

    def _schedule(self, tokens: int) -> None:
        start = self._loop.time() + self._ttft_s
        if tokens == 1:
            self._timers = [self._loop.call_at(start, self._write, HEAD + _closing(1))]
            return
        self._timers = [self._loop.call_at(start, self._write, HEAD + TOKEN_CHUNK)]
        for index in range(1, tokens - 1):
            at = start + index * self._itl_s
            self._timers.append(self._loop.call_at(at, self._write, TOKEN_CHUNK))
        last = start + (tokens - 1) * self._itl_s
        self._timers.append(self._loop.call_at(last, self._write, _closing(tokens)))

    def _write(self, payload: bytes) -> None:
        if self._transport is not None:
            self._transport.write(payload)


async def serve(ttft_ms: float, itl_ms: float, host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: PacerProtocol(ttft_ms / 1000.0, itl_ms / 1000.0), host, port, backlog=4096
    )
    bound = server.sockets[0].getsockname()[1]
    print(orjson.dumps({"name": "pacer", "url": f"http://{host}:{bound}"}).decode(), flush=True)
    print('{"ready": true}', flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.bench.pacer", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--ttft-ms", type=float, default=100.0)
    parser.add_argument("--itl-ms", type=float, default=40.0)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        run_fast(serve(args.ttft_ms, args.itl_ms, args.host, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
