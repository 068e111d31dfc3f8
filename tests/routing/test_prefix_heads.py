"""A remembered head chain (``block_hashes(..., shared_head=...)``) changes the work, never the
hashes: every prompt gets exactly the chain hashed from scratch, hit or miss, whatever tenant
or block size shares the head's bytes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import routing.prefix as prefix
from routing.prefix import block_hashes, canonical_chat, canonical_chat_head
from routing.profile import profile_from_chat


@settings(max_examples=200, deadline=None)
@given(
    head=st.binary(min_size=0, max_size=900),
    tails=st.lists(st.binary(min_size=0, max_size=400), min_size=1, max_size=3),
    cut=st.integers(min_value=0, max_value=1400),
    tenant=st.sampled_from(["default", "a", "b"]),
    block_tokens=st.sampled_from([1, 4, 16]),
)
def test_a_shared_head_hashes_as_from_scratch(
    head: bytes, tails: list[bytes], cut: int, tenant: str, block_tokens: int
) -> None:
    for tail in tails:  # the first prompt misses, the next ones hit the head's chain
        canonical = head + tail
        for shared in (len(head), cut):
            got = block_hashes(canonical, tenant, block_tokens, shared_head=shared)
            assert got == block_hashes(canonical, tenant, block_tokens)


def test_the_same_head_bytes_under_another_tenant_or_block_size_get_their_own_chain() -> None:
    head, tail = bytes(range(256)) * 4, b"question" * 40
    first = block_hashes(head + tail, "a", 16, shared_head=len(head))
    assert block_hashes(head + tail, "b", 16, shared_head=len(head)) == block_hashes(
        head + tail, "b", 16
    )
    assert block_hashes(head + tail, "a", 4, shared_head=len(head)) == block_hashes(
        head + tail, "a", 4
    )
    assert block_hashes(head + tail, "a", 16, shared_head=len(head)) == first


def test_heads_kept_are_bounded() -> None:
    for i in range(prefix._HEADS_KEPT + 5):
        head = i.to_bytes(4, "little") * 256
        block_hashes(head + b"tail" * 20, "bound", 16, shared_head=len(head))
    assert len(prefix._HEADS) == prefix._HEADS_KEPT


def test_the_head_is_the_tools_and_first_message_of_a_conversation() -> None:
    tools = [{"type": "function", "function": {"name": "f"}}]
    system = {"role": "system", "content": "You are terse. " * 30}
    user = {"role": "user", "content": "What is 2 + 2?"}
    for with_tools in (None, tools):
        canonical, head = canonical_chat_head([system, user], with_tools)
        assert canonical == canonical_chat([system, user], with_tools)
        assert head == len(canonical_chat([system], with_tools))
        assert canonical_chat_head([user], with_tools) == (canonical_chat([user], with_tools), 0)
    body = {"model": "m", "messages": [system, user]}
    profile = profile_from_chat(body, "t", block_tokens=4)
    assert profile.prefix_hashes == block_hashes(canonical_chat([system, user]), "t", 4)
