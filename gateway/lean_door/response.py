"""Response heads and whole responses, as bytes for the lean door's transport."""

from __future__ import annotations

import time
from collections.abc import Iterable
from email.utils import formatdate
from http import HTTPStatus

from aiohttp import web

from gateway.impossible import ImpossibleState

_REASONS = {status.value: status.phrase for status in HTTPStatus}
_date_second = -1
_date_line = b""


def _date() -> bytes:
    """``Date: ...\\r\\n``, formatted once a second (RFC 9110 asks an origin server for it)."""
    global _date_second, _date_line
    now = int(time.time())
    if now != _date_second:
        _date_second = now
        _date_line = b"Date: " + formatdate(now, usegmt=True).encode() + b"\r\n"
    return _date_line


def response_head(
    status: int,
    headers: Iterable[tuple[str, str]],
    *,
    length: int | None,
    close: bool,
) -> bytes:
    """A status line and headers; ``length`` None: a chunked body follows."""
    lines = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, "Unknown").encode())]
    for name, value in headers:
        if name.lower() in ("content-length", "transfer-encoding", "connection", "date"):
            continue  # framing is this function's, from its arguments
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
            raise ImpossibleState(f"a response header with a line break: {name}")
        lines.append(f"{name}: {value}\r\n".encode("utf-8", "surrogateescape"))
    if length is None:
        lines.append(b"Transfer-Encoding: chunked\r\n")
    else:
        lines.append(b"Content-Length: %d\r\n" % length)
    if close:
        lines.append(b"Connection: close\r\n")
    lines.append(_date())
    lines.append(b"\r\n")
    return b"".join(lines)


def closes(response: web.StreamResponse) -> bool:
    """Whether the response says the connection ends after it (``Connection: close``)."""
    return response.headers.get("Connection", "").lower() == "close" or (
        response.keep_alive is False
    )


def whole_response(response: web.Response, *, close: bool) -> bytes:
    """A response the door's runner built (a refusal, a whole body), with its body."""
    body = response.body
    if body is None:
        body = b""
    if not isinstance(body, bytes | bytearray):
        raise ImpossibleState(f"a lean response with a {type(body).__name__} body")
    head = response_head(response.status, response.headers.items(), length=len(body), close=close)
    return head + bytes(body)
