"""One upstream response of the lean client (``gateway/http_client.py``): llhttp's callbacks
fill its status, headers and ``content`` (a :class:`gateway.upstream_body.BodyReader`); a head
longer than :data:`MAX_HEAD_BYTES` is refused as malformed; released before its end of message, it
keeps its connection out of the pool until the rest arrives (at most ``_DRAIN_S``).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import aiohttp
import httptools
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from gateway.upstream_body import BodyReader

if TYPE_CHECKING:
    from gateway.http_client import UpstreamConnection

# A response head (status line and headers) longer than this is refused as malformed: llhttp
# sets no bound of its own and httptools joins a header's parts in memory until it ends, so
# a broken or hostile backend could otherwise grow the gateway's memory without end. aiohttp's
# client allowed 8 KiB a line; vLLM/SGLang heads are well under 1 KiB.
MAX_HEAD_BYTES = 64 * 1024
# A response released before its end of message (an SSE stream's [DONE] read before the chunked
# terminator that follows it) keeps its connection out of the pool this long for the rest.
_DRAIN_S = 2.0


class UpstreamResponse:
    """One response: status and headers once :meth:`head` returns, then the body in
    ``content``. Release it (back to the pool once the body ended) or close it."""

    def __init__(self, conn: UpstreamConnection, limit: int) -> None:
        self._conn: UpstreamConnection | None = conn
        self._parser = httptools.HttpResponseParser(self)
        self._raw_headers: list[tuple[str, str]] = []
        self._head: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._until_close = False  # no length, not chunked: the body ends with the connection
        self._head_bytes = 0  # bytes fed while the head was still incomplete
        self._in_head = True  # until a final (non-1xx) head is complete: _head, as a flag
        # The body pieces of one read (a chunked body is one piece per chunk, often one per SSE
        # event): fed to ``content`` together once llhttp took the read, so a read that
        # brought several events is relayed in one client write, pushed or pulled.
        self._body: list[bytes] = []
        self.status = 0
        self.headers: CIMultiDictProxy[str] = CIMultiDictProxy(CIMultiDict())
        self.content = BodyReader(conn, limit)
        self.complete = False
        self.keep_alive = False
        self.got_bytes = False  # anything came back: a failure now is not a stale connection
        self._draining: UpstreamConnection | None = None  # released, waiting for its end
        self._drain_timer: asyncio.TimerHandle | None = None

    # llhttp callbacks (httptools looks them up by name when the parser is made)
    def on_header(self, name: bytes, value: bytes) -> None:
        self._raw_headers.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if status < 200:  # an interim 1xx: its headers are not the response's
            self._raw_headers = []
            return
        self.status = status
        self._in_head = False
        headers = CIMultiDict(self._raw_headers)
        self.headers = CIMultiDictProxy(headers)
        chunked = "chunked" in headers.get("Transfer-Encoding", "").lower()
        self._until_close = not chunked and "Content-Length" not in headers
        if not self._head.done():
            self._head.set_result(None)

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def _feed_body(self) -> None:
        parts = self._body
        if parts:
            data = parts[0] if len(parts) == 1 else b"".join(parts)
            parts.clear()
            self.content.feed(data)

    def on_message_complete(self) -> None:
        # Asked here: once the callback returns, llhttp has reset for the next message. And
        # before the body is fed: a sink fed here may end the response (``unhook``).
        keep_alive = self._parser.should_keep_alive()
        self._feed_body()  # the body before its end
        if self.status >= 200:
            self.complete = True
            self.keep_alive = keep_alive
            self.content.feed_eof()
            if self._draining is not None:
                self._end_drain(reusable=self.keep_alive)

    def feed(self, data: bytes) -> None:
        self.got_bytes = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._feed_body()  # what parsed before the bad bytes, as before
            self._malformed(type(exc).__name__)
            return
        if self._body:  # _feed_body inline: runs for every relayed read
            parts = self._body
            body = parts[0] if len(parts) == 1 else b"".join(parts)
            parts.clear()
            content = self.content
            sink = content.sink
            if sink is None:
                content.feed(body)
            else:  # BodyReader.feed's pushed case, inline: relayed now (gateway/push_phase.py)
                content.total_bytes += len(body)
                if not sink(body):
                    content.wake()
        if self._in_head:  # checked after feeding: one read may hold head and body
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._malformed(f"response head over {MAX_HEAD_BYTES} bytes")

    def _malformed(self, why: str) -> None:
        error = aiohttp.ClientResponseError(
            aiohttp.RequestInfo(URL(), "POST", CIMultiDictProxy(CIMultiDict())),
            (),
            message=f"malformed upstream response: {why}",
        )
        self._fail(error)
        self.close()

    def lost(self, exc: BaseException | None) -> None:
        """The connection is gone: the end of a body read to the close, else an error."""
        if self._drain_timer is not None:
            self._drain_timer.cancel()
        self._draining = None
        if self.complete:
            return
        if self._head.done() and self._until_close and exc is None:
            self.complete = True
            self.content.feed_eof()
            return
        if not self._head.done():
            failure: BaseException = aiohttp.ServerDisconnectedError()
        else:
            failure = aiohttp.ClientPayloadError("upstream response payload is not completed")
        if exc is not None:
            failure.__cause__ = exc
        self._fail(failure)

    def _fail(self, exc: BaseException) -> None:
        if not self._head.done():
            self._head.set_exception(exc)
        self.content.set_exception(exc)

    async def head(self) -> None:
        await self._head

    @property
    def connection(self) -> UpstreamConnection | None:
        """The connection until the response is released or closed."""
        return self._conn

    @property
    def content_type(self) -> str:
        value = self.headers.get("Content-Type", "application/octet-stream")
        return value.partition(";")[0].strip().lower()

    async def read(self) -> bytes:
        return await self.content.read()

    def unhook(self) -> None:
        """No byte comes for this response any more (its connection took it off): the parser,
        whose callbacks are this response's methods, is let go, so the two are freed by
        reference counting, not left as a cycle for the collector."""
        del self._parser

    def release(self) -> None:
        """Hand the connection back for the next request once the message ended: at once, or
        when the rest of it (a chunked terminator) comes within ``_DRAIN_S``; else closed."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self.complete:
            conn.done(self, reusable=self.keep_alive)
        elif self._head.done() and not self._until_close and self.content._exc is None:
            self._draining = conn
            loop = asyncio.get_running_loop()
            self._drain_timer = loop.call_later(_DRAIN_S, self._end_drain, False)
        else:
            conn.done(self, reusable=False)

    def _end_drain(self, reusable: bool) -> None:
        conn, self._draining = self._draining, None
        if self._drain_timer is not None:
            self._drain_timer.cancel()
            self._drain_timer = None
        if conn is not None:
            conn.done(self, reusable=reusable)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.done(self, reusable=False)
