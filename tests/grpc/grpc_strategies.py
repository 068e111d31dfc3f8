"""Hypothesis strategies for the meridian.v1 messages (shared by the gRPC property tests)."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import strategies as st

from proto.meridian.v1 import inference_pb2 as pb

# protobuf strings must be valid UTF-8: no lone surrogates.
text = st.text(st.characters(codec="utf-8"), max_size=12)
nonempty_text = st.text(st.characters(codec="utf-8"), min_size=1, max_size=12)
reals = st.floats(allow_nan=False, allow_infinity=False)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)

json_values = st.recursive(
    st.none() | st.booleans() | int64 | reals | text,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(text, children, max_size=3),
    max_leaves=8,
)
json_objects = st.dictionaries(text, json_values, max_size=3)


def dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


content_parts = st.one_of(
    st.builds(pb.ContentPart, text=text),
    st.builds(
        pb.ContentPart,
        image_url=st.builds(pb.ImageUrl, url=text, detail=maybe(st.sampled_from(["low", "high"]))),
    ),
    st.builds(pb.ContentPart, input_audio=st.builds(pb.InputAudio, data=text, format=text)),
    json_objects.map(lambda o: pb.ContentPart(other_json=dumps({"type": "file", **o}))),
)

tool_calls = st.builds(
    pb.ToolCall,
    id=text,
    type=st.just("function"),
    function=st.builds(pb.FunctionCall, name=text, arguments=text),
)


@st.composite
def chat_messages(draw: st.DrawFn) -> pb.ChatMessage:
    message = pb.ChatMessage(
        role=draw(nonempty_text),
        name=draw(maybe(text)),
        tool_call_id=draw(maybe(text)),
        tool_calls=draw(st.lists(tool_calls, max_size=2)),
    )
    content = draw(st.sampled_from(["none", "text", "parts"]))
    if content == "text":
        message.text = draw(text)
    elif content == "parts":
        message.parts.SetInParent()
        message.parts.parts.extend(draw(st.lists(content_parts, max_size=3)))
    return message


def _stream_options(draw: st.DrawFn, request: Any) -> None:
    choice = draw(st.sampled_from(["absent", "empty", "set"]))
    if choice == "empty":
        request.stream_options.SetInParent()
    elif choice == "set":
        request.stream_options.include_usage = draw(st.booleans())


def _common(draw: st.DrawFn, request: Any) -> None:
    request.model = draw(nonempty_text)
    for name in ("temperature", "top_p", "presence_penalty", "frequency_penalty"):
        value = draw(maybe(reals))
        if value is not None:
            setattr(request, name, value)
    for name in ("max_tokens", "n"):
        value = draw(maybe(int32))
        if value is not None:
            setattr(request, name, value)
    seed = draw(maybe(int64))
    if seed is not None:
        request.seed = seed
    user = draw(maybe(text))
    if user is not None:
        request.user = user
    tenant = draw(maybe(text))
    if tenant is not None:
        request.tenant = tenant
    request.stop.extend(draw(st.lists(text, max_size=3)))
    request.logit_bias.update(draw(st.dictionaries(text, reals, max_size=3)))
    _stream_options(draw, request)
    extra = draw(st.dictionaries(text.map(lambda k: "x_" + k), json_values, max_size=2))
    if extra:
        request.extra_json = dumps(extra)


@st.composite
def chat_requests(draw: st.DrawFn) -> pb.ChatCompletionRequest:
    request = pb.ChatCompletionRequest(
        messages=draw(st.lists(chat_messages(), min_size=1, max_size=3)),
        logprobs=draw(maybe(st.booleans())),
        top_logprobs=draw(maybe(int32)),
        parallel_tool_calls=draw(maybe(st.booleans())),
        max_completion_tokens=draw(maybe(int32)),
        metadata=draw(st.dictionaries(text, text, max_size=2)),
    )
    _common(draw, request)
    tools = draw(maybe(st.lists(json_objects, max_size=2)))
    if tools is not None:
        request.tools_json = dumps(tools)
    choice = draw(st.sampled_from(["absent", "mode", "json"]))
    if choice == "mode":
        request.tool_choice_mode = draw(st.sampled_from(["none", "auto", "required"]))
    elif choice == "json":
        request.tool_choice_json = dumps(draw(json_objects))
    response_format = draw(maybe(json_objects))
    if response_format is not None:
        request.response_format_json = dumps(response_format)
    return request


@st.composite
def completion_requests(draw: st.DrawFn) -> pb.CompletionRequest:
    request = pb.CompletionRequest(logprobs=draw(maybe(int32)), suffix=draw(maybe(text)))
    if draw(st.booleans()):
        request.prompt_text = draw(text)
    else:
        request.prompt_token_ids.SetInParent()
        request.prompt_token_ids.ids.extend(draw(st.lists(int32, max_size=5)))
    _common(draw, request)
    return request


# --- chunks -----------------------------------------------------------------------------------

byte_values = st.lists(st.integers(0, 255), max_size=4)
top_logprobs = st.builds(pb.TopLogprob, token=text, logprob=reals, bytes=byte_values)
token_logprobs = st.builds(
    pb.TokenLogprob,
    token=text,
    logprob=reals,
    bytes=byte_values,
    top_logprobs=st.lists(top_logprobs, max_size=2),
)
usages = st.builds(
    pb.Usage,
    prompt_tokens=int32,
    completion_tokens=int32,
    total_tokens=int32,
    cached_tokens=maybe(int32),
)
finish_reasons = maybe(st.sampled_from(["stop", "length", "tool_calls", "abort"]))


@st.composite
def tool_call_deltas(draw: st.DrawFn) -> pb.ToolCallDelta:
    delta = pb.ToolCallDelta(index=draw(int32), id=draw(maybe(text)), type=draw(maybe(text)))
    if draw(st.booleans()):
        delta.function.SetInParent()
        for name in ("name", "arguments"):
            value = draw(maybe(text))
            if value is not None:
                setattr(delta.function, name, value)
    return delta


chat_deltas = st.builds(
    pb.ChatDelta,
    role=maybe(text),
    content=maybe(text),
    refusal=maybe(text),
    reasoning_content=maybe(text),
    tool_calls=st.lists(tool_call_deltas(), max_size=2),
)
chat_logprobs = st.builds(
    pb.ChatLogprobs,
    content=st.lists(token_logprobs, max_size=2),
    refusal=st.lists(token_logprobs, max_size=1),
)
chat_choices = st.builds(
    pb.ChatChunkChoice,
    index=int32,
    delta=chat_deltas,
    finish_reason=finish_reasons,
    logprobs=maybe(chat_logprobs),
)
chat_chunks = st.builds(
    pb.ChatCompletionChunk,
    id=text,
    created=int64,
    model=text,
    choices=st.lists(chat_choices, max_size=2),
    usage=maybe(usages),
    system_fingerprint=maybe(text),
)
completion_logprobs = st.builds(
    pb.CompletionLogprobs,
    tokens=st.lists(text, max_size=2),
    token_logprobs=st.lists(reals, max_size=2),
    top_logprobs=st.lists(
        st.builds(pb.TopLogprobsByToken, logprobs=st.dictionaries(text, reals, max_size=2)),
        max_size=2,
    ),
    text_offset=st.lists(int32, max_size=2),
)
completion_choices = st.builds(
    pb.CompletionChunkChoice,
    index=int32,
    text=text,
    finish_reason=finish_reasons,
    logprobs=maybe(completion_logprobs),
)
completion_chunks = st.builds(
    pb.CompletionChunk,
    id=text,
    created=int64,
    model=text,
    choices=st.lists(completion_choices, max_size=2),
    usage=maybe(usages),
    system_fingerprint=maybe(text),
)
