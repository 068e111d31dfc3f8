"""Token counts of one request: the server's ``usage`` when it sent one, else our estimate.

The estimate counts prompt tokens the way Meridian does (``routing.prefix``: canonical bytes / 4)
and output tokens as token-carrying chunks (one token per chunk, as vLLM and SGLang stream).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from routing.prefix import canonical_chat, canonical_completion, estimate_tokens


@dataclass(frozen=True)
class TokenCounts:
    prompt: int | None
    completion: int | None
    cached: int | None
    from_usage: bool


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def estimated_prompt_tokens(body: Mapping[str, Any]) -> int:
    if "messages" in body:
        return estimate_tokens(canonical_chat(body["messages"]))
    return estimate_tokens(canonical_completion(body.get("prompt")))


def token_counts(
    body: Mapping[str, Any], usage: Mapping[str, Any] | None, token_chunks: int
) -> TokenCounts:
    if not usage:
        return TokenCounts(estimated_prompt_tokens(body), token_chunks, None, from_usage=False)
    details = usage.get("prompt_tokens_details")
    cached = _int_or_none(details.get("cached_tokens")) if isinstance(details, Mapping) else None
    prompt = _int_or_none(usage.get("prompt_tokens"))
    completion = _int_or_none(usage.get("completion_tokens"))
    return TokenCounts(
        prompt if prompt is not None else estimated_prompt_tokens(body),
        completion if completion is not None else token_chunks,
        cached,
        from_usage=True,
    )
