"""The host's state coordinator: one ``MemoryStore`` served over a Unix socket to the workers
of ``meridian serve --workers N``.

The workers' ``SharedStateSync`` talks to it exactly as it talks to Redis (batched writes every
``state.intervals.flush_s``, a periodic pull, pushed events, leases), from background tasks
only: the request path keeps reading its local snapshot. So the workers of one host share
in-flight counts, the prefix index, signals, ejections and leases — probes and scrapes run once
per host, by whichever worker holds each backend's lease — with no Redis to install. It runs in
the supervisor process, which does nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from gateway.state.host_wire import (
    MAX_LINE_BYTES,
    encode_pull,
    encode_summary,
    encode_tokens,
    line,
    read_message,
)
from gateway.state.memory import MemoryStore
from gateway.state.records import WriteBatch, batch_of, decode_batch, encode_batch
from gateway.state.store import Retention

log = logging.getLogger("meridian.state.host")

_TICK_S = 1.0  # an idle events connection still hears from us this often


class HostStateServer:
    def __init__(self, path: str, retention: Retention | None = None) -> None:
        self.path = path
        self.store = MemoryStore(retention)
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[asyncio.Task[None]] = set()
        # The last batch sent and its events line: every subscriber gets the same bytes, so a
        # batch is encoded once, not once per worker.
        self._last: tuple[WriteBatch | None, bytes] = (None, b"")

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(self._serve, self.path, limit=MAX_LINE_BYTES)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        await self.store.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()  # always set inside a coroutine the loop runs
        if task is not None:
            self._connections.add(task)
        try:
            while raw := await reader.readline():
                message = read_message(raw)
                if message.get("op") == "events":
                    await self._stream_events(writer)
                    return
                writer.write(line(await self._answer(message)))
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ValueError) as exc:
            log.debug("host state connection ended: %r", exc)
        except asyncio.CancelledError:
            # Only close() cancels a connection's task: it ends here, quietly (asyncio's stream
            # callback would log a cancelled connection task as an error).
            pass
        except Exception:  # a bad message ends its connection, never the coordinator
            log.exception("host state connection failed")
        finally:
            if task is not None:
                self._connections.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _answer(self, message: dict[str, Any]) -> dict[str, Any]:
        store, op = self.store, message.get("op")
        try:
            result: Any = None
            if op == "ping":
                await store.ping()
            elif op == "push":
                batch = message["batch"]  # an object; a string from an older worker
                await store.push(decode_batch(batch) if isinstance(batch, str) else batch_of(batch))
            elif op == "pull":
                result = encode_pull(await store.pull(float(message["since"]), message["now"]))
            elif op == "forget":
                await store.forget_replica(str(message["replica"]))
            elif op == "lease":
                result = await store.try_lease(message["name"], message["holder"], message["ttl"])
            elif op == "release":
                result = await store.release_lease(message["name"], message["holder"])
            elif op == "tokens":
                taken = await store.take_tokens(
                    message["bucket"], message["rate"], message["burst"], message["cost"]
                )
                result = encode_tokens(taken)
            elif op == "summary":
                result = encode_summary(await store.summary())
            else:
                return {"e": f"unknown host-state op {op!r}"}
        except (KeyError, TypeError, ValueError) as exc:
            return {"e": f"malformed host-state {op} call: {exc!r}"}
        return {"r": result}

    def _event_line(self, batch: WriteBatch) -> bytes:
        last, encoded = self._last
        if last is not batch:
            encoded = b'{"b":' + encode_batch(batch) + b"}\n"
            self._last = (batch, encoded)
        return encoded

    async def _stream_events(self, writer: asyncio.StreamWriter) -> None:
        events = self.store.events()
        ticks = _with_ticks(events)
        try:
            async for batch in ticks:
                if batch is None:
                    writer.write(b'{"tick":true}\n')
                else:
                    writer.write(self._event_line(batch))
                await writer.drain()
        finally:
            await ticks.aclose()  # first: it cancels the read it has pending on ``events``
            if isinstance(events, AsyncGenerator):
                await events.aclose()


async def _with_ticks(events: AsyncIterator[Any]) -> AsyncGenerator[Any, None]:
    """The store's events, with a ``None`` whenever none came for ``_TICK_S``."""
    iterator = events.__aiter__()
    pending: asyncio.Task[Any] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(iterator.__anext__())
            done, _ = await asyncio.wait({pending}, timeout=_TICK_S)
            if not done:
                yield None
                continue
            batch, pending = pending.result(), None
            yield batch
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await pending
