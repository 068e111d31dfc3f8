"""The Embeddings and Messages RPCs ⇄ the JSON bodies and answers of their HTTP doors.

As for chat and completions (``request_convert``), a request becomes exactly the body an HTTP
client would have sent ``/v1/embeddings`` or ``/v1/messages``, so both doors share one parse,
routing and relay path; only fields the client set reach the body. Answers come back from the
relay as the HTTP door's JSON (the embeddings body, each Messages SSE event's data object) and
are turned into messages here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import orjson

from gateway.grpc.chunk_convert import MalformedChunk
from gateway.grpc.request_convert import ConvertedRequest, InvalidRequest, json_field
from proto.meridian.v1 import inference_pb2 as pb

_MESSAGES_REAL = ("temperature", "top_p")


def _merge_extra(extra_json: str, body: dict[str, Any]) -> None:
    if not extra_json:
        return
    extra = json_field(extra_json, "extra_json", dict)
    clash = sorted(set(extra) & set(body))
    if clash:
        raise InvalidRequest("extra_json", f"sets keys a typed field already sets: {clash}")
    body.update(extra)


def _tenant(request: pb.EmbeddingsRequest | pb.MessagesRequest) -> str | None:
    return request.tenant if request.HasField("tenant") else None


# --- requests --------------------------------------------------------------------------------


def embeddings_request_to_body(request: pb.EmbeddingsRequest) -> ConvertedRequest:
    """The ``/v1/embeddings`` body; raises :class:`InvalidRequest`."""
    if not request.model:
        raise InvalidRequest("model", "is required")
    kind = request.WhichOneof("input")
    value: str | list[str] | list[int]
    if kind == "text":
        value = request.text
    elif kind == "texts":
        value = list(request.texts.texts)
    elif kind == "token_ids":
        value = list(request.token_ids.ids)
    else:
        raise InvalidRequest("input", "set text, texts or token_ids")
    body: dict[str, Any] = {"model": request.model, "input": value, "encoding_format": "float"}
    if request.HasField("dimensions"):
        body["dimensions"] = request.dimensions
    if request.HasField("user"):
        body["user"] = request.user
    _merge_extra(request.extra_json, body)
    return ConvertedRequest(body, _tenant(request))


def _anthropic_message(message: pb.AnthropicMessage, index: int) -> dict[str, Any]:
    field = f"messages[{index}]"
    if not message.role:
        raise InvalidRequest(f"{field}.role", "is required")
    kind = message.WhichOneof("content")
    if kind == "text":
        return {"role": message.role, "content": message.text}
    if kind == "blocks_json":
        blocks = json_field(message.blocks_json, f"{field}.blocks_json", list)
        return {"role": message.role, "content": blocks}
    raise InvalidRequest(f"{field}.content", "set text or blocks_json")


def messages_request_to_body(request: pb.MessagesRequest) -> ConvertedRequest:
    """The ``/v1/messages`` body (always ``"stream": true``); raises :class:`InvalidRequest`."""
    if not request.model:
        raise InvalidRequest("model", "is required")
    if not request.HasField("max_tokens"):
        raise InvalidRequest("max_tokens", "is required by the Messages API")
    if not request.messages:
        raise InvalidRequest("messages", "at least one message is required")
    body: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": [_anthropic_message(m, i) for i, m in enumerate(request.messages)],
        "stream": True,
    }
    system = request.WhichOneof("system")
    if system == "system_text":
        body["system"] = request.system_text
    elif system == "system_json":
        body["system"] = json_field(request.system_json, "system_json", list)
    for name in (*_MESSAGES_REAL, "top_k"):
        if request.HasField(name):
            value = getattr(request, name)
            if name in _MESSAGES_REAL and not math.isfinite(value):
                raise InvalidRequest(name, "must be a finite number")
            body[name] = value
    if request.stop_sequences:
        body["stop_sequences"] = list(request.stop_sequences)
    if request.tools_json:
        body["tools"] = json_field(request.tools_json, "tools_json", list)
    if request.tool_choice_json:
        body["tool_choice"] = json_field(request.tool_choice_json, "tool_choice_json", dict)
    if request.metadata_json:
        body["metadata"] = json_field(request.metadata_json, "metadata_json", dict)
    _merge_extra(request.extra_json, body)
    return ConvertedRequest(body, _tenant(request))


# --- answers ---------------------------------------------------------------------------------


def embeddings_response_from_json(data: Mapping[str, Any]) -> pb.EmbeddingsResponse:
    """The ``/v1/embeddings`` answer; raises :class:`MalformedChunk` for another shape."""
    try:
        usage = data.get("usage") or {}
        return pb.EmbeddingsResponse(
            model=str(data.get("model") or ""),
            data=[
                pb.Embedding(index=int(item.get("index") or 0), embedding=item["embedding"])
                for item in data["data"]
            ],
            usage=pb.Usage(
                prompt_tokens=usage.get("prompt_tokens") or 0,
                total_tokens=usage.get("total_tokens") or 0,
            ),
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        raise MalformedChunk("backend sent an embeddings answer of another shape") from None


def messages_event_from_json(data: Mapping[str, Any]) -> pb.MessagesEvent:
    """One Messages stream event (its ``data`` object); raises :class:`MalformedChunk`."""
    kind = data.get("type")
    if not isinstance(kind, str) or not kind:
        raise MalformedChunk("backend sent a Messages event without a type")
    event = pb.MessagesEvent(type=kind, json=orjson.dumps(data).decode())
    delta = data.get("delta")
    text = delta.get("text") if isinstance(delta, Mapping) else None
    if kind == "content_block_delta" and isinstance(text, str):
        event.text = text  # a text_delta (input_json_delta carries partial_json instead)
    return event


# --- body → message (clients, benchmarks, tests) -----------------------------------------------


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def body_to_embeddings_request(
    body: Mapping[str, Any], tenant: str | None = None
) -> pb.EmbeddingsRequest:
    request = pb.EmbeddingsRequest(model=body["model"], tenant=tenant)
    value = body["input"]
    if isinstance(value, str):
        request.text = value
    elif value and all(isinstance(v, int) for v in value):
        request.token_ids.ids.extend(value)
    else:
        request.texts.texts.extend(value)
    for name in ("dimensions", "user"):
        if body.get(name) is not None:
            setattr(request, name, body[name])
    extra = {
        k: v
        for k, v in body.items()
        if k not in {"model", "input", "dimensions", "user", "encoding_format"}
    }
    if extra:
        request.extra_json = _dumps(extra)
    return request


_MESSAGES_USED = frozenset(
    {"model", "max_tokens", "messages", "system", "temperature", "top_p", "top_k"}
    | {"stop_sequences", "tools", "tool_choice", "metadata", "stream"}
)


def body_to_messages_request(
    body: Mapping[str, Any], tenant: str | None = None
) -> pb.MessagesRequest:
    request = pb.MessagesRequest(model=body["model"], max_tokens=body["max_tokens"], tenant=tenant)
    for message in body["messages"]:
        content = message["content"]
        entry = pb.AnthropicMessage(role=message["role"])
        if isinstance(content, str):
            entry.text = content
        else:
            entry.blocks_json = _dumps(content)
        request.messages.append(entry)
    system = body.get("system")
    if isinstance(system, str):
        request.system_text = system
    elif system is not None:
        request.system_json = _dumps(system)
    for name in ("temperature", "top_p", "top_k"):
        if body.get(name) is not None:
            setattr(request, name, body[name])
    request.stop_sequences.extend(body.get("stop_sequences") or ())
    for name, field in (("tools", "tools_json"), ("tool_choice", "tool_choice_json")):
        if body.get(name) is not None:
            setattr(request, field, _dumps(body[name]))
    if body.get("metadata") is not None:
        request.metadata_json = _dumps(body["metadata"])
    extra = {k: v for k, v in body.items() if k not in _MESSAGES_USED}
    if extra:
        request.extra_json = _dumps(extra)
    return request
