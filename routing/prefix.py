"""Prompt canonicalization and chained prefix-block hashing.

A serving engine caches KV blocks of a fixed number of tokens, each keyed by a hash that covers
every token before it. Meridian cannot run every model's tokenizer on the request path, so it
approximates: the canonical prompt is the UTF-8 text the chat template would see, and a token is
``BYTES_PER_TOKEN`` bytes of it (about right for English with BPE tokenizers). Block boundaries
then fall at the same byte offsets for every request that shares a prefix, which is all that
affinity needs. The emulated engine uses the same functions, so its cache and the router's index
agree on what a block is.

Hashes are xxh3-64 chained through the seed, so ``hashes[i]`` depends on blocks ``0..i`` and on
the tenant key; they are stable across processes (replicas share them through Redis).

Hashing a block is a C call per 64 bytes, and a 4,000-token prompt's 250 calls were a fifth of
the routing decision. Most prompts open with a head many share (tools and a system prompt), so
the chain of a head's full blocks is remembered (``shared_head``), keyed by a 128-bit hash of
its bytes with the tenant key and block size: a hit hashes only what follows. The hashes are
the same either way; only the work differs.
"""

from __future__ import annotations

import functools
import struct
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

import orjson
import xxhash

BYTES_PER_TOKEN = 4
DEFAULT_BLOCK_TOKENS = 16

_ROLE_OPEN = b"\x1e"  # record separator: cannot be confused with message text boundaries
_ROLE_CLOSE = b"\x1f"


def _content_bytes(content: Any) -> bytes:
    if content is None:
        return b""
    if isinstance(content, str):
        return content.encode()
    if isinstance(content, list):
        parts: list[bytes] = []
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "text":
                parts.append(str(part.get("text", "")).encode())
            else:
                # Images, audio, ...: their identity matters for caching, their size is unknown.
                parts.append(orjson.dumps(part, option=orjson.OPT_SORT_KEYS))
        return b"".join(parts)
    return orjson.dumps(content, option=orjson.OPT_SORT_KEYS)


def canonical_chat(messages: Iterable[Mapping[str, Any]], tools: Any = None) -> bytes:
    """The bytes a chat template would render, in order: tools first, then each message."""
    return canonical_chat_head(messages, tools)[0]


def canonical_chat_head(
    messages: Iterable[Mapping[str, Any]], tools: Any = None
) -> tuple[bytes, int]:
    """``canonical_chat`` and the length of its head: the tools and the first message (a
    system prompt, usually), the part requests share most (``block_hashes``' ``shared_head``);
    0 with one message (then nothing says the prompt shares a head with others)."""
    chunks: list[bytes] = []
    if tools:
        chunks.append(b"tools" + _ROLE_CLOSE + orjson.dumps(tools, option=orjson.OPT_SORT_KEYS))
    head = 0
    for i, message in enumerate(messages):
        if i == 1:
            head = sum(map(len, chunks))
        chunks.append(_ROLE_OPEN + str(message.get("role", "")).encode() + _ROLE_CLOSE)
        chunks.append(_content_bytes(message.get("content")))
        if message.get("tool_calls"):
            chunks.append(orjson.dumps(message["tool_calls"], option=orjson.OPT_SORT_KEYS))
    return b"".join(chunks), head


def canonical_completion(prompt: Any) -> bytes:
    if isinstance(prompt, str):
        return prompt.encode()
    if isinstance(prompt, list):
        if all(isinstance(p, int) for p in prompt):  # already token ids
            return b"".join(int(p).to_bytes(BYTES_PER_TOKEN, "little", signed=True) for p in prompt)
        return b"".join(canonical_completion(p) for p in prompt)
    return b""


def estimate_tokens(canonical: bytes) -> int:
    return -(-len(canonical) // BYTES_PER_TOKEN)


def tenant_seed(tenant: str) -> int:
    return xxhash.xxh3_64_intdigest(tenant.encode())


def block_hashes(
    canonical: bytes,
    tenant: str = "default",
    block_tokens: int = DEFAULT_BLOCK_TOKENS,
    *,
    shared_head: int = 0,
) -> tuple[int, ...]:
    """Chained hashes of every *full* block of the prompt (engines cache full blocks only).
    ``shared_head``: the length of a leading part other prompts are likely to share (see
    ``canonical_chat_head``); the chain of its full blocks is remembered and reused."""
    block_bytes = block_tokens * BYTES_PER_TOKEN
    seed = tenant_seed(tenant)
    full = len(canonical) - len(canonical) % block_bytes
    head = min(shared_head, full) // block_bytes * block_bytes
    if head < _MIN_HEAD_BLOCKS * block_bytes:
        return _chain(canonical[:full], seed, block_bytes)
    key = (seed, block_bytes, head, xxhash.xxh3_128_intdigest(memoryview(canonical)[:head]))
    chain = _HEADS.get(key)
    if chain is None:
        chain = _HEADS[key] = _chain(canonical[:head], seed, block_bytes)
        if len(_HEADS) > _HEADS_KEPT:
            _HEADS.popitem(last=False)
    else:
        _HEADS.move_to_end(key)
    return chain + _chain(canonical[head:full], chain[-1], block_bytes)


def _chain(data: bytes, seed: int, block_bytes: int) -> tuple[int, ...]:
    """The chained hashes of ``data``'s blocks (a whole number of them), from ``seed``."""
    hash_block = xxhash.xxh3_64_intdigest
    # This loop is most of the routing decision's cost for long prompts: ``iter_unpack`` cuts
    # the blocks in C, and the comprehension avoids a method call per block (~25% cheaper
    # than slicing in a loop; a memoryview slice is slower still).
    blocks = _block_struct(block_bytes).iter_unpack(data)
    return tuple([seed := hash_block(block, seed) for (block,) in blocks])


# Heads shorter than this are hashed in place (the 128-bit key would cost about as much).
_MIN_HEAD_BLOCKS = 4
# Chains of heads kept, least recently used dropped first: a few KB each (one pointer and one
# int a block), so ~10 MB at most for 4,000-token heads.
_HEADS_KEPT = 512
_HEADS: OrderedDict[tuple[int, int, int, int], tuple[int, ...]] = OrderedDict()


@functools.cache
def _block_struct(block_bytes: int) -> struct.Struct:
    return struct.Struct(f"{block_bytes}s")
