"""``HostStore``: the ``StateStore`` a worker of ``meridian serve --workers N`` uses, a client
of the host's coordinator (``host_server``) over a Unix socket.

One connection for calls (serialised: they come from the sync's background tasks, a few per
second) and one per ``events()`` subscription. Every failure is ``StateUnavailable``, so a
coordinator that went away makes the worker degraded — serving on its local state — exactly
like a Redis outage, and the next call reconnects. Time the worker's own event loop was too
busy to read an answer that came does not count against the coordinator
(gateway/lag_timeout.py): under a burst a worker's loop runs turns longer than a call's timeout,
and every call straddling one would fail, open the breaker and leave the workers routing apart
(tests/state/test_store_lag.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import orjson

from gateway.lag_timeout import LagForgivingTimeout
from gateway.state.errors import StateUnavailable, unavailable
from gateway.state.host_wire import (
    MAX_LINE_BYTES,
    decode_event,
    decode_pull,
    decode_summary,
    decode_tokens,
    line,
    read_message,
)
from gateway.state.records import SharedPull, TokenResult, WriteBatch, encode_batch
from gateway.state.store import StoreSummary

_EVENTS_SILENCE_S = 5.0  # the coordinator ticks every second; this much silence is a failure


class HostStore:
    def __init__(self, path: str, op_timeout_s: float) -> None:
        self.path = path
        self._timeout_s = op_timeout_s
        self._lock = asyncio.Lock()
        self._conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        # How the coordinator's events line of a batch this store pushed begins: the
        # coordinator sends every batch to every subscriber, and a worker's own come back
        # to it. Those lines are dropped unread (``SharedView.apply_batch`` ignores them).
        self._own_lines: tuple[bytes, ...] = ()

    @property
    def kind(self) -> str:
        return "host"

    @property
    def events_lossless(self) -> bool:
        return True  # one connection; the coordinator closes it rather than drop a batch

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_unix_connection(self.path, limit=MAX_LINE_BYTES)

    async def _call(self, op: str, raw: bytes | None = None, **args: Any) -> Any:
        """One call: ``{"op": op, **args}``, or ``raw``, that call's line already encoded."""
        async with self._lock:
            try:
                async with LagForgivingTimeout(self._timeout_s):
                    if self._conn is None:
                        self._conn = await self._connect()
                    reader, writer = self._conn
                    writer.write(raw or line({"op": op, **args}))
                    await writer.drain()
                    answer_line = await reader.readline()
                if not answer_line:
                    raise ConnectionResetError("coordinator closed the connection")
            except (OSError, TimeoutError, ValueError) as exc:
                self._drop()
                raise unavailable(f"host state {op}: {type(exc).__name__}: {exc}") from None
            except BaseException:
                self._drop()  # cancelled mid-call: the answer would belong to the next call
                raise
        answer = read_message(answer_line)
        if "e" in answer:
            raise unavailable(f"host state {op}: {answer['e']}")
        return answer.get("r")

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn[1].close()
            self._conn = None

    async def ping(self) -> None:
        await self._call("ping")

    async def push(self, batch: WriteBatch) -> None:
        own = b'{"b":{"r":' + orjson.dumps(batch.replica) + b","  # encode_batch's first key
        if own not in self._own_lines:
            self._own_lines = (*self._own_lines, own)
        # the batch as an object inside the call, not as JSON text escaped into a string
        await self._call("push", raw=b'{"op":"push","batch":' + encode_batch(batch) + b"}\n")

    async def pull(self, since: float, now: float) -> SharedPull:
        return decode_pull(await self._call("pull", since=since, now=now))

    async def events(self) -> AsyncIterator[WriteBatch | None]:
        writer: asyncio.StreamWriter | None = None
        try:
            async with LagForgivingTimeout(self._timeout_s):
                reader, writer = await self._connect()
                writer.write(line({"op": "events"}))
                await writer.drain()
                # The coordinator's first line (a tick) says it has subscribed us: only from
                # then on is every batch ours to read (``events_lossless``).
                subscribed = await reader.readline()
            if not subscribed:
                raise ConnectionResetError("coordinator closed the connection")
        except (OSError, TimeoutError, ValueError) as exc:
            if writer is not None:
                writer.close()
            raise unavailable(f"host state events: {type(exc).__name__}: {exc}") from None
        try:
            yield None  # subscribed
            while True:
                try:
                    async with LagForgivingTimeout(_EVENTS_SILENCE_S):
                        raw = await reader.readline()
                except (OSError, TimeoutError, ValueError) as exc:
                    raise unavailable(f"host state events: {type(exc).__name__}: {exc}") from None
                if not raw:
                    raise unavailable("host state events: coordinator closed the connection")
                if self._own_lines and raw.startswith(self._own_lines):
                    continue
                yield decode_event(read_message(raw))
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def forget_replica(self, replica: str) -> None:
        await self._call("forget", replica=replica)

    async def try_lease(self, name: str, holder: str, ttl_s: float) -> bool:
        return bool(await self._call("lease", name=name, holder=holder, ttl=ttl_s))

    async def release_lease(self, name: str, holder: str) -> bool:
        return bool(await self._call("release", name=name, holder=holder))

    async def take_tokens(
        self, bucket: str, rate_per_s: float, burst: float, cost: float = 1.0
    ) -> TokenResult:
        result = await self._call("tokens", bucket=bucket, rate=rate_per_s, burst=burst, cost=cost)
        return decode_tokens(result)

    async def summary(self) -> StoreSummary:
        return decode_summary(await self._call("summary"), self.kind)

    async def close(self) -> None:
        self._drop()


__all__ = ["HostStore", "StateUnavailable"]
