"""What the gRPC door sends for one opened exchange, per API, as JSON objects.

The relay core hands every door the same :class:`~gateway.opened_stream.OpenedStream`; over HTTP the
door's wire (``gateway/doors/wire.py``) writes it, over gRPC these objects become messages:

- chat / completions: each upstream chunk, the model named as the client named it;
- embeddings: the whole answer body, once (no stream);
- Messages: each Anthropic event's data object, from the HTTP door's own codec (so a chat-only
  backend's answer is translated exactly as over HTTP, a native one passed through).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import orjson

from gateway.doors.messages.door import MessagesWire
from gateway.doors.wire import model_renamer, public_model_names
from gateway.inbound import Endpoint, InboundRequest
from gateway.opened_stream import OpenedStream
from gateway.sse import SseEvent, SseSplitter
from gateway.stream import StreamBroken

if TYPE_CHECKING:
    from gateway.lifecycle.call import CoreCall


class UpstreamErrorEvent(Exception):
    """The backend sent an error object where a chunk should be (``data`` is it)."""

    def __init__(self, data: dict[str, Any]) -> None:
        super().__init__("upstream error event")
        self.data = data


def _object(data: bytes, what: str) -> dict[str, Any]:
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise StreamBroken("upstream_malformed", f"upstream sent a non-JSON {what}") from None
    if not isinstance(value, dict):
        raise StreamBroken("upstream_malformed", f"upstream sent a {what} that is not an object")
    return value


Events = Callable[[], AsyncIterator[SseEvent]]


async def door_chunks(
    inbound: InboundRequest, opened: OpenedStream, call: CoreCall
) -> AsyncIterator[dict[str, Any]]:
    """The objects to send, in order, from the call's events; raises :class:`StreamBroken` or
    :class:`UpstreamErrorEvent` when the exchange fails.

    Chat and completions read the raw view (:meth:`CoreCall.batches`, one list per upstream
    read): one generator resumption per read, not per event (the parsed view,
    :meth:`CoreCall.events`, is a generator of its own over the same lists). Each event's
    object is the one the core parsed to check it (``SseEvent.parsed``): one parse an event."""
    names = public_model_names(inbound, opened)
    rename = model_renamer(names)
    if opened.exchange.body is not None:  # a non-streaming exchange: its whole answer
        yield _object(rename(opened.exchange.body), "answer")  # its usage: read by the attempt
        return
    if inbound.endpoint is Endpoint.MESSAGES:
        async for event in _messages_events(inbound, opened, call.events):
            yield event
        return
    async for batch in call.batches():
        for sse in batch:
            if sse.data is None:
                continue
            if sse.is_done:
                return
            # The object the core parsed when it checked the event (one parse an event); the
            # model renamed in it as ``rename`` does in the bytes of a top-level "model".
            data = sse.parsed
            if data is None:  # not checked by the core (it checks every event it yields)
                data = _object(rename(sse.data), "event")
            elif names is not None and data.get("model") == names[0]:
                data["model"] = names[1]
            if "error" in data:
                raise UpstreamErrorEvent(data)
            yield data


async def _messages_events(
    inbound: InboundRequest, opened: OpenedStream, events: Events
) -> AsyncIterator[dict[str, Any]]:
    codec = MessagesWire().codec(inbound, opened)
    splitter = SseSplitter()
    async for sse in events():
        for event in splitter.feed(codec.encode(sse)):
            if event.data is None:
                continue  # keepalive comments
            data = _object(event.data, "Messages event")
            yield data
            if data.get("type") == "message_stop":
                return
