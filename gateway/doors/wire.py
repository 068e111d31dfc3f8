"""How a door writes what the relay core produced: its error shape, its non-streaming body and
its stream events. The chat/completions door is the identity (bytes relayed as they came);
other doors override what differs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from gateway.errors import ApiError
from gateway.sse import SseEvent

if TYPE_CHECKING:
    from gateway.inbound import InboundRequest
    from gateway.stream import OpenedStream


class StreamCodec:
    """One stream's events for the client: upstream events as they came."""

    def encode(self, event: SseEvent) -> bytes:
        return event.raw

    def error_event(self, error: ApiError) -> bytes:
        """A failure after the stream started, as this door's error event."""
        return error.sse_event()


class DoorWire:
    """The OpenAI door's wire: errors as ``{"error": {...}}``, bodies and events relayed."""

    def error_response(self, error: ApiError, headers: dict[str, str]) -> web.Response:
        return error.to_response(headers)

    def stream_error(self, error: ApiError) -> bytes:
        """Every attempt failed after early headers went out: the error as an event."""
        return error.sse_event()

    def whole_body(self, inbound: InboundRequest, opened: OpenedStream, body: bytes) -> bytes:
        return body

    def codec(self, inbound: InboundRequest, opened: OpenedStream) -> StreamCodec:
        return StreamCodec()


OPENAI_WIRE = DoorWire()
