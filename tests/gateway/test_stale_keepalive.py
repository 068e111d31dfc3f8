"""A pooled connection the backend already gave up on is retried on a fresh one, invisibly."""

from __future__ import annotations

import asyncio

import aiohttp

from tests.gateway.support import MODEL, config_for

_BODY = (
    b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n'
    b"data: [DONE]\n\n"
)


class OneShotKeepAliveBackend:
    """Advertises keep-alive but serves one response per connection; a second request on the
    same connection is met with a close, as some backends and proxies do."""

    def __init__(self) -> None:
        self.connections = 0
        self.served = 0  # completions only: a probe or scrape must not be mistaken for one
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        first = True
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                await reader.readexactly(length)
                if not first:
                    return  # drop it: the client finds its pooled connection dead
                first = False
                completion = head.startswith(b"POST ") and b"/chat/completions" in head
                chunk = hex(len(_BODY))[2:].encode() + b"\r\n" + _BODY + b"\r\n0\r\n\r\n"
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    b"Connection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk
                )
                await writer.drain()
                self.served += completion
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()

    async def start(self) -> str:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"


async def test_dead_pooled_connection_is_retried_on_a_fresh_one(gateway) -> None:
    backend = OneShotKeepAliveBackend()
    url = await backend.start()
    try:
        # The request path is under test: no probes or scrapes sharing the backend's connections.
        quiet = {"probes": {"enabled": False}, "engine_metrics": {"enabled": False}}
        running = await gateway(config_for({"oneshot": url}, signals=quiet))
        body = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "stream": True}
        async with aiohttp.ClientSession() as session:
            for _ in range(3):
                async with session.post(running.url + "/v1/chat/completions", json=body) as r:
                    assert r.status == 200
                    assert "attempts=1" in r.headers["X-Meridian-Route"]
                    assert (await r.read()).endswith(b"data: [DONE]\n\n")
        assert backend.served == 3
        assert backend.connections >= 3
    finally:
        assert backend.server is not None
        backend.server.close()
