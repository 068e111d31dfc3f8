"""Anthropic Messages <-> chat completions, pure: request translation, whole bodies, and a
stream's chunks as Messages events (text then tools, several tools, stop sequences)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.doors.messages.request import messages_to_chat
from gateway.doors.messages.translate import ChatToMessages, message_from_chat
from gateway.errors import ApiError
from gateway.sse import SseSplitter


def _chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish, **extra}
    return b"data: " + orjson.dumps({"id": "c1", "choices": [choice]}) + b"\n\n"


def _events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for event in SseSplitter().feed(raw):
        name = event.raw.split(b"\n", 1)[0].removeprefix(b"event: ").decode()
        out.append((name, orjson.loads(event.data or b"{}")))
    return out


def test_request_translation_keeps_system_tools_results_and_stops() -> None:
    chat, send_as_chat = messages_to_chat(
        {
            "model": "m",
            "max_tokens": 10,
            "system": [{"type": "text", "text": "be brief"}],
            "stop_sequences": ["END"],
            "stream": True,
            "tools": [{"name": "f", "description": "d", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any"},
            "messages": [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "calling"},
                        {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
                    ],
                },
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}],
                },
            ],
        }
    )
    assert send_as_chat
    assert chat["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "calling",
            "tool_calls": [
                {"id": "t1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "t1", "content": "ok"},
    ]
    assert chat["stop"] == ["END"] and chat["tool_choice"] == "required"
    assert chat["stream_options"] == {"include_usage": True}
    function = chat["tools"][0]["function"]
    assert function == {"name": "f", "parameters": {"type": "object"}, "description": "d"}


@pytest.mark.parametrize(
    "body",
    [
        {"messages": [{"role": "user", "content": "hi"}]},  # no max_tokens
        {"max_tokens": 5, "messages": []},
        {"max_tokens": 5, "messages": [{"role": "system", "content": "x"}]},
    ],
)
def test_what_the_messages_api_refuses_is_a_400(body: dict[str, Any]) -> None:
    with pytest.raises(ApiError) as caught:
        messages_to_chat({"model": "m", **body})
    assert caught.value.status == 400


def test_stream_text_then_two_tools_then_usage() -> None:
    translator = ChatToMessages("m", [])
    raw = b"".join(
        [
            _chunk({"role": "assistant", "content": ""}),
            _chunk({"content": "Let me check"}),
            _chunk({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f", "arguments": '{"x"'}}]}),
            _chunk({"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}),
            _chunk({"tool_calls": [{"index": 1, "id": "b", "function": {"name": "g", "arguments": "{}"}}]}),
            _chunk({}, "tool_calls"),
            b'data: {"id":"c1","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":9}}\n\n',
            b"data: [DONE]\n\n",
        ]
    )  # fmt: skip
    out = b"".join(translator.encode(e) for e in SseSplitter().feed(raw))
    events = _events(out)
    names = [name for name, _ in events]
    assert names == [
        "message_start",
        "content_block_start", "content_block_delta",  # text
        "content_block_stop", "content_block_start", "content_block_delta", "content_block_delta",
        "content_block_stop", "content_block_start", "content_block_delta",  # tool g
        "content_block_stop", "message_delta", "message_stop",
    ]  # fmt: skip
    starts = [payload for name, payload in events if name == "content_block_start"]
    assert [s["index"] for s in starts] == [0, 1, 2]
    assert starts[1]["content_block"] == {"type": "tool_use", "id": "a", "name": "f", "input": {}}
    delta = events[-2][1]
    assert delta["delta"]["stop_reason"] == "tool_use"
    assert delta["usage"] == {"input_tokens": 7, "output_tokens": 9}


def test_stop_sequence_and_whole_bodies() -> None:
    translator = ChatToMessages("m", ["END"])
    raw = _chunk({"content": "x"}) + _chunk({}, "stop", stop_reason="END") + b"data: [DONE]\n\n"
    events = _events(b"".join(translator.encode(e) for e in SseSplitter().feed(raw)))
    assert events[-2][1]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "END"}
    body = {
        "id": "c9",
        "choices": [
            {
                "message": {
                    "content": None,
                    "tool_calls": [{"id": "t", "function": {"name": "f", "arguments": "{bad"}}],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4},
    }
    message = orjson.loads(message_from_chat(orjson.dumps(body), "m", []))
    assert message["id"] == "msg_c9" and message["stop_reason"] == "tool_use"
    assert message["content"] == [
        {"type": "tool_use", "id": "t", "name": "f", "input": {"arguments": "{bad"}}
    ]
    assert message["usage"] == {"input_tokens": 3, "output_tokens": 4}
