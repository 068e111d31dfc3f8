"""An incremental Server-Sent Events parser: bytes in as they arrive, events and comments out.

No I/O here: the client feeds each network chunk and timestamps what comes out. Follows the
WHATWG rules the bench needs: lines end in CRLF, LF or a lone CR (a CR ending one chunk ends
its line at once, and an LF opening the next chunk is then skipped as the CRLF's other half);
``data:`` lines accumulate and an
empty line dispatches the event; lines starting with ``:`` are comments, returned as they
complete because Meridian sends its final timings as one (``: {"itl_ms": ...}``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SseEvent:
    data: str
    event: str = "message"


@dataclass(frozen=True)
class SseComment:
    """A comment line, without the leading colon and its one optional space."""

    text: str


SseItem = SseEvent | SseComment


class SseParser:
    """Stateful across ``feed`` calls; call ``close`` at end of stream to flush a partial event."""

    def __init__(self) -> None:
        self._pending = b""
        self._data: list[str] = []
        self._event = ""
        self._skip_lf = False

    def feed(self, chunk: bytes) -> list[SseItem]:
        if not chunk:
            return []
        if self._skip_lf and chunk.startswith(b"\n"):
            chunk = chunk[1:]  # second half of a CRLF whose CR ended the previous chunk
        if not self._pending and not self._data and chunk.endswith(b"\n\n") and b"\r" not in chunk:
            self._skip_lf = False
            return self._whole_events(chunk)
        buffer = self._pending + chunk
        self._skip_lf = buffer.endswith(b"\r")
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *lines, self._pending = buffer.split(b"\n")
        items: list[SseItem] = []
        for line in lines:
            item = self._line(line.decode("utf-8", errors="replace"))
            if item is not None:
                items.append(item)
        return items

    def _whole_events(self, chunk: bytes) -> list[SseItem]:
        """Fast path for the usual read: whole events, nothing pending (one event a token, so
        this runs thousands of times a second at high concurrency)."""
        items: list[SseItem] = []
        for block in chunk[:-2].split(b"\n\n"):
            if block.startswith(b"data: ") and b"\n" not in block:
                items.append(SseEvent(block[6:].decode("utf-8", errors="replace")))
                continue
            for line in (*block.split(b"\n"), b""):
                item = self._line(line.decode("utf-8", errors="replace"))
                if item is not None:
                    items.append(item)
        return items

    def close(self) -> list[SseItem]:
        """End of stream: a final unterminated line counts, then any accumulated event."""
        items: list[SseItem] = []
        tail = self._pending
        self._pending = b""
        if tail:
            item = self._line(tail.decode("utf-8", errors="replace"))
            if item is not None:
                items.append(item)
        if self._data:
            items.append(self._dispatch())
        return items

    def _line(self, line: str) -> SseItem | None:
        if not line:
            return self._dispatch() if self._data else None
        if line.startswith(":"):
            return SseComment(line[2:] if line.startswith(": ") else line[1:])
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        # "id" and "retry" do not matter to a one-shot completion stream; unknown fields neither.
        return None

    def _dispatch(self) -> SseEvent:
        event = SseEvent("\n".join(self._data), self._event or "message")
        self._data = []
        self._event = ""
        return event
