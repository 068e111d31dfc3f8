"""Canonical prompt bytes: what the chat template would see, in order, without ambiguity."""

from __future__ import annotations

from typing import Any

from routing.prefix import block_hashes, canonical_chat, canonical_completion, estimate_tokens


def test_chat_renders_tools_then_roles_and_contents_in_order() -> None:
    tools = [{"type": "function", "function": {"name": "f"}}]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "be brief"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "hi "},
                {"type": "image_url", "image_url": {"url": "u"}},
            ],
        },
        {"role": "assistant", "content": None, "tool_calls": [{"id": "1"}]},
        {"role": "tool", "content": {"k": 1}},
    ]
    out = canonical_chat(messages, tools)
    assert out.startswith(b"tools\x1f") and out.index(b"be brief") < out.index(b"hi ")
    assert b'"image_url"' in out and b'"id":"1"' in out and b'{"k":1}' in out
    assert canonical_chat(messages) != out


def test_completion_prompts_of_every_shape() -> None:
    assert canonical_completion("abc") == b"abc"
    assert canonical_completion([1, 2]) == (1).to_bytes(4, "little") + (2).to_bytes(4, "little")
    assert canonical_completion(["ab", "cd"]) == b"abcd"
    assert canonical_completion(None) == b""
    assert estimate_tokens(b"12345") == 2


def test_shared_prefix_shares_leading_hashes_only() -> None:
    a = block_hashes(b"x" * 128 + b"a" * 64, "t", 16)
    b = block_hashes(b"x" * 128 + b"b" * 64, "t", 16)
    assert a[:2] == b[:2] and a[2] != b[2] and len(block_hashes(b"x" * 63, "t", 16)) == 0
