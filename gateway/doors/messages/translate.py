"""Chat-completions answers as Anthropic Messages: the whole body, and a stream's chunks as
the Messages event grammar (``message_start``, ``content_block_start``/``_delta``/``_stop``
per text or tool-use block, ``message_delta`` with the stop reason and usage, then
``message_stop``)."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.sse import SseEvent

Obj = dict[str, Any]

STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}


def event(name: str, payload: Obj) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def _stop(choice: Obj, stop_sequences: list[str]) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence); vLLM names the stop string that matched in
    ``stop_reason``."""
    matched = choice.get("stop_reason")
    if isinstance(matched, str) and matched in stop_sequences:
        return "stop_sequence", matched
    return STOP_REASONS.get(str(choice.get("finish_reason")), "end_turn"), None


def _count(value: object) -> int:
    """A token count as the upstream gave it; anything but a whole number counts as 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _usage(usage: object) -> Obj:
    usage = usage if isinstance(usage, dict) else {}
    out = {
        "input_tokens": _count(usage.get("prompt_tokens")),
        "output_tokens": _count(usage.get("completion_tokens")),
    }
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
        out["cache_read_input_tokens"] = details["cached_tokens"]
    return out


def message_from_chat(body: bytes, model: str, stop_sequences: list[str]) -> bytes:
    """A chat completion (non-streaming) as a Messages response."""
    chat = orjson.loads(body)
    choice = (chat.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    content: list[Obj] = []
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        content.append(
            {
                "type": "tool_use",
                "id": call.get("id") or "",
                "name": function.get("name") or "",
                "input": _arguments(function.get("arguments")),
            }
        )
    reason, sequence = _stop(choice, stop_sequences)
    out = {
        "id": _message_id(chat.get("id")),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": _usage(chat.get("usage")),
    }
    return orjson.dumps(out)


def _arguments(text: object) -> object:
    try:
        value = orjson.loads(text) if isinstance(text, str) and text else {}
    except orjson.JSONDecodeError:
        return {"arguments": text}  # a model that wrote broken JSON: keep what it said
    return value if isinstance(value, dict) else {"value": value}


def _message_id(chat_id: object) -> str:
    return f"msg_{chat_id}" if isinstance(chat_id, str) and chat_id else "msg_meridian"


class ChatToMessages:
    """Translate one stream, chunk by chunk; holds the open block and the pending stop."""

    def __init__(self, model: str, stop_sequences: list[str]) -> None:
        self.model = model
        self.stop_sequences = stop_sequences
        self.started = False
        self.index = -1
        self.open_kind: str | None = None
        self.tool_blocks: dict[int, int] = {}  # chat tool_call index -> block index
        self.stop: tuple[str, str | None] = ("end_turn", None)
        self.usage: Obj = {}

    def encode(self, sse: SseEvent) -> bytes:
        if sse.data is None:
            return sse.raw  # comments (keepalives) pass
        if sse.is_done:
            return self._start({}) + self._close() + self._finish()
        obj = orjson.loads(sse.data)
        out = self._start(obj)
        if isinstance(obj.get("usage"), dict):
            self.usage = obj["usage"]
        for choice in obj.get("choices") or ():
            out += self._choice(choice)
        return out

    def _start(self, obj: Obj) -> bytes:
        if self.started:
            return b""
        self.started = True
        message: Obj = {
            "id": _message_id(obj.get("id")),
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return event("message_start", {"type": "message_start", "message": message})

    def _choice(self, choice: Obj) -> bytes:
        out = b""
        delta = choice.get("delta") or {}
        if delta.get("content"):
            out += self._open("text", {"type": "text", "text": ""})
            text = {"type": "text_delta", "text": delta["content"]}
            out += self._delta(text)
        for call in delta.get("tool_calls") or ():
            out += self._tool(call)
        if choice.get("finish_reason") is not None:
            self.stop = _stop(choice, self.stop_sequences)
        return out

    def _tool(self, call: Obj) -> bytes:
        out = b""
        index = call.get("index")  # the grammar checked the shape, not every value
        position = index if isinstance(index, int) else 0
        function = call.get("function") or {}
        if position not in self.tool_blocks:
            block = {"type": "tool_use", "id": call.get("id") or f"toolu_{position}"}
            block.update(name=function.get("name") or "", input={})
            out += self._open(f"tool:{position}", block, force=True)
            self.tool_blocks[position] = self.index
        if function.get("arguments"):
            partial = {"type": "input_json_delta", "partial_json": function["arguments"]}
            out += self._delta(partial)
        return out

    def _open(self, kind: str, block: Obj, force: bool = False) -> bytes:
        if self.open_kind == kind and not force:
            return b""
        out = self._close()
        self.index += 1
        self.open_kind = kind
        payload = {"type": "content_block_start", "index": self.index, "content_block": block}
        return out + event("content_block_start", payload)

    def _delta(self, delta: Obj) -> bytes:
        payload = {"type": "content_block_delta", "index": self.index, "delta": delta}
        return event("content_block_delta", payload)

    def _close(self) -> bytes:
        if self.open_kind is None:
            return b""
        self.open_kind = None
        return event("content_block_stop", {"type": "content_block_stop", "index": self.index})

    def _finish(self) -> bytes:
        reason, sequence = self.stop
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": sequence},
        }
        delta["usage"] = _usage(self.usage)
        return event("message_delta", delta) + event("message_stop", {"type": "message_stop"})
