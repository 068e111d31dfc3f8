"""Which relayed stream events carry a generated token, for every engine's chunk shapes.

An event can *end the wait for the first token* without carrying one: a finish-only chunk
(``"delta": {}`` with a ``finish_reason``, llama.cpp's and vLLM's last chunk) is what an empty
generation sends first. Such an event still starts the stream, but it is not a token: counting
it made ``output_tokens`` one too many and added a ~0 ms gap to the inter-token statistics.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_DELTA_OUTPUT_KEYS = ("content", "tool_calls", "reasoning_content", "function_call", "refusal")


def carries_token(obj: Mapping[str, Any] | None) -> bool:
    """Whether a chunk (chat or completions) carries generated output, not just a finish,
    a role announcement or usage."""
    if obj is None:
        return False
    for choice in obj.get("choices") or ():
        if not isinstance(choice, Mapping):
            continue
        if choice.get("text"):
            return True
        delta = choice.get("delta")
        if isinstance(delta, Mapping) and any(delta.get(key) for key in _DELTA_OUTPUT_KEYS):
            return True
    return False
