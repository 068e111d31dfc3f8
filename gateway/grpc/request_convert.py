"""gRPC request messages ⇄ the OpenAI JSON body an HTTP client would have sent.

Only fields the client set reach the body (absent optional scalars, empty repeated fields and
empty ``*_json`` strings are left out), so the backend applies its own defaults exactly as it
would for the HTTP door. ``"stream": true`` is always set: both RPCs are server-streaming.

The reverse direction (body → message) exists for clients, benchmarks and the round-trip
property tests; it is not on the gateway's request path.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from proto.meridian.v1 import inference_pb2 as pb

_CHAT_OPTIONAL = (
    "temperature",
    "top_p",
    "max_tokens",
    "n",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "logprobs",
    "top_logprobs",
    "user",
    "parallel_tool_calls",
    "max_completion_tokens",
)
_COMPLETION_OPTIONAL = (
    "temperature",
    "top_p",
    "max_tokens",
    "n",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "logprobs",
    "user",
    "suffix",
)
_REAL_FIELDS = frozenset({"temperature", "top_p", "presence_penalty", "frequency_penalty"})
_TOOL_CHOICE_MODES = frozenset({"none", "auto", "required"})


@dataclass(frozen=True, slots=True)
class InvalidRequest(Exception):
    """The message cannot become a valid body; ``field`` names the offending proto field."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@dataclass(frozen=True, slots=True)
class ConvertedRequest:
    body: dict[str, Any]
    tenant: str | None  # scopes caching and limits; deliberately not part of the body

    def body_bytes(self) -> bytes:
        return orjson.dumps(self.body)


def json_field(text: str, field: str, expected: type) -> Any:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(field, f"is not valid JSON ({exc.msg})") from None
    if not isinstance(value, expected):
        raise InvalidRequest(field, f"must be a JSON {expected.__name__}")
    return value


def _copy_optionals(message: Any, names: tuple[str, ...], body: dict[str, Any]) -> None:
    for name in names:
        if message.HasField(name):
            value = getattr(message, name)
            if name in _REAL_FIELDS and not math.isfinite(value):
                raise InvalidRequest(name, "must be a finite number")
            body[name] = value


def _copy_common_tail(
    message: pb.ChatCompletionRequest | pb.CompletionRequest, body: dict[str, Any]
) -> None:
    if message.stop:
        body["stop"] = list(message.stop)
    if message.HasField("stream_options"):
        options = message.stream_options
        body["stream_options"] = (
            {"include_usage": options.include_usage} if options.HasField("include_usage") else {}
        )
    if message.logit_bias:
        if not all(math.isfinite(v) for v in message.logit_bias.values()):
            raise InvalidRequest("logit_bias", "values must be finite numbers")
        body["logit_bias"] = dict(message.logit_bias)
    if message.extra_json:
        extra = json_field(message.extra_json, "extra_json", dict)
        clash = sorted(set(extra) & set(body))
        if clash:
            raise InvalidRequest("extra_json", f"sets keys a typed field already sets: {clash}")
        body.update(extra)


def _tool_call_json(call: pb.ToolCall) -> dict[str, Any]:
    return {
        "id": call.id,
        "type": call.type,
        "function": {"name": call.function.name, "arguments": call.function.arguments},
    }


def _part_json(part: pb.ContentPart, field: str) -> dict[str, Any]:
    kind = part.WhichOneof("part")
    if kind == "text":
        return {"type": "text", "text": part.text}
    if kind == "image_url":
        image: dict[str, Any] = {"url": part.image_url.url}
        if part.image_url.HasField("detail"):
            image["detail"] = part.image_url.detail
        return {"type": "image_url", "image_url": image}
    if kind == "input_audio":
        audio = part.input_audio
        return {"type": "input_audio", "input_audio": {"data": audio.data, "format": audio.format}}
    if kind == "other_json":
        other: dict[str, Any] = json_field(part.other_json, f"{field}.other_json", dict)
        if not isinstance(other.get("type"), str):
            raise InvalidRequest(f"{field}.other_json", "needs a string 'type'")
        return other
    raise InvalidRequest(field, "content part has no value set")


def _message_json(message: pb.ChatMessage, index: int) -> dict[str, Any]:
    field = f"messages[{index}]"
    if not message.role:
        raise InvalidRequest(f"{field}.role", "is required")
    out: dict[str, Any] = {"role": message.role}
    content = message.WhichOneof("content")
    if content == "text":
        out["content"] = message.text
    elif content == "parts":
        out["content"] = [
            _part_json(part, f"{field}.parts[{i}]") for i, part in enumerate(message.parts.parts)
        ]
    if message.HasField("name"):
        out["name"] = message.name
    if message.HasField("tool_call_id"):
        out["tool_call_id"] = message.tool_call_id
    if message.tool_calls:
        out["tool_calls"] = [_tool_call_json(call) for call in message.tool_calls]
    return out


def _require_model(model: str) -> None:
    if not model:
        raise InvalidRequest("model", "is required")


def chat_request_to_body(request: pb.ChatCompletionRequest) -> ConvertedRequest:
    """The ``/v1/chat/completions`` body; raises :class:`InvalidRequest`."""
    _require_model(request.model)
    if not request.messages:
        raise InvalidRequest("messages", "at least one message is required")
    body: dict[str, Any] = {
        "model": request.model,
        "messages": [_message_json(m, i) for i, m in enumerate(request.messages)],
        "stream": True,
    }
    _copy_optionals(request, _CHAT_OPTIONAL, body)
    if request.metadata:
        body["metadata"] = dict(request.metadata)
    if request.tools_json:
        body["tools"] = json_field(request.tools_json, "tools_json", list)
    choice = request.WhichOneof("tool_choice")
    if choice == "tool_choice_mode":
        if request.tool_choice_mode not in _TOOL_CHOICE_MODES:
            raise InvalidRequest("tool_choice_mode", f"must be one of {sorted(_TOOL_CHOICE_MODES)}")
        body["tool_choice"] = request.tool_choice_mode
    elif choice == "tool_choice_json":
        body["tool_choice"] = json_field(request.tool_choice_json, "tool_choice_json", dict)
    if request.response_format_json:
        body["response_format"] = json_field(
            request.response_format_json, "response_format_json", dict
        )
    _copy_common_tail(request, body)
    return ConvertedRequest(body, request.tenant if request.HasField("tenant") else None)


def completion_request_to_body(request: pb.CompletionRequest) -> ConvertedRequest:
    """The ``/v1/completions`` body; raises :class:`InvalidRequest`."""
    _require_model(request.model)
    kind = request.WhichOneof("prompt")
    if kind is None:
        raise InvalidRequest("prompt", "set prompt_text or prompt_token_ids")
    prompt: str | list[int] = (
        request.prompt_text if kind == "prompt_text" else list(request.prompt_token_ids.ids)
    )
    body: dict[str, Any] = {"model": request.model, "prompt": prompt, "stream": True}
    _copy_optionals(request, _COMPLETION_OPTIONAL, body)
    _copy_common_tail(request, body)
    return ConvertedRequest(body, request.tenant if request.HasField("tenant") else None)


# --- body → message (clients, benchmarks, tests) -----------------------------------------------


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def _part_message(part: Mapping[str, Any]) -> pb.ContentPart:
    kind = part.get("type")
    if kind == "text":
        return pb.ContentPart(text=part["text"])
    if kind == "image_url":
        image = part["image_url"]
        return pb.ContentPart(image_url=pb.ImageUrl(url=image["url"], detail=image.get("detail")))
    if kind == "input_audio":
        audio = part["input_audio"]
        return pb.ContentPart(input_audio=pb.InputAudio(data=audio["data"], format=audio["format"]))
    return pb.ContentPart(other_json=_dumps(part))


def _chat_message(message: Mapping[str, Any]) -> pb.ChatMessage:
    out = pb.ChatMessage(
        role=message["role"], name=message.get("name"), tool_call_id=message.get("tool_call_id")
    )
    content = message.get("content")
    if isinstance(content, str):
        out.text = content
    elif isinstance(content, list):
        out.parts.parts.extend(_part_message(part) for part in content)
    for call in message.get("tool_calls") or ():
        function = pb.FunctionCall(
            name=call["function"]["name"], arguments=call["function"]["arguments"]
        )
        out.tool_calls.append(pb.ToolCall(id=call["id"], type=call["type"], function=function))
    return out


def _fill_common(message: Any, body: Mapping[str, Any], optionals: tuple[str, ...]) -> set[str]:
    """Copy the fields both requests share; returns the body keys it consumed."""
    message.model = body["model"]
    for name in optionals:
        if body.get(name) is not None:
            setattr(message, name, body[name])
    message.stop.extend(
        [body["stop"]] if isinstance(body.get("stop"), str) else body.get("stop") or []
    )
    options = body.get("stream_options")
    if isinstance(options, Mapping):
        message.stream_options.SetInParent()
        if options.get("include_usage") is not None:
            message.stream_options.include_usage = options["include_usage"]
    message.logit_bias.update(body.get("logit_bias") or {})
    return {"model", "stream", "stop", "stream_options", "logit_bias", *optionals}


def body_to_chat_request(
    body: Mapping[str, Any], tenant: str | None = None
) -> pb.ChatCompletionRequest:
    request = pb.ChatCompletionRequest(tenant=tenant)
    used = _fill_common(request, body, _CHAT_OPTIONAL)
    request.messages.extend(_chat_message(m) for m in body["messages"])
    request.metadata.update(body.get("metadata") or {})
    if body.get("tools") is not None:
        request.tools_json = _dumps(body["tools"])
    choice = body.get("tool_choice")
    if isinstance(choice, str):
        request.tool_choice_mode = choice
    elif choice is not None:
        request.tool_choice_json = _dumps(choice)
    if body.get("response_format") is not None:
        request.response_format_json = _dumps(body["response_format"])
    used |= {"messages", "metadata", "tools", "tool_choice", "response_format"}
    extra = {k: v for k, v in body.items() if k not in used}
    if extra:
        request.extra_json = _dumps(extra)
    return request


def body_to_completion_request(
    body: Mapping[str, Any], tenant: str | None = None
) -> pb.CompletionRequest:
    request = pb.CompletionRequest(tenant=tenant)
    used = _fill_common(request, body, _COMPLETION_OPTIONAL)
    prompt = body["prompt"]
    if isinstance(prompt, str):
        request.prompt_text = prompt
    else:
        request.prompt_token_ids.ids.extend(prompt)
    extra = {k: v for k, v in body.items() if k not in used | {"prompt"}}
    if extra:
        request.extra_json = _dumps(extra)
    return request
