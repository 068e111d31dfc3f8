"""``POST /v1/responses`` (the OpenAI Responses API) to backends that declare ``responses`` in
``apis``: the body and the event stream are relayed as they came, read through
:data:`~gateway.doors.grammar.RESPONSES` so the first ``response.output_text.delta`` (or the
terminal event) is the first token that releases the headers, and ``response.completed`` ends
the stream after the timing comment. A failure after the first event is an ``error`` event."""

from __future__ import annotations

import orjson
from aiohttp import web

from gateway.doors.sse_door import serve
from gateway.doors.wire import DoorWire, StreamCodec, public_model_renamer
from gateway.errors import ApiError
from gateway.inbound import Endpoint, InboundRequest
from gateway.opened_stream import OpenedStream


def error_event(error: ApiError) -> bytes:
    payload = {"type": "error", "code": error.code, "message": error.message, "param": None}
    return b"event: error\ndata: " + orjson.dumps(payload) + b"\n\n"


class ResponsesCodec(StreamCodec):
    def error_event(self, error: ApiError) -> bytes:
        return error_event(error)


class ResponsesWire(DoorWire):
    def stream_error(self, error: ApiError) -> bytes:
        return error_event(error)

    def codec(self, inbound: InboundRequest, opened: OpenedStream) -> StreamCodec:
        return ResponsesCodec(public_model_renamer(inbound, opened))


async def create_response(request: web.Request) -> web.StreamResponse:
    return await serve(request, Endpoint.RESPONSES, ResponsesWire())


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/responses", create_response)
