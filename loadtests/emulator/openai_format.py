"""OpenAI wire format as vLLM's server speaks it: request parsing, chunks, bodies, errors."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from routing.prefix import canonical_chat, canonical_completion, estimate_tokens

# Deterministic output text: token i of every answer is WORDS[i % len(WORDS)].
WORDS = (" the", " quick", " brown", " fox", " jumps", " over", " a", " lazy", " dog", ".")


class Endpoint(StrEnum):
    CHAT = "chat"
    COMPLETION = "completion"


@dataclass(frozen=True, slots=True)
class ApiError:
    status: int
    type: str
    message: str
    param: str | None = None

    def body(self) -> bytes:
        error = {"message": self.message, "type": self.type, "param": self.param}
        return orjson.dumps({"error": {**error, "code": self.status}})


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    endpoint: Endpoint
    model: str
    stream: bool
    include_usage: bool
    max_tokens: int | None
    canonical: bytes
    prompt_tokens: int
    choices: int = 1  # ``n``: sequences sampled from the one prompt, each its own choice


# OpenAI's own bound on ``n``; vLLM takes any positive n, but an emulator that let one request
# occupy thousands of sequences would only be a way to stall it.
MAX_CHOICES = 128


def bad_request(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, "BadRequestError", message, param)


def model_not_found(model: str) -> ApiError:
    return ApiError(404, "NotFoundError", f"The model `{model}` does not exist.", "model")


def _optional_positive_int(body: Mapping[str, Any], key: str) -> int | ApiError | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return bad_request(f"{key} must be a positive integer, got {value!r}", key)
    return value


def _canonical_prompt(body: Mapping[str, Any], endpoint: Endpoint) -> bytes | ApiError:
    if endpoint is Endpoint.CHAT:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return bad_request("messages must be a non-empty list", "messages")
        if not all(isinstance(m, Mapping) and isinstance(m.get("role"), str) for m in messages):
            return bad_request("every message must be an object with a string role", "messages")
        return canonical_chat(messages, body.get("tools"))
    prompt = body.get("prompt")
    if not isinstance(prompt, str | list) or (isinstance(prompt, list) and not prompt):
        return bad_request("prompt must be a string or a non-empty list", "prompt")
    return canonical_completion(prompt)


def _stream_flags(body: Mapping[str, Any]) -> tuple[bool, bool] | ApiError:
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        return bad_request("stream must be a boolean", "stream")
    options = body.get("stream_options")
    if options is None:
        return stream, False
    if not stream:
        return bad_request("Stream options can only be defined when `stream=True`.", "stream")
    if not isinstance(options, Mapping):
        return bad_request("stream_options must be an object", "stream_options")
    return stream, bool(options.get("include_usage", False))


def parse_request(body: object, endpoint: Endpoint, max_model_len: int) -> ParsedRequest | ApiError:
    if not isinstance(body, Mapping):
        return bad_request("request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return bad_request("model must be a non-empty string", "model")
    flags = _stream_flags(body)
    if isinstance(flags, ApiError):
        return flags
    max_tokens = _optional_positive_int(body, "max_tokens")
    if max_tokens is None and endpoint is Endpoint.CHAT:
        max_tokens = _optional_positive_int(body, "max_completion_tokens")
    if isinstance(max_tokens, ApiError):
        return max_tokens
    choices = _optional_positive_int(body, "n")
    if isinstance(choices, ApiError):
        return choices
    if choices is not None and choices > MAX_CHOICES:
        return bad_request(f"n must be at most {MAX_CHOICES}, got {choices}", "n")
    canonical = _canonical_prompt(body, endpoint)
    if isinstance(canonical, ApiError):
        return canonical
    prompt_tokens = max(estimate_tokens(canonical), 1)
    if prompt_tokens + (max_tokens or 0) > max_model_len:
        return bad_request(
            f"This model's maximum context length is {max_model_len} tokens. However, you "
            f"requested {prompt_tokens + (max_tokens or 0)} tokens ({prompt_tokens} in the "
            f"messages, {max_tokens or 0} in the completion). Please reduce the length of the "
            "messages or completion.",
            "max_tokens",
        )
    return ParsedRequest(
        endpoint, model, flags[0], flags[1], max_tokens, canonical, prompt_tokens, choices or 1
    )


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


def tool_to_call(body: Mapping[str, Any]) -> str | None:
    """The function a chat request with ``tools`` gets called (the forced one, else the
    first), like a model that always decides to use a tool; None without tools."""
    tools = body.get("tools")
    choice = body.get("tool_choice")
    if not isinstance(tools, list) or not tools or choice == "none":
        return None
    if isinstance(choice, Mapping) and isinstance(choice.get("function"), Mapping):
        return str(choice["function"].get("name"))
    first = tools[0].get("function") if isinstance(tools[0], Mapping) else None
    return str(first.get("name")) if isinstance(first, Mapping) else None


def tool_arguments(index: int, total: int) -> str:
    """Token ``index`` of ``total`` of a tool call's arguments; together, valid JSON."""
    if total == 1:
        return "{}"
    if index == 0:
        return '{"q": "'
    if index == total - 1:
        return '"}'
    return WORDS[index % len(WORDS)].strip(" .") or "w"


@dataclass(frozen=True, slots=True)
class ResponseIdentity:
    """The OpenAI wire (chat chunks or text completions) for one response."""

    id: str
    created: int
    model: str
    endpoint: Endpoint
    tool: str | None = None  # chat with tools: the answer is a call of this function
    max_tokens: int = 0
    choices: int = 1  # the request's ``n``

    def opening(self) -> bytes:
        if self.endpoint is not Endpoint.CHAT:
            return b""
        return b"".join(self.role_chunk(choice) for choice in range(self.choices))

    def token(self, index: int, finish_reason: str | None, choice: int = 0) -> bytes:
        if self.tool is not None:
            return self.tool_chunk(index, finish_reason and "tool_calls", choice)
        return self.token_chunk(index, finish_reason, choice)

    def closing(self, prompt: int, completion: int, cached: int, include_usage: bool) -> bytes:
        return self.usage_chunk(prompt, completion, cached) if include_usage else b""

    def terminal(self) -> bytes:
        return DONE

    def whole(self, prompt: int, completion: int, cached: int, finish_reason: str) -> bytes:
        return self.full_body(prompt, completion, cached, finish_reason)

    def tool_chunk(self, index: int, finish_reason: str | None, choice: int = 0) -> bytes:
        call: dict[str, Any] = {"index": 0}
        if index == 0:
            call.update(id=self._call_id(choice), type="function", function={"name": self.tool})
        call.setdefault("function", {})["arguments"] = tool_arguments(index, self.max_tokens)
        delta = {"tool_calls": [call]}
        entry = {"index": choice, "delta": delta, "finish_reason": finish_reason}
        return self.sse(self._envelope(self.chunk_object, [entry]))

    def _call_id(self, choice: int) -> str:
        return f"call_{self.id}" if choice == 0 else f"call_{self.id}_{choice}"

    @property
    def chunk_object(self) -> str:
        return "chat.completion.chunk" if self.endpoint is Endpoint.CHAT else "text_completion"

    def _envelope(self, obj: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }

    def sse(self, payload: dict[str, Any]) -> bytes:
        return b"data: " + orjson.dumps(payload) + b"\n\n"

    def role_chunk(self, choice: int = 0) -> bytes:
        """vLLM's first chat chunk of each choice: the assistant role with empty content."""
        delta = {"role": "assistant", "content": ""}
        entry = {"index": choice, "delta": delta, "logprobs": None, "finish_reason": None}
        return self.sse(self._envelope(self.chunk_object, [entry]))

    def token_chunk(self, index: int, finish_reason: str | None, choice_index: int = 0) -> bytes:
        text = WORDS[index % len(WORDS)]
        choice: dict[str, Any]
        if self.endpoint is Endpoint.CHAT:
            choice = {"index": choice_index, "delta": {"content": text}, "logprobs": None}
        else:
            choice = {"index": choice_index, "text": text, "logprobs": None}
        choice["finish_reason"] = finish_reason
        if finish_reason is not None:
            choice["stop_reason"] = None
        return self.sse(self._envelope(self.chunk_object, [choice]))

    def usage_chunk(self, prompt: int, completion: int, cached: int) -> bytes:
        payload = self._envelope(self.chunk_object, [])
        payload["usage"] = usage(prompt, completion, cached)
        return self.sse(payload)

    def full_body(self, prompt: int, completion: int, cached: int, finish_reason: str) -> bytes:
        """``completion`` counts every choice's tokens (usage); each choice has an equal share
        (the engine generates the same length for each)."""
        each = completion // self.choices
        choices = [self._whole_choice(i, each, finish_reason) for i in range(self.choices)]
        obj = "chat.completion" if self.endpoint is Endpoint.CHAT else "text_completion"
        payload = self._envelope(obj, choices)
        payload["usage"] = usage(prompt, completion, cached)
        return orjson.dumps(payload)

    def _whole_choice(self, index: int, completion: int, finish_reason: str) -> dict[str, Any]:
        text = "".join(WORDS[i % len(WORDS)] for i in range(completion))
        choice: dict[str, Any] = {"index": index, "logprobs": None}
        if self.endpoint is Endpoint.CHAT and self.tool is not None:
            arguments = "".join(tool_arguments(i, completion) for i in range(completion))
            function = {"name": self.tool, "arguments": arguments}
            call = {"id": self._call_id(index), "type": "function", "function": function}
            choice["message"] = {"role": "assistant", "content": None, "tool_calls": [call]}
            finish_reason = "tool_calls"
        elif self.endpoint is Endpoint.CHAT:
            choice["message"] = {"role": "assistant", "content": text, "tool_calls": []}
        else:
            choice["text"] = text
        choice.update(finish_reason=finish_reason, stop_reason=None)
        return choice


DONE = b"data: [DONE]\n\n"


def models_body(models: tuple[str, ...], created: int, max_model_len: int) -> bytes:
    data = [
        {
            "id": model,
            "object": "model",
            "created": created,
            "owned_by": "vllm",
            "root": model,
            "parent": None,
            "max_model_len": max_model_len,
        }
        for model in models
    ]
    return orjson.dumps({"object": "list", "data": data})
