"""The gateway's aiohttp server with a per-connection handler of its own.

aiohttp answers a request it cannot parse (a control byte in a header, a bad Content-Length)
with a text body that quotes the offending line — often ``Authorization: Bearer <key>`` — and
logs it with a traceback, once per request. :class:`DoorRequestHandler` answers in the OpenAI
shape with fixed words instead, and logs one line naming only the status and the peer.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

log = logging.getLogger("meridian.door")

_WORDS = {
    400: ("malformed HTTP request", "invalid_request_error", "malformed_request"),
    408: ("request not received in time", "invalid_request_error", "request_timeout"),
    413: ("request is too large", "invalid_request_error", "request_too_large"),
    431: ("request headers are too large", "invalid_request_error", "headers_too_large"),
    500: ("internal gateway error", "server_error", "internal_error"),
    504: ("internal gateway timeout", "server_error", "internal_timeout"),
}


def error_body(status: int) -> bytes:
    message, kind, code = _WORDS.get(
        status, ("request failed", "invalid_request_error", "http_error")
    )
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return orjson.dumps(body)


class DoorRequestHandler(RequestHandler):
    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        # Never the exception text or traceback: a parse error quotes the raw header line.
        kind = type(exc).__name__ if exc is not None else "none"
        if status >= 500:
            log.error("request failed before a handler answered status=%d error=%s", status, kind)
        else:
            log.info("refused a malformed request status=%d error=%s", status, kind)
        if request.writer.output_size > 0:
            raise ConnectionError("response already started; cannot send the error")
        response = web.Response(
            status=status, body=error_body(status), content_type="application/json"
        )
        response.force_close()
        return response


class DoorServer(web.Server):
    """An aiohttp ``Server`` whose connections are :class:`DoorRequestHandler`."""

    def __call__(self) -> RequestHandler:
        return DoorRequestHandler(self, loop=self._loop, **self._kwargs)


class DoorRunner(web.AppRunner):
    """``web.AppRunner`` serving through :class:`DoorServer` (same arguments)."""

    async def _make_server(self) -> web.Server:
        base = await super()._make_server()
        # Same construction as aiohttp's Application._make_handler, with our handler class.
        kwargs: dict[str, Any] = dict(base._kwargs)
        return DoorServer(
            base.request_handler,
            request_factory=base.request_factory,
            handler_cancellation=base.handler_cancellation,
            loop=base._loop,
            **kwargs,
        )
