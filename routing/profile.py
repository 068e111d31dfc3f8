"""Build a ``RequestProfile`` from an OpenAI-style request body, without keeping prompt text."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from routing.errors import ErrorKind, RoutingError
from routing.prefix import (
    DEFAULT_BLOCK_TOKENS,
    block_hashes,
    canonical_chat_head,
    canonical_completion,
    estimate_tokens,
)
from routing.types import LatencyClass, RequestProfile

# A request asking for this many output tokens or more is judged on end-to-end time.
DEFAULT_LONG_FORM_MIN_TOKENS = 1024


def _model(body: Mapping[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise RoutingError(ErrorKind.BAD_REQUEST, "request body needs a non-empty string 'model'")
    return model


def _max_tokens(body: Mapping[str, Any]) -> int | None:
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise RoutingError(ErrorKind.BAD_REQUEST, f"'{key}' must be a non-negative integer")
        return value
    return None


def _latency_class(
    max_tokens: int | None, requested: LatencyClass | None, long_form_min_tokens: int
) -> LatencyClass:
    if requested is not None:
        return requested
    if max_tokens is not None and max_tokens >= long_form_min_tokens:
        return LatencyClass.LONG_FORM
    return LatencyClass.INTERACTIVE


def _profile(
    body: Mapping[str, Any],
    canonical: bytes,
    tenant: str,
    origin: str | None,
    block_tokens: int,
    latency_class: LatencyClass | None,
    long_form_min_tokens: int,
    allowed_regions: frozenset[str] | None,
    deadline_s: float | None,
    shared_head: int = 0,
    api: str | None = None,
) -> RequestProfile:
    max_tokens = _max_tokens(body)
    return RequestProfile(
        model=_model(body),
        tenant=tenant,
        origin=origin,
        prompt_tokens=estimate_tokens(canonical),
        prefix_hashes=block_hashes(canonical, tenant, block_tokens, shared_head=shared_head),
        max_tokens=max_tokens,
        latency_class=_latency_class(max_tokens, latency_class, long_form_min_tokens),
        deadline_s=deadline_s,
        allowed_regions=allowed_regions,
        block_tokens=block_tokens,
        api=api,
    )


def profile_from_chat(
    body: Mapping[str, Any],
    tenant: str = "default",
    origin: str | None = None,
    block_tokens: int = DEFAULT_BLOCK_TOKENS,
    *,
    latency_class: LatencyClass | None = None,
    long_form_min_tokens: int = DEFAULT_LONG_FORM_MIN_TOKENS,
    allowed_regions: frozenset[str] | None = None,
    deadline_s: float | None = None,
    api: str | None = None,
) -> RequestProfile:
    """Profile of a ``/v1/chat/completions`` body. ``latency_class`` forces the class; ``api``
    is the door it came in by (:attr:`RequestProfile.api`)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not all(isinstance(m, Mapping) for m in messages):
        raise RoutingError(ErrorKind.BAD_REQUEST, "'messages' must be a list of objects")
    canonical, head = canonical_chat_head(messages, body.get("tools"))
    return _profile(
        body,
        canonical,
        tenant,
        origin,
        block_tokens,
        latency_class,
        long_form_min_tokens,
        allowed_regions,
        deadline_s,
        head,
        api,
    )


def profile_from_completion(
    body: Mapping[str, Any],
    tenant: str = "default",
    origin: str | None = None,
    block_tokens: int = DEFAULT_BLOCK_TOKENS,
    *,
    latency_class: LatencyClass | None = None,
    long_form_min_tokens: int = DEFAULT_LONG_FORM_MIN_TOKENS,
    allowed_regions: frozenset[str] | None = None,
    deadline_s: float | None = None,
    api: str | None = None,
) -> RequestProfile:
    """Profile of a ``/v1/completions`` body (prompt as text, token ids, or a list of them)."""
    if "prompt" not in body:
        raise RoutingError(ErrorKind.BAD_REQUEST, "completion request needs 'prompt'")
    canonical = canonical_completion(body["prompt"])
    return _profile(
        body,
        canonical,
        tenant,
        origin,
        block_tokens,
        latency_class,
        long_form_min_tokens,
        allowed_regions,
        deadline_s,
        api=api,
    )
