"""OpenAI SSE chunk JSON ⇄ gRPC stream chunk messages.

``*_from_json`` runs once per streamed token on the gateway's hot path, so it builds messages by
hand (no ``json_format``) and tolerates what real engines send: ``null`` for absent values and
fields this contract does not carry (vLLM's ``stop_reason``, ...), which are dropped.

``*_to_json`` produces the normal form OpenAI clients see (``finish_reason`` and ``logprobs``
always present, ``null`` when unset); with ``*_from_json`` it round-trips.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proto.meridian.v1 import inference_pb2 as pb


@dataclass(frozen=True, slots=True)
class MalformedChunk(Exception):
    """A backend chunk that is not shaped like an OpenAI stream chunk. ``message`` is what
    the client is told; ``detail`` (the converter's exception) is for the log only."""

    message: str
    detail: str = ""

    def __str__(self) -> str:
        return self.message


# --- JSON → message ---------------------------------------------------------------------------


def _usage(data: Mapping[str, Any]) -> pb.Usage:
    details = data.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
    return pb.Usage(
        prompt_tokens=data.get("prompt_tokens") or 0,
        completion_tokens=data.get("completion_tokens") or 0,
        total_tokens=data.get("total_tokens") or 0,
        cached_tokens=cached,
    )


def _top_logprob(data: Mapping[str, Any]) -> pb.TopLogprob:
    return pb.TopLogprob(token=data["token"], logprob=data["logprob"], bytes=data.get("bytes"))


def _token_logprob(data: Mapping[str, Any]) -> pb.TokenLogprob:
    return pb.TokenLogprob(
        token=data["token"],
        logprob=data["logprob"],
        bytes=data.get("bytes"),
        top_logprobs=[_top_logprob(t) for t in data.get("top_logprobs") or ()],
    )


def _chat_logprobs(data: Mapping[str, Any]) -> pb.ChatLogprobs:
    return pb.ChatLogprobs(
        content=[_token_logprob(t) for t in data.get("content") or ()],
        refusal=[_token_logprob(t) for t in data.get("refusal") or ()],
    )


def _tool_call_delta(data: Mapping[str, Any]) -> pb.ToolCallDelta:
    out = pb.ToolCallDelta(index=data.get("index") or 0, id=data.get("id"), type=data.get("type"))
    function = data.get("function")
    if isinstance(function, Mapping):
        out.function.SetInParent()
        if function.get("name") is not None:
            out.function.name = function["name"]
        if function.get("arguments") is not None:
            out.function.arguments = function["arguments"]
    return out


def _chat_choice(data: Mapping[str, Any]) -> pb.ChatChunkChoice:
    delta = data.get("delta") or {}
    choice = pb.ChatChunkChoice(
        index=data.get("index") or 0,
        finish_reason=data.get("finish_reason"),
        delta=pb.ChatDelta(
            role=delta.get("role"),
            content=delta.get("content"),
            refusal=delta.get("refusal"),
            reasoning_content=delta.get("reasoning_content"),
            tool_calls=[_tool_call_delta(t) for t in delta.get("tool_calls") or ()],
        ),
    )
    logprobs = data.get("logprobs")
    if isinstance(logprobs, Mapping):
        choice.logprobs.CopyFrom(_chat_logprobs(logprobs))
    return choice


def _fill_envelope(chunk: Any, data: Mapping[str, Any]) -> None:
    chunk.id = data.get("id") or ""
    chunk.created = data.get("created") or 0
    chunk.model = data.get("model") or ""
    if data.get("system_fingerprint") is not None:
        chunk.system_fingerprint = data["system_fingerprint"]
    usage = data.get("usage")
    if isinstance(usage, Mapping):
        chunk.usage.CopyFrom(_usage(usage))


def chat_chunk_from_json(data: Mapping[str, Any]) -> pb.ChatCompletionChunk:
    """One ``chat.completion.chunk`` event; raises :class:`MalformedChunk`."""
    try:
        chunk = pb.ChatCompletionChunk(choices=[_chat_choice(c) for c in data.get("choices") or ()])
        _fill_envelope(chunk, data)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise MalformedChunk("chat chunk from backend is malformed", repr(exc)) from None
    return chunk


def _completion_logprobs(data: Mapping[str, Any]) -> pb.CompletionLogprobs:
    return pb.CompletionLogprobs(
        tokens=data.get("tokens") or (),
        token_logprobs=data.get("token_logprobs") or (),
        top_logprobs=[pb.TopLogprobsByToken(logprobs=t) for t in data.get("top_logprobs") or ()],
        text_offset=data.get("text_offset") or (),
    )


def _completion_choice(data: Mapping[str, Any]) -> pb.CompletionChunkChoice:
    choice = pb.CompletionChunkChoice(
        index=data.get("index") or 0,
        text=data.get("text") or "",
        finish_reason=data.get("finish_reason"),
    )
    logprobs = data.get("logprobs")
    if isinstance(logprobs, Mapping):
        choice.logprobs.CopyFrom(_completion_logprobs(logprobs))
    return choice


def completion_chunk_from_json(data: Mapping[str, Any]) -> pb.CompletionChunk:
    """One ``text_completion`` stream event; raises :class:`MalformedChunk`."""
    try:
        chunk = pb.CompletionChunk(
            choices=[_completion_choice(c) for c in data.get("choices") or ()]
        )
        _fill_envelope(chunk, data)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise MalformedChunk("completion chunk from backend is malformed", repr(exc)) from None
    return chunk


# --- message → JSON ---------------------------------------------------------------------------


def _usage_json(usage: pb.Usage) -> dict[str, Any]:
    out: dict[str, Any] = {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }
    if usage.HasField("cached_tokens"):
        out["prompt_tokens_details"] = {"cached_tokens": usage.cached_tokens}
    return out


def _optional(message: Any, name: str) -> Any:
    return getattr(message, name) if message.HasField(name) else None


def _top_json(top: pb.TopLogprob) -> dict[str, Any]:
    return {"token": top.token, "logprob": top.logprob, "bytes": list(top.bytes) or None}


def _token_json(token: pb.TokenLogprob) -> dict[str, Any]:
    out = _top_json(pb.TopLogprob(token=token.token, logprob=token.logprob, bytes=token.bytes))
    out["top_logprobs"] = [_top_json(t) for t in token.top_logprobs]
    return out


def _tool_call_delta_json(call: pb.ToolCallDelta) -> dict[str, Any]:
    out: dict[str, Any] = {"index": call.index}
    for name in ("id", "type"):
        if call.HasField(name):
            out[name] = getattr(call, name)
    if call.HasField("function"):
        out["function"] = {
            name: getattr(call.function, name)
            for name in ("name", "arguments")
            if call.function.HasField(name)
        }
    return out


def _delta_json(delta: pb.ChatDelta) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("role", "content", "refusal", "reasoning_content"):
        if delta.HasField(name):
            out[name] = getattr(delta, name)
    if delta.tool_calls:
        out["tool_calls"] = [_tool_call_delta_json(t) for t in delta.tool_calls]
    return out


def _chat_choice_json(choice: pb.ChatChunkChoice) -> dict[str, Any]:
    logprobs = None
    if choice.HasField("logprobs"):
        logprobs = {
            "content": [_token_json(t) for t in choice.logprobs.content],
            "refusal": [_token_json(t) for t in choice.logprobs.refusal],
        }
    return {
        "index": choice.index,
        "delta": _delta_json(choice.delta),
        "logprobs": logprobs,
        "finish_reason": _optional(choice, "finish_reason"),
    }


def _envelope_json(chunk: Any, kind: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": chunk.id,
        "object": kind,
        "created": chunk.created,
        "model": chunk.model,
        "choices": choices,
    }
    if chunk.HasField("system_fingerprint"):
        out["system_fingerprint"] = chunk.system_fingerprint
    if chunk.HasField("usage"):
        out["usage"] = _usage_json(chunk.usage)
    return out


def chat_chunk_to_json(chunk: pb.ChatCompletionChunk) -> dict[str, Any]:
    choices = [_chat_choice_json(c) for c in chunk.choices]
    return _envelope_json(chunk, "chat.completion.chunk", choices)


def _completion_choice_json(choice: pb.CompletionChunkChoice) -> dict[str, Any]:
    logprobs = None
    if choice.HasField("logprobs"):
        lp = choice.logprobs
        logprobs = {
            "tokens": list(lp.tokens),
            "token_logprobs": list(lp.token_logprobs),
            "top_logprobs": [dict(t.logprobs) for t in lp.top_logprobs],
            "text_offset": list(lp.text_offset),
        }
    return {
        "index": choice.index,
        "text": choice.text,
        "logprobs": logprobs,
        "finish_reason": _optional(choice, "finish_reason"),
    }


def completion_chunk_to_json(chunk: pb.CompletionChunk) -> dict[str, Any]:
    choices = [_completion_choice_json(c) for c in chunk.choices]
    return _envelope_json(chunk, "text_completion", choices)
