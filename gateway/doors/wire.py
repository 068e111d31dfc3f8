"""How a door writes what the relay core produced: its error shape, its non-streaming body and
its stream events. The chat/completions door is the identity (bytes relayed as they came);
other doors override what differs."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import orjson
from aiohttp import web

from gateway.errors import ApiError
from gateway.sse import SseEvent

if TYPE_CHECKING:
    from gateway.inbound import InboundRequest
    from gateway.opened_stream import OpenedStream


Rename = Callable[[bytes], bytes]


def _same(data: bytes) -> bytes:
    return data


def public_model_names(inbound: InboundRequest, opened: OpenedStream) -> tuple[str, str] | None:
    """(the backend's own id for the model, the name the client used) when they differ."""
    state = opened.state
    if state is None:
        return None
    upstream = state.known_models.upstream_id(opened.route.backend, inbound.model)
    shown = inbound.client_model or inbound.model
    return None if upstream == shown else (upstream, shown)


def public_model_renamer(inbound: InboundRequest, opened: OpenedStream) -> Rename:
    """Responses name the model as the client did, not by the backend's own id (a llama-server
    ``.gguf`` path is nobody's business): the JSON ``"model"`` string is replaced in place."""
    return model_renamer(public_model_names(inbound, opened))


def model_renamer(names: tuple[str, str] | None) -> Rename:
    """What renames ``names[0]`` to ``names[1]`` as the JSON ``"model"`` (None: nothing)."""
    if names is None:
        return _same
    old, new = (orjson.dumps(name) for name in names)
    pairs = [(b'"model":' + old, b'"model":' + new), (b'"model": ' + old, b'"model": ' + new)]

    def rename(data: bytes) -> bytes:
        for before, after in pairs:
            data = data.replace(before, after)
        return data

    return rename


class StreamCodec:
    """One stream's events for the client: upstream events as they came (the model named as
    the client named it)."""

    def __init__(self, rename: Rename = _same) -> None:
        self.rename = rename

    def encode(self, event: SseEvent) -> bytes:
        return self.rename(event.raw)

    @property
    def passes_raw(self) -> bool:
        """Whether :meth:`encode` is ``event.raw`` as it came (no rename, no other format):
        the push phase then writes the bytes without a call per event."""
        return type(self).encode is StreamCodec.encode and self.rename is _same

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
        return public_model_renamer(inbound, opened)(body)

    def codec(self, inbound: InboundRequest, opened: OpenedStream) -> StreamCodec:
        return StreamCodec(public_model_renamer(inbound, opened))


OPENAI_WIRE = DoorWire()
