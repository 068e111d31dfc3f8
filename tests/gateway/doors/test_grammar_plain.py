"""The byte pre-check (``Grammar.plain_data``) answers exactly as the full path does.

The relay skips the error/usage/finish walk of events whose bytes cannot carry any of them.
For every event it does not refuse, the full path (``parse``, ``error``, ``usage``, ``ends``,
``counts_token``) must say: no error, no usage, no end, and "a token" exactly when the fast
path says so. Events are generated as real upstreams write them (compact orjson, spaced
``json.dumps``, ASCII-escaped keys and text) plus arbitrary bytes.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gateway.doors.grammar import MESSAGES, OPENAI, RESPONSES
from gateway.sse import SseEvent

TEXT = st.sampled_from(["", "tok", " hello", "error", "usage", "finish_reason", 'a"b', "é", "\\u"])
NULLABLE = st.one_of(st.none(), st.sampled_from(["stop", "length", "tool_calls"]))


@st.composite
def chunks(draw: st.DrawFn) -> dict[str, Any]:
    delta: dict[str, Any] = {}
    for key in draw(st.sets(st.sampled_from(["content", "role", "reasoning_content", "refusal"]))):
        delta[key] = draw(TEXT)
    if draw(st.booleans()):
        delta["tool_calls"] = draw(st.sampled_from([[], [{"index": 0, "function": {}}]]))
    choice: dict[str, Any] = {"index": 0}
    if draw(st.booleans()):
        choice["delta"] = delta
    else:
        choice["text"] = draw(TEXT)
    if draw(st.booleans()):
        choice["finish_reason"] = draw(NULLABLE)
    if draw(st.booleans()):
        choice["logprobs"] = draw(st.sampled_from([None, {"content": [{"token": "x"}]}]))
    obj: dict[str, Any] = {"id": "c", "object": "chat.completion.chunk"}
    obj["choices"] = draw(st.lists(st.just(choice), max_size=2))
    if draw(st.booleans()):
        obj["usage"] = draw(st.sampled_from([None, {"completion_tokens": 3, "prompt_tokens": 5}]))
    if draw(st.integers(0, 9)) == 0:
        obj["error"] = draw(st.sampled_from([None, "boom", {"message": "oom"}]))
    return obj


def serialised(obj: dict[str, Any], how: str) -> bytes:
    if how == "compact":
        return orjson.dumps(obj)
    if how == "spaced":
        return json.dumps(obj).encode()
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=True).encode()


DATA = st.one_of(
    st.builds(serialised, chunks(), st.sampled_from(["compact", "spaced", "ascii"])),
    st.binary(max_size=40),
    st.sampled_from([b"[DONE]", b"{this is not json", b"[1, 2]", b'{"choices": null}']),
)


def agrees_with_full_path(data: bytes) -> bool | None:
    event = SseEvent(raw=b"data: " + data + b"\n\n", data=data)
    plain = OPENAI.plain_data(data)
    if plain is not None:
        carries, obj = OPENAI.parse(event)
        assert obj is not None  # valid JSON object: never "malformed"
        assert OPENAI.error(obj) is None
        assert OPENAI.usage(obj) is None
        assert not OPENAI.ends(event, obj)
        assert carries == plain == OPENAI.counts_token(obj)
    return plain


@settings(max_examples=400, derandomize=True, deadline=None)
@given(DATA)
@example(b'{"choices":[{"index":0,"delta":{"content":"tok"},"finish_reason":null}]}')
@example(b'{"choices":[{"index":0,"delta":{"content":""},"finish_reason":"stop"}]}')
@example(b'{"choices":[],"usage":{"completion_tokens":3}}')
@example(b'{"\\u0065rror":{"message":"hidden behind an escape"}}')
@example(b'{"choices":[{"finish_reason":null,"finish_reason":"stop"}]}')
@example(b'{"choices":[{"delta":{"content":"x"}}],"x\\"finish_reason":null}')
# The one-choice shortcut past chunk_output's walk: whatever else a content delta holds, the
# answer is the walk's (malformed tool calls, a second choice, a delta or choice not an object).
@example(b'{"choices":[{"delta":{"content":"x","tool_calls":[1]}}]}')
@example(b'{"choices":[{"delta":{"content":"x","tool_calls":[{"function":3}]}}]}')
@example(b'{"choices":[{"delta":{"content":"x"}},{"delta":5}]}')
@example(b'{"choices":[{"delta":{"content":"x"}},"y"]}')
@example(b'{"choices":[{"delta":[{"content":"x"}]}]}')
@example(b'{"choices":["x"]}')
@example(b'{"choices":[{"delta":{"content":""},"text":"t"}]}')
@example(b'{"choices":[{"delta":{"content":"x","tool_calls":[]}}]}')
# The parsed object's shortcut: a usage (of any type) or an error key (even null, or behind an
# escape) is never a plain token; a text choice is one, and so is output beside a finish.
@example(b'{"choices":[{"delta":{"content":"x"},"finish_reason":"stop"}]}')
@example(b'{"choices":[{"delta":{"content":"x"}}],"usage":{"completion_tokens":1}}')
@example(b'{"choices":[{"delta":{"content":"x"}}],"usage":5}')
@example(b'{"choices":[{"delta":{"content":"x"}}],"error":null}')
@example(b'{"choices":[{"delta":{"content":"x"}}],"\\u0065rror":null}')
@example(b'{"choices":[{"text":"t","delta":null}]}')
@example(b'{"choices":[{"text":"t","delta":{}}]}')
@example(b'{"choices":[{"text":"","finish_reason":null}]}')
def test_the_pre_check_never_disagrees_with_the_full_path(data: bytes) -> None:
    agrees_with_full_path(data)


def test_the_chat_token_chunks_real_engines_send_take_the_fast_path() -> None:
    vllm = (
        b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
        b'"choices":[{"index":0,"delta":{"content":" the"},"logprobs":null,'
        b'"finish_reason":null}]}'
    )
    openai = b'{"id":"c","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}],"usage":null}'
    completions = b'{"id":"c","choices":[{"index":0,"text":" the","finish_reason":null}]}'
    role_only = b'{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}'
    assert agrees_with_full_path(vllm) is True
    assert agrees_with_full_path(openai) is True
    assert agrees_with_full_path(completions) is True
    assert agrees_with_full_path(role_only) is False  # not a token, and still not parsed twice


def test_events_that_carry_more_than_a_token_take_the_full_path() -> None:
    for data in (
        b'{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}',
        b'{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3}}',
        b'{"error":{"message":"engine OOM"}}',
        b"{this is not json",
        b"[DONE]",
    ):
        assert agrees_with_full_path(data) is None


def test_typed_event_grammars_always_take_the_full_path() -> None:
    data = b'{"type":"response.output_text.delta","delta":"x"}'
    assert RESPONSES.plain_data(data) is None
    assert MESSAGES.plain_data(data) is None
