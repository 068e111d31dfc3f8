"""What an upstream's SSE stream says, per wire format: which event is the first output, which
carries a token, which ends the stream, which is an error, where the usage is.

The relay core (gateway/attempt.py, gateway/stream.py) reads every upstream stream through
one of these, so the first-event-before-headers rule, retries before it, the inter-token
timeout and the timing summary work the same for chat completions, the Responses API and
Anthropic Messages. A grammar is pure: it looks at parsed events, never at a socket.

An event that parses as JSON but is not shaped like its format's events (``"choices": 5``, a
Messages ``delta`` that is not an object) parses as None, exactly like a non-JSON one, so the
relay ends the stream as ``upstream_malformed`` (or, before the first token, tries the next
backend) and nothing after :meth:`Grammar.parse` reads a shape it did not check. A whole
(non-streaming) answer is checked the same way, by :meth:`Grammar.answer`, before the
attempt counts as answered.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.sse import SseEvent
from gateway.token_events import answer_shaped, chunk_output

Obj = dict[str, Any]


def event_object(event: SseEvent) -> Obj | None:
    """The event's JSON object; None for a comment, ``[DONE]``, non-JSON or a non-object."""
    if event.data is None or event.is_done:
        return None
    return _loads_object(event.data)


def _loads_object(body: bytes) -> Obj | None:
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


@dataclass(frozen=True, slots=True)
class Grammar:
    """Chat and text completions (OpenAI): ``data: [DONE]`` ends the stream."""

    name: str = "openai"

    def parse(self, event: SseEvent) -> tuple[bool, Obj | None]:
        """(whether the event ends the wait for the first token, its JSON object); the object
        is None for a data event that is not JSON or not shaped like this format's events."""
        return self.parse_object(event, event_object(event))

    def parse_object(self, event: SseEvent, obj: Obj | None) -> tuple[bool, Obj | None]:
        """:meth:`parse` for an event whose :func:`event_object` is ``obj`` (parsed once)."""
        if event.is_done:
            return True, None
        if obj is None:
            return False, None
        output = self.output(obj)
        if output is None:
            return False, None
        if output or self.error(obj) is not None or self.ends(event, obj):
            return True, obj
        return self._finishes(obj), obj

    def output(self, obj: Obj) -> bool | None:
        """Whether the event carries generated output; None when it is malformed."""
        return chunk_output(obj)

    def answer(self, body: bytes) -> Obj | None:
        """A non-streaming answer, parsed; None unless it is a JSON object shaped like this
        format's answers."""
        obj = _loads_object(body)
        return obj if obj is not None and self._answer_shaped(obj) else None

    def _answer_shaped(self, obj: Obj) -> bool:
        return answer_shaped(obj)

    def plain_data(self, data: bytes) -> bool | None:
        """For a data event that carries no error, usage or finish: whether it counts as a
        token, with only the JSON checked. None: the event needs :meth:`parse` and the rest.
        Equal to the full path by construction, checked against it in
        tests/gateway/doors/test_grammar_plain.py. It takes the data bytes, not an
        :class:`SseEvent`: the push sink asks before it builds one."""
        if data[:1] != b"{":
            return None  # never a chunk ([DONE], or malformed: the full path says which)
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            return None  # malformed: the full path says so
        if type(obj) is not dict:
            return None
        return self.plain(obj, data)

    def plain(self, obj: Obj, data: bytes) -> bool | None:
        """:meth:`plain_data` for data already parsed to the object ``obj``."""
        # An engine's usual token, read off the parsed object as the full path would: one
        # choice with text or a content delta (no tool calls), no usage or error key. A finish
        # beside output changes nothing there (it only starts a stream that has no token yet).
        if "error" not in obj and obj.get("usage") is None:
            choices = obj.get("choices")
            if type(choices) is list and len(choices) == 1:
                choice = choices[0]
                if type(choice) is dict:
                    delta = choice.get("delta")
                    if delta is None:
                        if choice.get("text"):
                            return True
                    elif (
                        type(delta) is dict and delta.get("content") and not delta.get("tool_calls")
                    ):
                        return True
        # Anything else, from its bytes: every quoted "usage" / "finish_reason" followed by
        # :null (compact JSON), no "error" and no \u escape that could hide one. A string value
        # cannot contain an unescaped quote, so those bytes can only be that key or a string
        # equal to its name; both send the event down the full path.
        if (
            b"\\u" in data
            or b'"error"' in data
            or data.count(b'"usage"') != data.count(b'"usage":null')
            or data.count(b'"finish_reason"') != data.count(b'"finish_reason":null')
        ):
            return None
        return chunk_output(obj)

    def _finishes(self, obj: Obj) -> bool:
        choices = obj.get("choices") or ()
        return any(isinstance(c, dict) and c.get("finish_reason") is not None for c in choices)

    def counts_token(self, obj: Obj) -> bool:
        return self.output(obj) is True

    def ends(self, event: SseEvent, obj: Obj | None) -> bool:
        return event.is_done

    def error(self, obj: Obj) -> str | None:
        if "error" not in obj:
            return None
        error = obj.get("error")
        message = error.get("message") if isinstance(error, dict) else error
        return str(message)[:500]

    def usage(self, obj: Obj) -> Obj | None:
        """OpenAI-shaped usage (``completion_tokens``, ``prompt_tokens``) if the event has it."""
        usage = obj.get("usage")
        return usage if isinstance(usage, dict) else None


_RESPONSES_TOKENS = frozenset(
    {
        "response.output_text.delta",
        "response.refusal.delta",
        "response.function_call_arguments.delta",
        "response.reasoning_text.delta",
        "response.reasoning_summary_text.delta",
    }
)
_RESPONSES_ENDS = frozenset({"response.completed", "response.incomplete", "response.failed"})


@dataclass(frozen=True, slots=True)
class ResponsesGrammar(Grammar):
    """The Responses API: typed events; ``response.completed`` (or incomplete/failed) ends it."""

    name: str = "responses"

    def plain_data(self, data: bytes) -> bool | None:
        return None  # typed events: the full path (they are not the chat hot path)

    def plain(self, obj: Obj, data: bytes) -> bool | None:
        return None  # the same: the full path

    def _finishes(self, obj: Obj) -> bool:
        return False

    def _answer_shaped(self, obj: Obj) -> bool:
        return True  # relayed as it came (the model renamed): a JSON object is all it needs

    def output(self, obj: Obj) -> bool | None:
        kind = obj.get("type")
        if not isinstance(kind, str):
            return False if kind is None else None
        response = obj.get("response")
        if response is not None and not isinstance(response, dict):
            return None
        return kind in _RESPONSES_TOKENS and bool(obj.get("delta"))

    def ends(self, event: SseEvent, obj: Obj | None) -> bool:
        return obj is not None and obj.get("type") in _RESPONSES_ENDS

    def error(self, obj: Obj) -> str | None:
        kind = obj.get("type")
        if kind == "error":
            return str(obj.get("message") or obj.get("code") or "error")[:500]
        if kind == "response.failed":
            error = (obj.get("response") or {}).get("error") or {}  # a dict: parse checked
            return str(error.get("message") if isinstance(error, dict) else error)[:500]
        return None

    def usage(self, obj: Obj) -> Obj | None:
        response = obj.get("response")
        usage = response.get("usage") if isinstance(response, dict) else None
        return _openai_usage(usage, "input_tokens", "output_tokens")


@dataclass(frozen=True, slots=True)
class MessagesGrammar(Grammar):
    """Anthropic Messages: ``message_stop`` ends it; ``error`` events carry ``error.message``."""

    name: str = "messages"

    def plain_data(self, data: bytes) -> bool | None:
        return None  # typed events: the full path (they are not the chat hot path)

    def plain(self, obj: Obj, data: bytes) -> bool | None:
        return None  # the same: the full path

    def _finishes(self, obj: Obj) -> bool:
        return obj.get("type") == "message_delta"

    def _answer_shaped(self, obj: Obj) -> bool:
        return True  # relayed as it came (the model renamed): a JSON object is all it needs

    def output(self, obj: Obj) -> bool | None:
        kind = obj.get("type")
        if kind == "content_block_delta":
            delta = obj.get("delta")
            if not isinstance(delta, dict):
                return None
            return bool(delta.get("text") or delta.get("partial_json") or delta.get("thinking"))
        if kind == "message_start" and not isinstance(obj.get("message") or {}, dict):
            return None
        return False

    def ends(self, event: SseEvent, obj: Obj | None) -> bool:
        return obj is not None and obj.get("type") == "message_stop"

    def error(self, obj: Obj) -> str | None:
        if obj.get("type") != "error":
            return None
        error = obj.get("error")
        return str(error.get("message") if isinstance(error, dict) else error)[:500]

    def usage(self, obj: Obj) -> Obj | None:
        kind = obj.get("type")
        if kind == "message_start":
            message = obj.get("message") or {}
            return _openai_usage(message.get("usage"), "input_tokens", "output_tokens")
        if kind == "message_delta":
            return _openai_usage(obj.get("usage"), "input_tokens", "output_tokens")
        return None


def _openai_usage(usage: object, prompt_key: str, completion_key: str) -> Obj | None:
    if not isinstance(usage, Mapping):
        return None
    out: Obj = {}
    if isinstance(usage.get(prompt_key), int):
        out["prompt_tokens"] = usage[prompt_key]
    if isinstance(usage.get(completion_key), int):
        out["completion_tokens"] = usage[completion_key]
    return out or None


OPENAI = Grammar()
RESPONSES = ResponsesGrammar()
MESSAGES = MessagesGrammar()
