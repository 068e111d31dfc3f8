"""A request head, parsed by llhttp (``httptools``), and whether the lean door takes it.

The lean door takes only the plain case: ``POST`` to a streaming endpoint over HTTP/1.1 with a
``Content-Length`` body under the limit. Everything else — a head llhttp refuses, a chunked or
oversized body, ``Expect``, an upgrade, a head longer than aiohttp's line limit — goes to
aiohttp's server with the bytes as they came (:mod:`gateway.lean_door.connection`), so every
unusual request is answered exactly as it was before the lean door existed.
"""

from __future__ import annotations

from dataclasses import dataclass

import httptools
from multidict import CIMultiDict, CIMultiDictProxy

# aiohttp's limit for one header line (max_line_size / max_field_size): a head this long may
# hold a line aiohttp would refuse, so it goes there to be refused in aiohttp's words.
MAX_LEAN_HEAD = 8190
MAX_LEAN_HEADERS = 128  # aiohttp's max_headers: more is its 400
HEAD_END = b"\r\n\r\n"
_PLAIN_BODY = frozenset({"content-length"})
# aiohttp decodes a Content-Encoding body; an upgrade or Expect needs its handling too.
_NOT_LEAN = frozenset({"transfer-encoding", "expect", "upgrade", "content-encoding"})


@dataclass(frozen=True, slots=True)
class Head:
    method: str
    path: str  # the target's path, without the query
    headers: CIMultiDictProxy[str]
    content_length: int
    keep_alive: bool


class _Collect:
    """httptools' callbacks: the target and the headers of one head."""

    __slots__ = ("done", "fields", "target")

    def __init__(self) -> None:
        self.target = b""
        self.fields: list[tuple[bytes, bytes]] = []
        self.done = False

    def on_url(self, url: bytes) -> None:
        self.target += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.fields.append((name, value))

    def on_headers_complete(self) -> None:
        self.done = True


def parse_head(raw: bytes) -> Head | None:
    """``raw`` is one whole head, its blank line included. None: not the lean door's to serve
    (aiohttp's server reads it instead)."""
    if len(raw) > MAX_LEAN_HEAD:
        return None
    found = _Collect()
    parser = httptools.HttpRequestParser(found)
    try:
        parser.feed_data(raw)
    except httptools.HttpParserError:
        return None
    if not found.done or parser.get_http_version() != "1.1":
        return None
    if len(found.fields) > MAX_LEAN_HEADERS:
        return None
    headers: CIMultiDict[str] = CIMultiDict()
    length = 0
    for name_bytes, value_bytes in found.fields:
        name = name_bytes.decode("utf-8", "surrogateescape")
        value = value_bytes.decode("utf-8", "surrogateescape")
        lowered = name.lower()
        if lowered in _NOT_LEAN:
            return None
        if lowered in _PLAIN_BODY:
            if "content-length" in headers or not value.isdigit():
                return None  # llhttp refuses most of these; aiohttp words the refusal
            length = int(value)
        headers.add(name, value)
    target = found.target.decode("utf-8", "surrogateescape")
    path = target.partition("?")[0]
    if not path.startswith("/"):
        return None  # an absolute or asterisk form: aiohttp's
    return Head(
        parser.get_method().decode("ascii"),
        path,
        CIMultiDictProxy(headers),
        length,
        parser.should_keep_alive(),
    )
