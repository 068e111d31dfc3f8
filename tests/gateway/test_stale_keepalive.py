"""A pooled connection the backend already gave up on is retried on a fresh one, invisibly.

Every step waits for an event, never for time: each request starts only once the gateway has
finished the one before (its upstream connection back in the pool), so every request after
the first meets exactly one dead pooled connection — the backend counts them. The ceilings on
connecting and on the first token are far above what a busy machine takes.
"""

from __future__ import annotations

import asyncio

import aiohttp

from gateway.state_keys import RELAY
from tests.gateway.support import MODEL, config_for
from tests.reliability.support import SETTLE_S

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
        self.dropped = 0  # second requests on a connection, met with a close
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
                    self.dropped += 1
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
        ceilings = {"connect_s": 60.0, "first_token_s": 60.0}  # a stalled machine is not a fault
        config = config_for({"oneshot": url}, signals=quiet, timeouts=ceilings)
        running = await gateway(config)
        relay = running.app[RELAY]
        body = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "stream": True}
        # A new client connection per request: the door's keep-alive timer is not under test.
        client = aiohttp.TCPConnector(force_close=True)
        async with aiohttp.ClientSession(connector=client) as session:
            for _ in range(3):
                async with session.post(running.url + "/v1/chat/completions", json=body) as r:
                    assert r.status == 200
                    assert "attempts=1" in r.headers["X-Meridian-Route"]
                    assert (await r.read()).endswith(b"data: [DONE]\n\n")
                # The request's end released its upstream connection into the pool.
                await asyncio.wait_for(relay.state.wait_idle(), SETTLE_S)
        assert backend.served == 3
        assert backend.dropped == 2  # requests 2 and 3 each found their pooled connection dead
        assert backend.connections == 3  # ... and went on, in the same attempt, on a fresh one
    finally:
        assert backend.server is not None
        backend.server.close()
