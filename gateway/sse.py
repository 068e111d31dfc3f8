"""Incremental Server-Sent Events framing for relaying upstream streams.

The relay forwards each upstream event's bytes as they came (no re-serialization); it only needs
to know where one event ends and what its ``data`` says. Framing follows the WHATWG rules for
line endings (CRLF, LF or CR) and comment lines, and tolerates events split across reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson


@dataclass(slots=True)
class SseEvent:
    raw: bytes  # the event as it should be written to the client, ending in a blank line
    data: bytes | None  # joined ``data:`` fields, None for comment-only events
    # ``data``'s JSON object, from the parse that checked the event (UpstreamExchange.check),
    # kept only for a door that builds from it (the gRPC door's messages: no second parse).
    # Other doors write the bytes; holding it would cost an open stream ~1 KB an event held.
    parsed: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    @property
    def is_done(self) -> bool:
        return self.data == b"[DONE]"

    def json(self) -> object:
        return orjson.loads(self.data) if self.data is not None else None


class SseSplitter:
    """Feed it byte chunks; it returns the complete events so far, in order."""

    def __init__(self, max_event_bytes: int = 4 * 1024 * 1024) -> None:
        # The bytes of an event not complete yet: empty between events (the push sink reads it).
        self.partial = b""
        self._max = max_event_bytes

    @property
    def pending_bytes(self) -> int:
        return len(self.partial)

    def feed(self, chunk: bytes) -> list[SseEvent]:
        if (  # the usual read: one whole event, nothing pending (an engine's one per token)
            not self.partial and chunk.find(b"\n\n") == len(chunk) - 2 > 0 and b"\r" not in chunk
        ):
            if chunk[:5] == b"data:" and chunk.find(b"\n") == len(chunk) - 2:  # one data line
                data = chunk[5:-2]
                return [SseEvent(raw=chunk, data=data[1:] if data[:1] == b" " else data)]
            return [_parse_block(chunk[:-2])]
        buffer = self.partial + chunk
        if b"\r" in buffer:
            # Normalise before splitting; a lone CR at the very end may be half of a CRLF.
            keep_cr = buffer.endswith(b"\r")
            body = buffer[:-1] if keep_cr else buffer
            buffer = body.replace(b"\r\n", b"\n").replace(b"\r", b"\n") + (
                b"\r" if keep_cr else b""
            )
        events: list[SseEvent] = []
        start = 0
        while True:
            end = buffer.find(b"\n\n", start)
            if end < 0:
                break
            block = buffer[start:end]
            start = end + 2
            if block:
                events.append(_parse_block(block))
        self.partial = buffer[start:]
        if len(self.partial) > self._max:
            raise ValueError(f"SSE event larger than {self._max} bytes")
        return events

    def flush(self) -> list[SseEvent]:
        """At end of stream: an unterminated final event still counts (some servers omit it)."""
        rest, self.partial = self.partial.rstrip(b"\r\n"), b""
        return [_parse_block(rest)] if rest else []


def _parse_block(block: bytes) -> SseEvent:
    data_lines: list[bytes] = []
    for line in block.split(b"\n"):
        if line.startswith(b"data:"):
            value = line[5:]
            data_lines.append(value[1:] if value.startswith(b" ") else value)
    data = b"\n".join(data_lines) if data_lines else None
    return SseEvent(raw=block + b"\n\n", data=data)


def comment(text: str) -> bytes:
    """An SSE comment line: every conforming client ignores it."""
    return b": " + text.replace("\n", " ").encode() + b"\n\n"
