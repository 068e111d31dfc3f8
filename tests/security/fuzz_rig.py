"""A gateway (and its emulated backend) running on an event loop in a thread of its own, so
hypothesis can drive the doors with plain blocking sockets, many examples against one server."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from gateway.app import RunningGateway, start_gateway
from gateway.grpc.mount import GRPC_SERVER
from loadtests.emulator.config import EmulatedBackendConfig
from loadtests.emulator.server import RunningEmulator, start_emulated_backend
from tests.gateway.support import FAST_ENGINE, MODEL, config_for


@dataclass
class FuzzTarget:
    port: int
    grpc_target: str
    admin_url: str
    loop: asyncio.AbstractEventLoop

    def call(self, coro: Any) -> Any:
        """Run a coroutine on the gateway's loop (for checks that need its objects)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)


def raw_exchange(port: int, data: bytes, timeout_s: float = 10.0) -> bytes:
    """Send ``data``, read until the gateway closes: it does after an answer with
    ``Connection: close``, an error, its short keep-alive or header deadline (the rig's door
    settings) — a socket timeout here is a hang, and fails the example."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        with contextlib.suppress(OSError):  # the gateway may close as soon as it has seen enough
            sock.sendall(data)
        chunks = []
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks)


@contextlib.contextmanager
def threaded_gateway(**overrides: Any) -> Iterator[FuzzTarget]:
    loop = asyncio.new_event_loop()
    ready: Future[tuple[RunningEmulator, RunningGateway]] = Future()
    stop = asyncio.Event()

    async def main() -> None:
        try:
            backend = await start_emulated_backend(
                EmulatedBackendConfig(name="b1", models=(MODEL,), engine=FAST_ENGINE)
            )
            config = config_for(
                {"b1": backend.url},
                listen={"host": "127.0.0.1", "port": 0, "grpc_port": 0},
                door={"header_timeout_s": 0.5, "body_timeout_s": 0.5, "keepalive_timeout_s": 0.3},
                **overrides,
            )
            running = await start_gateway(config, "127.0.0.1", 0)
        except BaseException as exc:
            ready.set_exception(exc)
            raise
        ready.set_result((backend, running))
        await stop.wait()
        await running.close()
        await backend.close()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    _, running = ready.result(60)
    try:
        yield FuzzTarget(running.port, running.app[GRPC_SERVER].target, running.admin_url, loop)
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(30)
        loop.close()
