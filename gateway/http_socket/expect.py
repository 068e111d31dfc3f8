"""``Expect: 100-continue`` with a body over the limit: 413 at once, never ``100 Continue``.

aiohttp's default expect handler invites every body; the client then uploads megabytes only to
be refused. The handler is attached to every route once all are registered
(:func:`guard_expect`), so routes added later by other modules are covered too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import hdrs, web
from aiohttp.web_urldispatcher import ResourceRoute

from gateway.errors import ApiError
from gateway.http_socket.protocol import DoorRequestHandler

ExpectHandler = Callable[[web.Request], Awaitable[web.StreamResponse | None]]


def expect_handler(limit: int) -> ExpectHandler:
    async def bounded_expect(request: web.Request) -> web.StreamResponse | None:
        expect = request.headers.get(hdrs.EXPECT, "")
        if expect.lower() != "100-continue":
            raise web.HTTPExpectationFailed(text="only 'Expect: 100-continue' is supported")
        length = request.content_length
        if length is not None and length > limit:
            error = ApiError(
                413,
                f"request body is larger than the {limit}-byte limit",
                "invalid_request_error",
                "request_too_large",
            )
            response = error.to_response()
            response.force_close()  # the body was never invited: the connection cannot continue
            protocol = request.protocol
            if isinstance(protocol, DoorRequestHandler):
                protocol.skip_lingering()  # and nothing is waited for: close once answered
            return response
        if request.version >= (1, 1):
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            request.writer.output_size = 0  # as aiohttp's default: the body is not started
        return None

    return bounded_expect


def guard_expect(app: web.Application, limit: int) -> None:
    """Replace the expect handler of every route registered so far."""
    handler = expect_handler(limit)
    for route in app.router.routes():
        if isinstance(route, ResourceRoute):
            # aiohttp takes the handler only at add_route time; routes are added by many modules.
            route._expect_handler = handler  # type: ignore[assignment]
