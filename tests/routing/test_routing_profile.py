from __future__ import annotations

from typing import Any

import pytest

from routing.errors import ErrorKind, RoutingError
from routing.prefix import block_hashes, canonical_chat
from routing.profile import profile_from_chat, profile_from_completion
from routing.types import LatencyClass

CHAT: dict[str, Any] = {
    "model": "m",
    "messages": [{"role": "system", "content": "s" * 400}, {"role": "user", "content": "q" * 200}],
}


def test_chat_profile_carries_tokens_hashes_and_no_text() -> None:
    profile = profile_from_chat(CHAT, tenant="t1", origin="eu", block_tokens=16)
    canonical = canonical_chat(CHAT["messages"])
    assert profile.model == "m" and profile.tenant == "t1" and profile.origin == "eu"
    assert profile.prompt_tokens == -(-len(canonical) // 4)
    assert profile.prefix_hashes == block_hashes(canonical, "t1", 16)
    assert profile.latency_class is LatencyClass.INTERACTIVE
    assert "sss" not in repr(profile)


def test_tenants_never_share_hashes() -> None:
    assert (
        profile_from_chat(CHAT, "a").prefix_hashes[0]
        != profile_from_chat(CHAT, "b").prefix_hashes[0]
    )


@pytest.mark.parametrize(
    ("extra", "forced", "expected"),
    [
        ({"max_tokens": 2048}, None, LatencyClass.LONG_FORM),
        ({"max_completion_tokens": 10, "max_tokens": 5000}, None, LatencyClass.INTERACTIVE),
        ({"max_tokens": 10}, LatencyClass.LONG_FORM, LatencyClass.LONG_FORM),
        ({}, None, LatencyClass.INTERACTIVE),
    ],
)
def test_latency_class(
    extra: dict[str, int], forced: LatencyClass | None, expected: LatencyClass
) -> None:
    profile = profile_from_chat({**CHAT, **extra}, latency_class=forced)
    assert profile.latency_class is expected


def test_completion_profile_and_options() -> None:
    profile = profile_from_completion(
        {"model": "m", "prompt": "x" * 256, "max_tokens": 7},
        allowed_regions=frozenset({"eu"}),
        deadline_s=3.0,
        block_tokens=32,
    )
    assert profile.prompt_tokens == 64 and len(profile.prefix_hashes) == 2
    assert profile.max_tokens == 7 and profile.allowed_regions == frozenset({"eu"})
    assert profile.deadline_s == 3.0


@pytest.mark.parametrize(
    "body",
    [
        {"messages": []},
        {"model": "", "messages": []},
        {"model": "m", "messages": "hi"},
        {"model": "m", "messages": ["hi"]},
        {"model": "m", "messages": [], "max_tokens": -1},
        {"model": "m", "messages": [], "max_tokens": True},
    ],
)
def test_bad_chat_bodies_are_errors_with_a_kind(body: dict[str, object]) -> None:
    with pytest.raises(RoutingError) as info:
        profile_from_chat(body)
    assert info.value.kind is ErrorKind.BAD_REQUEST


def test_completion_without_prompt_is_an_error() -> None:
    with pytest.raises(RoutingError, match="prompt"):
        profile_from_completion({"model": "m"})
