"""Each door's request body, seen as a chat or text completion: what routing profiles (prompt
length, prefix blocks, ``max_tokens``) and, for Anthropic Messages, what a backend without its
own Messages API is sent. Called by :func:`gateway.inbound.parse_inbound`; raises
:class:`~gateway.errors.ApiError` for a body the door's own API would refuse."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.doors.messages.request import messages_to_chat
from gateway.errors import bad_request

Payload = dict[str, Any]
# (the body as chat/completions, whether that form is what chat-only backends are sent)
DoorBody = Callable[[Payload], tuple[Payload, bool]]


def embeddings_body(payload: Payload) -> tuple[Payload, bool]:
    """No first token to wait for: routed as a one-token completion of the input, so the
    prediction is the queue and the prefill."""
    value = payload.get("input")
    if isinstance(value, list) and value and all(isinstance(v, list) for v in value):
        value = [t for tokens in value for t in tokens]  # a batch of token arrays
    if value is None or value == [] or value == "":
        raise bad_request("'input' is required and must not be empty", param="input")
    return {"model": payload.get("model"), "prompt": value, "max_tokens": 1}, False


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def responses_body(payload: Payload) -> tuple[Payload, bool]:
    """The Responses API's ``instructions`` and ``input`` items as chat messages (for the
    profile only: backends that declare ``responses`` get the body as sent)."""
    value = payload.get("input")
    messages: list[Payload] = []
    if isinstance(payload.get("instructions"), str):
        messages.append({"role": "system", "content": payload["instructions"]})
    if isinstance(value, str) and value:
        messages.append({"role": "user", "content": value})
    elif isinstance(value, list) and value:
        for index, item in enumerate(value):
            if not isinstance(item, dict):
                raise bad_request(f"'input[{index}]' must be an object", param=f"input[{index}]")
            if "role" in item:
                messages.append(
                    {"role": str(item["role"]), "content": _text_of(item.get("content"))}
                )
            else:  # function_call, function_call_output, reasoning, ...: their text counts
                text = item.get("output") or item.get("arguments") or _text_of(item.get("content"))
                messages.append({"role": "tool", "content": str(text or "")})
    else:
        raise bad_request("'input' must be a non-empty string or array of items", param="input")
    shaped: Payload = {"model": payload.get("model"), "messages": messages}
    if payload.get("max_output_tokens") is not None:
        shaped["max_tokens"] = payload["max_output_tokens"]
    return shaped, False


_DOORS: dict[str, DoorBody] = {
    "embeddings": embeddings_body,
    "responses": responses_body,
    "messages": messages_to_chat,
}


def door_body(endpoint: str) -> DoorBody | None:
    """The door's body rules; None for chat and completions, which are checked as they are."""
    return _DOORS.get(endpoint)
