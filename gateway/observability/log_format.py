"""Log line formats: one JSON object a line for machines, ``key=value`` text for people.

Structured fields travel on the log record under :data:`FIELDS_ATTR` (set by
:func:`gateway.observability.events.gateway_event` and the request log); both formatters put
them on the same line as the message, so every event stays one line.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import IO, Any, Literal

import orjson

FIELDS_ATTR = "meridian_fields"
Format = Literal["auto", "text", "json"]


def iso_time(epoch_s: float) -> str:
    """UTC, millisecond precision: ``2026-12-01T09:25:17.123Z``."""
    stamp = datetime.fromtimestamp(epoch_s, UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    fields = getattr(record, FIELDS_ATTR, None)
    return fields if isinstance(fields, dict) else {}


class JsonFormatter(logging.Formatter):
    """``{"time": ..., "level": ..., "logger": ..., "msg": ..., <fields>}`` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": iso_time(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        line.update(_fields(record))
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


class TextFormatter(logging.Formatter):
    """``time level logger message key=value ...``; multi-line text stays escaped on one line."""

    def format(self, record: logging.LogRecord) -> str:
        parts = [iso_time(record.created), record.levelname, record.name, record.getMessage()]
        for key, value in _fields(record).items():
            if value is None:
                continue
            text = value if isinstance(value, str) else orjson.dumps(value, default=str).decode()
            parts.append(f"{key}={text}")
        line = " ".join(parts)
        if record.exc_info:
            line += " exc=" + self.formatException(record.exc_info)
        return line.replace("\n", "\\n")


def resolve(fmt: Format, stream: IO[str]) -> Literal["text", "json"]:
    """``auto`` is text on a terminal and JSON anywhere else (a collector reads it)."""
    if fmt != "auto":
        return fmt
    isatty = getattr(stream, "isatty", None)
    return "text" if isatty is not None and isatty() else "json"


def formatter_for(fmt: Literal["text", "json"]) -> logging.Formatter:
    return JsonFormatter() if fmt == "json" else TextFormatter()


_HANDLER_NAME = "meridian"


def install(level: str | int = "INFO", fmt: Format = "auto", stream: IO[str] | None = None) -> None:
    """Send every log record to ``stream`` (stderr) in ``fmt``; calling again re-formats."""
    out = stream or sys.stderr
    root = logging.getLogger()
    handler = next((h for h in root.handlers if h.get_name() == _HANDLER_NAME), None)
    if handler is None:
        handler = logging.StreamHandler(out)
        handler.set_name(_HANDLER_NAME)
        root.addHandler(handler)
    handler.setFormatter(formatter_for(resolve(fmt, out)))
    root.setLevel(level if isinstance(level, int) else level.upper())
