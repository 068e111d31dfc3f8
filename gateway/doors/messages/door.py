"""``POST /v1/messages``: the door's wire (Anthropic's error shape and events) over the shared
relay core; :mod:`gateway.doors.upstream` picks, per backend, pass-through or translation."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from gateway.doors.grammar import MESSAGES
from gateway.doors.messages.translate import ChatToMessages, event, message_from_chat
from gateway.doors.sse_door import serve
from gateway.doors.wire import DoorWire, StreamCodec, public_model_renamer
from gateway.errors import ApiError
from gateway.inbound import Endpoint, InboundRequest
from gateway.opened_stream import OpenedStream

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


def error_body(error: ApiError) -> dict[str, Any]:
    kind = _ERROR_TYPES.get(error.status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": error.message}}


def _stop_sequences(inbound: InboundRequest) -> list[str]:
    stops = orjson.loads(inbound.body).get("stop_sequences")
    return [s for s in stops if isinstance(s, str)] if isinstance(stops, list) else []


class NativeCodec(StreamCodec):
    """A backend that speaks Messages: events relayed, failures as Messages error events."""

    def error_event(self, error: ApiError) -> bytes:
        return event("error", error_body(error))


class TranslatingCodec(NativeCodec):
    def __init__(self, translator: ChatToMessages) -> None:
        super().__init__()
        self.translator = translator

    def encode(self, sse: Any) -> bytes:
        return self.translator.encode(sse)


class MessagesWire(DoorWire):
    def error_response(self, error: ApiError, headers: dict[str, str]) -> web.Response:
        response = error.to_response(headers)  # status and Retry-After as the core set them
        response.body = orjson.dumps(error_body(error))
        return response

    def stream_error(self, error: ApiError) -> bytes:
        return event("error", error_body(error))

    def whole_body(self, inbound: InboundRequest, opened: OpenedStream, body: bytes) -> bytes:
        if opened.exchange.grammar is MESSAGES:
            return public_model_renamer(inbound, opened)(body)
        return message_from_chat(
            body, inbound.client_model or inbound.model, _stop_sequences(inbound)
        )

    def codec(self, inbound: InboundRequest, opened: OpenedStream) -> StreamCodec:
        if opened.exchange.grammar is MESSAGES:
            return NativeCodec(public_model_renamer(inbound, opened))
        model = inbound.client_model or inbound.model
        return TranslatingCodec(ChatToMessages(model, _stop_sequences(inbound)))


async def create_message(request: web.Request) -> web.StreamResponse:
    return await serve(request, Endpoint.MESSAGES, MessagesWire())


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/messages", create_message)
