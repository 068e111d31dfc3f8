"""The routes the lean door serves itself: every streaming endpoint whose aiohttp handler is
the door runner and nothing else (``tests/lean_door`` checks the two agree)."""

from __future__ import annotations

from gateway.doors.messages.door import MessagesWire
from gateway.doors.responses import ResponsesWire
from gateway.doors.wire import OPENAI_WIRE, DoorWire
from gateway.inbound import Endpoint

LEAN_ROUTES: dict[str, tuple[Endpoint, DoorWire]] = {
    "/v1/chat/completions": (Endpoint.CHAT, OPENAI_WIRE),
    "/v1/completions": (Endpoint.COMPLETIONS, OPENAI_WIRE),
    "/v1/messages": (Endpoint.MESSAGES, MessagesWire()),
    "/v1/responses": (Endpoint.RESPONSES, ResponsesWire()),
    "/v1/embeddings": (Endpoint.EMBEDDINGS, OPENAI_WIRE),
}
