"""An upstream response body as it arrives (the lean client's, ``gateway/http_client.py``):
what the relay reads (``readany``/``read``) and what aborts it from outside (``set_exception``).

Back-pressure as aiohttp's ``StreamReader``: past twice the reader's limit of unread bytes the
connection stops being read, and it is read again once the relay has taken what waited.

Pushed (:meth:`BodyReader.push`, ``gateway/push_phase.py``): while nothing waits unread, each
arriving read goes straight to a sink, inside the connection's callback, until the sink
declines one, the body ends or an error is set; then the reader buffers again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol


class Pausable(Protocol):
    """The connection under a body: told to stop and start reading its socket."""

    def pause(self) -> None: ...

    def resume(self) -> None: ...


class BodyReader:
    """A response body as it arrives: what the relay reads and what aborts it from outside."""

    __slots__ = (
        "_chunks",
        "_conn",
        "_eof",
        "_exc",
        "_high",
        "_paused",
        "_size",
        "_waiter",
        "limit",
        "sink",
        "total_bytes",
    )

    def __init__(self, conn: Pausable, limit: int) -> None:
        self._chunks: list[bytes] = []
        self._size = 0
        self.total_bytes = 0  # every body byte fed so far
        self._eof = False
        self._exc: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._conn = conn
        self._high = 2 * limit
        self.limit = limit  # what the relay takes per read (readany's most)
        self._paused = False  # this reader paused the connection: the next read resumes it
        # While pushing: takes each read as it arrives (nothing waits unread then); False stops.
        # UpstreamResponse.feed has this reader's pushed case inline (one call less a read).
        self.sink: Callable[[bytes], bool] | None = None

    def feed(self, data: bytes) -> None:
        self.total_bytes += len(data)
        sink = self.sink
        if sink is not None:  # pushed: relayed now, inside the connection's callback
            if not sink(data):
                self.wake()
            return
        self._chunks.append(data)
        self._size += len(data)
        self.wake()
        if self._size > self._high:
            self._paused = True
            self._conn.pause()

    def feed_eof(self) -> None:
        self._eof = True
        self.wake()

    def set_exception(self, exc: BaseException) -> None:
        """Every read from now on raises ``exc`` (a waiting one wakes with it)."""
        self._exc = exc
        self.wake()

    def wake(self) -> None:
        """Wake the reading task, ending a push (the task takes over)."""
        self.sink = None  # whatever wakes the reader ends a push: the task takes over
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def _wait(self) -> None:
        """Until bytes, the end or an error arrived (``readany`` has this loop inline)."""
        while not self._chunks and not self._eof and self._exc is None:
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None

    @property
    def pushing(self) -> bool:
        """Whether a sink takes the reads as they arrive now."""
        return self.sink is not None

    async def push(self, sink: Callable[[bytes], bool]) -> None:
        """Hand every read that arrives to ``sink`` as it arrives, until it returns False, the
        body ends or an error is set (then the next :meth:`readany` sees it); at once if
        bytes, the end or an error already wait."""
        if self._chunks or self._eof or self._exc is not None:
            return
        self.sink = sink
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        try:
            await waiter
        finally:
            self._waiter = None
            self.sink = None

    async def readany(self, most: int | None = None) -> bytes:
        """What has arrived (waiting for something), at most ``most`` bytes of it (the rest
        stays, counted, for the next read); b"" at the end of the body."""
        chunks = self._chunks
        while not chunks and not self._eof and self._exc is None:  # _wait inline: every event
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None
        if self._exc is not None:
            raise self._exc
        if not chunks:
            return b""
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        if most is not None and len(data) > most:
            chunks.append(data[most:])
            data = data[:most]
        self._size = len(chunks[0]) if chunks else 0
        if self._paused and self._size <= self._high:
            self._paused = False
            self._conn.resume()
        return data

    async def read(self, limit: int = -1) -> bytes:
        """The body up to its end, or its first ``limit`` bytes when it is longer."""
        parts: list[bytes] = []
        size = 0
        while limit < 0 or size < limit:
            data = await self.readany()
            if not data:
                break
            parts.append(data)
            size += len(data)
        body = b"".join(parts)
        return body if limit < 0 else body[:limit]
