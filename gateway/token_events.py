"""Which relayed stream events carry a generated token, for every engine's chunk shapes.

An event can *end the wait for the first token* without carrying one: a finish-only chunk
(``"delta": {}`` with a ``finish_reason``, llama.cpp's and vLLM's last chunk) is what an empty
generation sends first. Such an event still starts the stream, but it is not a token: counting
it made ``output_tokens`` one too many and added a ~0 ms gap to the inter-token statistics.

A JSON object that is not shaped like a chunk (``"choices": 5``, a choice or a ``delta`` that
is not an object, ``tool_calls`` that are not a list of objects) is *malformed*, not "no
token": :func:`chunk_output` says None, and the relay ends the stream as
``upstream_malformed`` instead of letting a door's translator trip over it. The checks are
``isinstance`` tests on what the walk reads anyway, so a well-formed event costs the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_DELTA_OUTPUT_KEYS = ("content", "tool_calls", "reasoning_content", "function_call", "refusal")


def chunk_output(obj: Mapping[str, Any]) -> bool | None:
    """Whether a chunk (chat or completions) carries generated output, not just a finish, a
    role announcement or usage; None when it is not shaped like a chunk at all. Every choice
    is checked (a translator reads them all), not only those before the first token."""
    choices = obj.get("choices")
    if not isinstance(choices, list):
        return False if choices is None else None
    output = False
    for choice in choices:
        if not isinstance(choice, dict):
            return None
        if choice.get("text"):
            output = True
        delta = choice.get("delta")
        if delta is None:
            continue
        if not isinstance(delta, dict):
            return None
        for key in _DELTA_OUTPUT_KEYS:
            if delta.get(key):
                output = True
                break
        calls = delta.get("tool_calls")
        if calls and not _tool_calls_shaped(calls):  # empty or null: nothing to read
            return None
    return output


def choice_index(obj: Mapping[str, Any] | None) -> int:
    """The index of a chunk's (first) choice: which of a request's ``n`` choices a token
    belongs to. 0 for a chunk without one (a wire format with a single answer)."""
    choices = obj.get("choices") if obj is not None else None
    if type(choices) is list and choices and type(choices[0]) is dict:
        index = choices[0].get("index")
        if type(index) is int:
            return index
    return 0


def answer_shaped(obj: Mapping[str, Any]) -> bool:
    """Whether a non-streaming answer (chat or completions) is shaped like one: ``choices``
    absent or a list of objects, each ``message`` absent or an object whose ``tool_calls`` are
    a list of objects. What reads a whole answer (usage, the Messages translation) reads only
    what this checked."""
    choices = obj.get("choices")
    if choices is None:
        return True  # embeddings and the like: no choices to read
    if not isinstance(choices, list):
        return False
    for choice in choices:
        if not isinstance(choice, dict):
            return False
        message = choice.get("message")
        if message is None:
            continue
        if not isinstance(message, dict):
            return False
        calls = message.get("tool_calls")
        if calls and not _tool_calls_shaped(calls):
            return False
    return True


def _tool_calls_shaped(calls: object) -> bool:
    """A list of objects whose ``function``, when present, is an object."""
    if not isinstance(calls, list):
        return False
    for call in calls:
        if not isinstance(call, dict):
            return False
        function = call.get("function")
        if function is not None and not isinstance(function, dict):
            return False
    return True


def carries_token(obj: Mapping[str, Any] | None) -> bool:
    """:func:`chunk_output` as a yes/no: a malformed chunk carries no token."""
    return obj is not None and chunk_output(obj) is True
