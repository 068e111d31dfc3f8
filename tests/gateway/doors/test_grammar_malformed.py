"""Every upstream event shape, however wrong, is read without an exception by every grammar and
by what reads events after the grammar accepted them (the Messages translator, the gRPC chunk
converters): JSON that is not shaped like its format's events parses as malformed (None), the
same as non-JSON, so the relay ends the stream as ``upstream_malformed`` instead of crashing.

Shapes are generated from the keys the readers look at (``choices``, ``delta``, ``tool_calls``,
``type``, ``response``, ...) with any JSON value at any of them.
"""

from __future__ import annotations

import contextlib
from typing import Any

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gateway.doors.grammar import MESSAGES, OPENAI, RESPONSES, Grammar
from gateway.doors.messages.translate import ChatToMessages, message_from_chat
from gateway.grpc.chunk_convert import (
    MalformedChunk,
    chat_chunk_from_json,
    completion_chunk_from_json,
)
from gateway.sse import SseEvent

GRAMMARS = [OPENAI, RESPONSES, MESSAGES]
KEYS = st.sampled_from(
    [
        "choices",
        "delta",
        "text",
        "content",
        "tool_calls",
        "function",
        "arguments",
        "name",
        "index",
        "finish_reason",
        "stop_reason",
        "type",
        "response",
        "error",
        "message",
        "usage",
        "partial_json",
        "thinking",
        "reasoning_content",
        "refusal",
        "role",
        "completion_tokens",
        "prompt_tokens",
        "input_tokens",
        "output_tokens",
        "prompt_tokens_details",
        "cached_tokens",
        "logprobs",
        "id",
    ]
)
TYPES = st.sampled_from(
    [
        "response.output_text.delta",
        "response.completed",
        "response.failed",
        "error",
        "message_start",
        "message_delta",
        "message_stop",
        "content_block_delta",
    ]
)
LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=4),
    TYPES,
)
JSON = st.recursive(
    LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=12,
)
OBJECTS = st.dictionaries(KEYS, JSON, max_size=5)

# One malformed shape per way a reader used to trip (TypeError, AttributeError).
MALFORMED = [
    (OPENAI, {"choices": 5}),
    (OPENAI, {"choices": True}),
    (OPENAI, {"choices": "abc"}),
    (OPENAI, {"choices": {"delta": {"content": "x"}}}),
    (OPENAI, {"choices": [5]}),
    (OPENAI, {"choices": [{"delta": {"content": "x"}}, "trailing"]}),
    (OPENAI, {"choices": [{"delta": 3}]}),
    (OPENAI, {"choices": [{"delta": ["content"]}]}),
    (OPENAI, {"choices": [{"delta": {"tool_calls": 5}}]}),
    (OPENAI, {"choices": [{"delta": {"tool_calls": [7]}}]}),
    (OPENAI, {"choices": [{"delta": {"tool_calls": [{"function": "f"}]}}]}),
    (RESPONSES, {"type": ["response.completed"]}),
    (RESPONSES, {"type": {"a": 1}}),
    (RESPONSES, {"type": "response.failed", "response": 5}),
    (RESPONSES, {"type": "response.completed", "response": [1]}),
    (MESSAGES, {"type": "content_block_delta", "delta": 3}),
    (MESSAGES, {"type": "content_block_delta"}),
    (MESSAGES, {"type": "message_start", "message": [1]}),
]


def event_of(obj: Any) -> SseEvent:
    data = orjson.dumps(obj)
    return SseEvent(raw=b"data: " + data + b"\n\n", data=data)


def read_like_the_relay(grammar: Grammar, event: SseEvent) -> dict[str, Any] | None:
    """What the relay and the doors call for one event; raises only if a reader is unsafe."""
    plain = grammar.plain_data(event.data) if event.data is not None else None
    carries, obj = grammar.parse(event)
    if plain is not None:  # the fast path answers only for well-formed events, and the same
        assert obj is not None and plain == carries == grammar.counts_token(obj)
    if obj is None:
        return None
    grammar.error(obj)
    grammar.usage(obj)
    grammar.ends(event, obj)
    grammar.counts_token(obj)
    if grammar is OPENAI:  # what reads a chat/completions event after the grammar
        ChatToMessages("m", ["stop"]).encode(event)
        for convert in (chat_chunk_from_json, completion_chunk_from_json):
            with contextlib.suppress(MalformedChunk):  # its own, reported by the gRPC door
                convert(obj)
    return obj


@pytest.mark.parametrize(("grammar", "obj"), MALFORMED, ids=[repr(o) for _, o in MALFORMED])
def test_a_json_object_of_the_wrong_shape_is_malformed(grammar: Grammar, obj: Any) -> None:
    event = event_of(obj)
    assert grammar.parse(event) == (False, None)  # what the relay reads as upstream_malformed
    assert event.data is not None and grammar.plain_data(event.data) is None


@settings(max_examples=600)
@given(st.sampled_from(GRAMMARS), OBJECTS)
@example(OPENAI, {"choices": [{"delta": {"tool_calls": [{"index": "x", "function": {}}]}}]})
@example(OPENAI, {"choices": [{"delta": {"content": "x", "tool_calls": {"a": 1}}}]})
@example(OPENAI, {"choices": [{"delta": {}, "finish_reason": ["stop"]}]})
@example(RESPONSES, {"type": "response.failed", "response": {"error": 5}})
@example(MESSAGES, {"type": "message_start", "message": {"usage": 5}})
def test_no_event_shape_makes_a_reader_raise(grammar: Grammar, obj: dict[str, Any]) -> None:
    read_like_the_relay(grammar, event_of(obj))


@settings(max_examples=300)
@given(st.sampled_from(GRAMMARS), JSON)
def test_no_json_value_makes_a_reader_raise(grammar: Grammar, value: Any) -> None:
    read_like_the_relay(grammar, event_of(value))


def test_well_formed_events_still_read_as_before() -> None:
    token = {"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}]}
    call = {"index": 0, "id": "c1", "function": {"name": "f", "arguments": "{"}}
    tool = {"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}
    finish = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    usage_only = {"choices": [], "usage": {"completion_tokens": 3}}
    assert OPENAI.parse(event_of(token)) == (True, token)
    assert OPENAI.parse(event_of(tool)) == (True, tool)
    assert OPENAI.parse(event_of(finish)) == (True, finish)  # the first event, not a token
    assert not OPENAI.counts_token(finish)
    assert OPENAI.parse(event_of(usage_only)) == (False, usage_only)
    assert OPENAI.parse(event_of({"choices": None})) == (False, {"choices": None})
    delta = {"type": "response.output_text.delta", "delta": "x"}
    assert RESPONSES.parse(event_of(delta)) == (True, delta)
    untyped = {"sequence_number": 1}
    assert RESPONSES.parse(event_of(untyped)) == (False, untyped)
    block = {"type": "content_block_delta", "index": 0, "delta": {"text": "x"}}
    assert MESSAGES.parse(event_of(block)) == (True, block)
    ping = {"type": "ping"}
    assert MESSAGES.parse(event_of(ping)) == (False, ping)


@settings(max_examples=400)
@given(JSON)
@example({"choices": [{"message": {"content": "x"}, "finish_reason": ["stop"]}], "usage": 5})
@example({"choices": [{"message": {}}], "usage": {"prompt_tokens": "3", "completion_tokens": []}})
def test_a_whole_answer_the_grammar_accepts_translates_without_raising(value: Any) -> None:
    """What reads a non-streaming chat answer once the attempt accepted it (gateway/attempt.py
    checks ``Grammar.answer``): the Messages translation never raises on it."""
    body = orjson.dumps(value)
    if OPENAI.answer(body) is not None:
        message_from_chat(body, "m", ["stop"])


@pytest.mark.parametrize(
    "body",
    [b"[1]", b"5", b"not json", b'{"choices": 5}', b'{"choices": [5]}',
     b'{"choices": [{"message": 3}]}', b'{"choices": [{"message": {"tool_calls": [7]}}]}'],
)  # fmt: skip
def test_a_whole_answer_of_the_wrong_shape_is_refused(body: bytes) -> None:
    assert OPENAI.answer(body) is None
    assert RESPONSES.answer(b"[1]") is None and MESSAGES.answer(b"not json") is None


def test_well_formed_whole_answers_are_accepted() -> None:
    chat = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}]}
    embeddings = {"object": "list", "data": [{"embedding": [0.1]}]}
    answers: list[dict[str, Any]] = [chat, embeddings, {"choices": []}]
    for answer in answers:
        assert OPENAI.answer(orjson.dumps(answer)) == answer
    assert RESPONSES.answer(b'{"id": "r"}') == {"id": "r"} == MESSAGES.answer(b'{"id": "r"}')
