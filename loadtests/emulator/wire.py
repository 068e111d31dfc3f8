"""What a response looks like on the wire, whichever API it answers: the emulator's engine
produces tokens; a wire turns them into chat chunks, Responses events or Messages events."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class Wire(Protocol):
    def opening(self) -> bytes:
        """Written before the first token (may be empty)."""
        ...

    def token(self, index: int, finish_reason: str | None, choice: int = 0) -> bytes:
        """Token ``index`` of choice ``choice`` (only the OpenAI wire runs ``n`` > 1)."""
        ...

    def closing(self, prompt: int, completion: int, cached: int, include_usage: bool) -> bytes:
        """After the last token, before the engine's ``: server-timing`` comment
        (``completion``: the tokens of every choice)."""
        ...

    def terminal(self) -> bytes:
        """The stream's last event ([DONE], response.completed, message_stop)."""
        ...

    def whole(self, prompt: int, completion: int, cached: int, finish_reason: str) -> bytes:
        """The non-streaming body (``completion``: the tokens of every choice)."""
        ...


# (response id, model, max tokens) -> the wire of one response
WireFactory = Callable[[str, str, int], Wire]
