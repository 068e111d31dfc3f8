"""The emulator's other APIs: embeddings, the Responses API and Anthropic Messages, each as
a request adapter (its body as the chat/completions request the engine runs) and a wire.

Shapes follow what vLLM's servers send for these APIs: Responses events ``response.created``
… ``response.output_text.delta`` … ``response.completed``; Messages events
``message_start``, ``content_block_start``, ``content_block_delta`` …, ``message_delta``,
``message_stop``; embeddings as OpenAI's list of vectors.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from loadtests.emulator.openai_format import WORDS, ApiError, Endpoint, bad_request
from loadtests.emulator.wire import WireFactory

Body = dict[str, Any]
# request body -> (the chat/completions request the engine runs, its endpoint, its wire)
Adapter = Callable[[Mapping[str, Any]], tuple[Body, Endpoint, WireFactory] | ApiError]

_STOP = {"length": "max_tokens", "stop": "end_turn"}


def _event(name: str, payload: Mapping[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, Mapping))
    return ""


@dataclass(slots=True)
class EmbeddingsWire:
    id: str
    model: str
    max_tokens: int
    inputs: int = 1
    dimensions: int = 8

    def opening(self) -> bytes:
        return b""

    def token(self, index: int, finish_reason: str | None, choice: int = 0) -> bytes:
        return b""

    def closing(self, prompt: int, completion: int, cached: int, include_usage: bool) -> bytes:
        return b""

    def terminal(self) -> bytes:
        return b""

    def whole(self, prompt: int, completion: int, cached: int, finish_reason: str) -> bytes:
        data = [
            {
                "object": "embedding",
                "index": i,
                "embedding": [round(((i + 1) * (d + 1) % 7) / 7 - 0.5, 4) for d in range(8)],
            }
            for i in range(self.inputs)
        ]
        usage = {"prompt_tokens": prompt, "total_tokens": prompt}
        return orjson.dumps({"object": "list", "data": data, "model": self.model, "usage": usage})


def embeddings(body: Mapping[str, Any]) -> tuple[Body, Endpoint, WireFactory] | ApiError:
    value = body.get("input")
    if not value:
        return bad_request("input must be a non-empty string or list", "input")
    count = len(value) if isinstance(value, list) and not isinstance(value[0], int) else 1
    prompt: Any = value if isinstance(value, str) else " ".join(str(v) for v in value)
    chat = {"model": body.get("model"), "prompt": prompt, "max_tokens": 1}

    def factory(rid: str, model: str, max_tokens: int) -> EmbeddingsWire:
        return EmbeddingsWire(rid, model, max_tokens, count)

    return chat, Endpoint.COMPLETION, factory


@dataclass(slots=True)
class ResponsesWire:
    id: str
    model: str
    max_tokens: int
    created: int = field(default_factory=lambda: int(time.time()))
    text: str = ""
    sequence: int = 0
    usage: Body = field(default_factory=dict)
    status: str = "completed"

    def _send(self, kind: str, **payload: Any) -> bytes:
        self.sequence += 1
        return _event(kind, {"type": kind, "sequence_number": self.sequence, **payload})

    def _response(self, status: str, output: list[Body]) -> Body:
        return {
            "id": f"resp_{self.id}",
            "object": "response",
            "created_at": self.created,
            "status": status,
            "model": self.model,
            "output": output,
            "usage": self.usage or None,
            "incomplete_details": {"reason": "max_output_tokens"}
            if status == "incomplete"
            else None,
        }

    def _message(self, status: str) -> Body:
        part = {"type": "output_text", "text": self.text, "annotations": []}
        return {
            "id": f"msg_{self.id}",
            "type": "message",
            "role": "assistant",
            "status": status,
            "content": [part] if status == "completed" else [],
        }

    def opening(self) -> bytes:
        empty = {"type": "output_text", "text": "", "annotations": []}
        return (
            self._send("response.created", response=self._response("in_progress", []))
            + self._send("response.in_progress", response=self._response("in_progress", []))
            + self._send("response.output_item.added", output_index=0, item=self._message("in_progress"))
            + self._send("response.content_part.added", item_id=f"msg_{self.id}", output_index=0, content_index=0, part=empty)
        )  # fmt: skip

    def token(self, index: int, finish_reason: str | None, choice: int = 0) -> bytes:
        delta = WORDS[index % len(WORDS)]
        self.text += delta
        if finish_reason == "length":
            self.status = "incomplete"
        where = {"item_id": f"msg_{self.id}", "output_index": 0, "content_index": 0}
        return self._send("response.output_text.delta", **where, delta=delta, logprobs=[])

    def closing(self, prompt: int, completion: int, cached: int, include_usage: bool) -> bytes:
        self.usage = _responses_usage(prompt, completion, cached)
        where = {"item_id": f"msg_{self.id}", "output_index": 0, "content_index": 0}
        part = {"type": "output_text", "text": self.text, "annotations": []}
        return (
            self._send("response.output_text.done", **where, text=self.text, logprobs=[])
            + self._send("response.content_part.done", **where, part=part)
            + self._send("response.output_item.done", output_index=0, item=self._message("completed"))
        )  # fmt: skip

    def terminal(self) -> bytes:
        kind = "response.completed" if self.status == "completed" else "response.incomplete"
        return self._send(kind, response=self._response(self.status, [self._message("completed")]))

    def whole(self, prompt: int, completion: int, cached: int, finish_reason: str) -> bytes:
        self.text = "".join(WORDS[i % len(WORDS)] for i in range(completion))
        self.usage = _responses_usage(prompt, completion, cached)
        status = "incomplete" if finish_reason == "length" else "completed"
        return orjson.dumps(self._response(status, [self._message("completed")]))


def _responses_usage(prompt: int, completion: int, cached: int) -> Body:
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }


def responses(body: Mapping[str, Any]) -> tuple[Body, Endpoint, WireFactory] | ApiError:
    value = body.get("input")
    messages: list[Body] = []
    if isinstance(body.get("instructions"), str):
        messages.append({"role": "system", "content": body["instructions"]})
    if isinstance(value, str) and value:
        messages.append({"role": "user", "content": value})
    elif isinstance(value, list) and value:
        for item in value:
            if isinstance(item, Mapping):
                role = str(item.get("role", "user"))
                messages.append({"role": role, "content": _text(item.get("content"))})
    else:
        return bad_request("input must be a non-empty string or list", "input")
    chat: Body = {"model": body.get("model"), "messages": messages, "stream": body.get("stream")}
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    return chat, Endpoint.CHAT, ResponsesWire


@dataclass(slots=True)
class MessagesWire:
    id: str
    model: str
    max_tokens: int
    text: str = ""
    stop: str = "end_turn"

    def _message(self, content: list[Body], usage: Body, stop: str | None) -> Body:
        return {
            "id": f"msg_{self.id}",
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage,
        }

    def opening(self) -> bytes:
        usage = {"input_tokens": 0, "output_tokens": 0}
        start = {"type": "message_start", "message": self._message([], usage, None)}
        block = {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "text", "text": ""},
        }
        return _event("message_start", start) + _event("content_block_start", block)  # fmt: skip

    def token(self, index: int, finish_reason: str | None, choice: int = 0) -> bytes:
        if finish_reason is not None:
            self.stop = _STOP.get(finish_reason, "end_turn")
        delta = {"type": "text_delta", "text": WORDS[index % len(WORDS)]}
        payload = {"type": "content_block_delta", "index": 0, "delta": delta}
        return _event("content_block_delta", payload)

    def closing(self, prompt: int, completion: int, cached: int, include_usage: bool) -> bytes:
        usage = {"input_tokens": prompt, "output_tokens": completion}
        delta = {"stop_reason": self.stop, "stop_sequence": None}
        return _event("content_block_stop", {"type": "content_block_stop", "index": 0}) + _event(
            "message_delta", {"type": "message_delta", "delta": delta, "usage": usage}
        )

    def terminal(self) -> bytes:
        return _event("message_stop", {"type": "message_stop"})

    def whole(self, prompt: int, completion: int, cached: int, finish_reason: str) -> bytes:
        text = "".join(WORDS[i % len(WORDS)] for i in range(completion))
        usage = {"input_tokens": prompt, "output_tokens": completion}
        content = [{"type": "text", "text": text}]
        return orjson.dumps(self._message(content, usage, _STOP.get(finish_reason, "end_turn")))


def messages(body: Mapping[str, Any]) -> tuple[Body, Endpoint, WireFactory] | ApiError:
    chat_messages: list[Body] = []
    if body.get("system") is not None:
        chat_messages.append({"role": "system", "content": _text(body["system"])})
    for message in body.get("messages") or ():
        if isinstance(message, Mapping):
            role = str(message.get("role"))
            chat_messages.append({"role": role, "content": _text(message.get("content"))})
    if not chat_messages:
        return bad_request("messages: at least one message is required", "messages")
    chat: Body = {
        "model": body.get("model"),
        "messages": chat_messages,
        "max_tokens": body.get("max_tokens"),
        "stream": body.get("stream"),
    }
    return chat, Endpoint.CHAT, MessagesWire
