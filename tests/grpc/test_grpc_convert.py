"""Round trips between the gRPC messages and the OpenAI JSON the HTTP door speaks."""

from __future__ import annotations

import math

import orjson
import pytest
from hypothesis import given, settings

from gateway.grpc.convert import (
    InvalidRequest,
    MalformedChunk,
    body_to_chat_request,
    body_to_completion_request,
    chat_chunk_from_json,
    chat_chunk_to_json,
    chat_request_to_body,
    completion_chunk_from_json,
    completion_chunk_to_json,
    completion_request_to_body,
)
from proto.meridian.v1 import inference_pb2 as pb
from tests.grpc.grpc_strategies import (
    chat_chunks,
    chat_requests,
    completion_chunks,
    completion_requests,
)

EXAMPLES = settings(max_examples=150, deadline=None)


def _wire(value: object) -> object:
    """What the other side parses: the value through real JSON bytes."""
    return orjson.loads(orjson.dumps(value))


@EXAMPLES
@given(chat_requests())
def test_chat_request_survives_body_round_trip(request: pb.ChatCompletionRequest) -> None:
    converted = chat_request_to_body(request)
    body = converted.body
    assert body == _wire(body)  # nothing the JSON encoder would change or refuse
    assert body["stream"] is True
    again = body_to_chat_request(_wire(body), tenant=converted.tenant)  # type: ignore[arg-type]
    assert again == request


@EXAMPLES
@given(completion_requests())
def test_completion_request_survives_body_round_trip(request: pb.CompletionRequest) -> None:
    converted = completion_request_to_body(request)
    body = converted.body
    assert body == _wire(body)
    again = body_to_completion_request(_wire(body), tenant=converted.tenant)  # type: ignore[arg-type]
    assert again == request


@EXAMPLES
@given(chat_chunks)
def test_chat_chunk_round_trips_through_openai_json(chunk: pb.ChatCompletionChunk) -> None:
    data = chat_chunk_to_json(chunk)
    assert chat_chunk_from_json(_wire(data)) == chunk  # type: ignore[arg-type]
    assert chat_chunk_to_json(chat_chunk_from_json(data)) == data


@EXAMPLES
@given(completion_chunks)
def test_completion_chunk_round_trips_through_openai_json(chunk: pb.CompletionChunk) -> None:
    data = completion_chunk_to_json(chunk)
    assert completion_chunk_from_json(_wire(data)) == chunk  # type: ignore[arg-type]
    assert completion_chunk_to_json(completion_chunk_from_json(data)) == data


def test_only_fields_the_client_set_reach_the_body() -> None:
    request = pb.ChatCompletionRequest(
        model="m", messages=[pb.ChatMessage(role="user", text="hi")], temperature=0.0
    )
    body = chat_request_to_body(request).body
    assert body == {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "temperature": 0.0,  # explicitly zero is sent; absent fields are not
    }


def test_tools_bytes_match_what_an_http_client_sends() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"minimum": 1}}}]
    request = pb.ChatCompletionRequest(
        model="m",
        messages=[pb.ChatMessage(role="user", text="x")],
        tools_json=orjson.dumps(tools).decode(),
        tool_choice_mode="auto",
        tenant="acme",
    )
    converted = chat_request_to_body(request)
    assert converted.body["tools"] == tools
    assert isinstance(converted.body["tools"][0]["function"]["parameters"]["minimum"], int)
    assert converted.body["tool_choice"] == "auto"
    assert converted.tenant == "acme"
    assert "tenant" not in converted.body


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (pb.ChatCompletionRequest(messages=[pb.ChatMessage(role="user")]), "model"),
        (pb.ChatCompletionRequest(model="m"), "messages"),
        (
            pb.ChatCompletionRequest(model="m", messages=[pb.ChatMessage(text="x")]),
            "messages[0].role",
        ),
        (
            pb.ChatCompletionRequest(
                model="m", messages=[pb.ChatMessage(role="u")], temperature=math.nan
            ),
            "temperature",
        ),
        (
            pb.ChatCompletionRequest(
                model="m", messages=[pb.ChatMessage(role="u")], tools_json="{"
            ),
            "tools_json",
        ),
        (
            pb.ChatCompletionRequest(
                model="m", messages=[pb.ChatMessage(role="u")], tools_json='{"a": 1}'
            ),
            "tools_json",
        ),
        (
            pb.ChatCompletionRequest(
                model="m", messages=[pb.ChatMessage(role="u")], tool_choice_mode="sometimes"
            ),
            "tool_choice_mode",
        ),
        (
            pb.ChatCompletionRequest(
                model="m", messages=[pb.ChatMessage(role="u")], n=2, extra_json='{"n": 3}'
            ),
            "extra_json",
        ),
        (
            pb.ChatCompletionRequest(
                model="m",
                messages=[
                    pb.ChatMessage(role="u", parts=pb.ContentParts(parts=[pb.ContentPart()]))
                ],
            ),
            "messages[0].parts[0]",
        ),
    ],
)
def test_invalid_chat_requests_name_the_field(
    request_: pb.ChatCompletionRequest, field: str
) -> None:
    with pytest.raises(InvalidRequest) as caught:
        chat_request_to_body(request_)
    assert caught.value.field == field


def test_completion_without_prompt_is_invalid() -> None:
    with pytest.raises(InvalidRequest, match="prompt"):
        completion_request_to_body(pb.CompletionRequest(model="m"))


def test_engine_chunk_with_nulls_and_unknown_fields() -> None:
    data = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "delta": {"role": "assistant", "content": None, "tool_calls": None},
                "logprobs": None,
                "finish_reason": None,
                "stop_reason": None,
            }
        ],
        "usage": None,
    }
    chunk = chat_chunk_from_json(data)
    assert chunk.choices[0].delta.role == "assistant"
    assert not chunk.choices[0].delta.HasField("content")
    assert not chunk.HasField("usage")
    usage_only = chat_chunk_from_json(
        {
            "id": "x",
            "choices": [],
            "usage": {
                "prompt_tokens": 10,
                "completion_tokens": 2,
                "total_tokens": 12,
                "prompt_tokens_details": {"cached_tokens": 8},
            },
        }
    )
    assert usage_only.usage.cached_tokens == 8


@pytest.mark.parametrize(
    "data",
    [
        {"choices": [{"index": "zero"}]},
        {"choices": [{"delta": {"content": 5}}]},
        {"choices": "nope"},
        {"created": "yesterday"},
    ],
)
def test_malformed_chunks_are_reported(data: dict[str, object]) -> None:
    with pytest.raises(MalformedChunk):
        chat_chunk_from_json(data)
