"""Log line formats: one JSON object a line for machines, ``key=value`` text for people.

Structured fields travel on the log record under :data:`FIELDS_ATTR` (set by
:func:`gateway.observability.events.gateway_event` and the request log); both formatters put
them on the same line as the message, so every event stays one line.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import queue
import sys
import threading
import time
from logging.handlers import QueueHandler
from typing import IO, Any, Literal

import orjson

FIELDS_ATTR = "meridian_fields"
_LEVELS = {logging.DEBUG: "debug", logging.INFO: "info", logging.WARNING: "warning"}
Format = Literal["auto", "text", "json"]


_second: tuple[int, str] = (-1, "")  # the last whole second formatted, and its text


def iso_time(epoch_s: float) -> str:
    """UTC, millisecond precision: ``2026-12-01T09:25:17.123Z``. The seconds part is formatted
    once per second (with a line per request, it was the formatter's largest cost); the pair
    is replaced whole, so a thread never sees one second's number with another's text."""
    global _second
    whole = int(epoch_s)
    cached = _second
    if cached[0] != whole:
        cached = _second = (whole, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)))
    return f"{cached[1]}.{int((epoch_s - whole) * 1000):03d}Z"


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    fields = getattr(record, FIELDS_ATTR, None)
    return fields if isinstance(fields, dict) else {}


class JsonFormatter(logging.Formatter):
    """``{"time": ..., "level": ..., "logger": ..., "msg": ..., <fields>}`` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": iso_time(record.created),
            "level": _LEVELS.get(record.levelno) or record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, FIELDS_ATTR, None)
        if fields:
            line.update(fields)
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


_GATHER_S = 0.02  # after a write, how long the writer lets lines gather before it looks again
# How long a line logged on the event loop waits there before the writer is handed it (with
# every line logged on the loop meanwhile).
_HANDOVER_S = 0.05


class _Writer:
    """Formatting and writing in a thread of their own: the event loop only queues the record,
    so a slow log pipe (a collector that stopped reading stderr) never stalls a request.

    After writing what it found, the thread sleeps ``_GATHER_S`` before it looks again, so lines
    logged meanwhile are written together. Woken for every line (a request line per request),
    it cost the event loop's process a context switch or two per request and a GIL hand-over
    each time; now it wakes at most ~50 times a second, and a line waits at most that long.
    What it finds is written as one ``write`` and one flush: ``StreamHandler.handle`` took a
    lock and made a system call per line, and each of those writes could wake whatever reads
    the pipe (a container runtime's log driver) once per request.

    A line logged on a running event loop (the request line, when a request ends) is held
    there and handed over ``_HANDOVER_S`` later, with the lines logged on the loop meanwhile
    (:meth:`take`). Handed over at once, the writer woke as the request ended, which is when
    a closed loop's next request arrives: the thread took the GIL to format while the loop
    read that request's head (at concurrency 1 the head's ``door`` step read 20 / 60 us more
    at p50 / p90, ``loadtests/first_token_clock.py``). Lines from other threads, or logged
    with no loop running, go to the writer at once; :meth:`stop` hands over what is held."""

    def __init__(self, stream: IO[str]) -> None:
        self.sink = logging.StreamHandler(stream)
        self.queue: queue.SimpleQueue[list[logging.LogRecord] | None] = queue.SimpleQueue()
        self._held: list[logging.LogRecord] = []  # logged on ``_held_on``, not handed over yet
        self._held_on: asyncio.AbstractEventLoop | None = None
        # Taking and handing over may run in two threads (a second loop's, or exit's).
        self._holding = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="meridian-log-writer", daemon=True)
        self._thread.start()
        self.running = True
        atexit.register(self.stop)

    def take(self, record: logging.LogRecord) -> None:
        """A prepared record, from the handler (under its lock)."""
        loop = asyncio._get_running_loop()
        if loop is None:  # another thread, or no loop running
            self.queue.put_nowait([record])
            return
        with self._holding:
            held = self._held
            if loop is not self._held_on:  # a new loop: what an earlier one held goes first
                if held:
                    self.queue.put_nowait(held)
                self._held = held = []
                self._held_on = loop
            held.append(record)
            first = len(held) == 1
        if first:
            loop.call_later(_HANDOVER_S, self.hand_over)

    def hand_over(self) -> None:
        """Give the writer the lines held on the event loop (one wake for all of them)."""
        with self._holding:
            held, self._held = self._held, []
        if held:
            self.queue.put_nowait(held)

    def _run(self) -> None:
        while True:
            lines = self.queue.get()  # sleeps until a line comes
            found: list[logging.LogRecord] = []
            while lines is not None:
                found.extend(lines)
                try:
                    lines = self.queue.get_nowait()
                except queue.Empty:
                    break
            self._write(found)
            if lines is None:  # stop() was called: everything queued before it is written
                return
            time.sleep(_GATHER_S)

    def _write(self, records: list[logging.LogRecord]) -> None:
        """``sink.handle`` for each of ``records``, with one write and one flush for all."""
        sink = self.sink
        lines: list[str] = []
        for record in records:
            if not sink.filter(record):
                continue
            try:
                lines.append(sink.format(record))
            except Exception:  # logging's own contract: report it on stderr, keep going
                sink.handleError(record)
        if not lines:
            return
        lines.append("")  # the last line's terminator
        try:
            sink.stream.write(sink.terminator.join(lines))
            sink.flush()
        except Exception:
            sink.handleError(records[-1])

    def stop(self) -> None:
        """Write what is queued, then stop the thread (idempotent)."""
        if self.running:
            self.running = False
            self.hand_over()
            self.queue.put(None)
            self._thread.join()


class _Handoff(QueueHandler):
    """Hands a record to the writer thread as it is (:meth:`_Writer.take`). ``QueueHandler.
    prepare`` formats the message and copies the record (for queues that pickle); in one
    process the thread takes the record itself, so only the message is fixed here, in the
    caller's thread, while its ``args`` are what they were at the call. Exception info stays
    on the record: the writer's formatter puts the traceback in its own field (``exc``)
    instead of inside ``msg``."""

    def __init__(self, writer: _Writer) -> None:
        super().__init__(writer.queue)
        self.writer = writer

    def enqueue(self, record: logging.LogRecord) -> None:
        self.writer.take(record)

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        if record.args:
            record.msg, record.args = record.getMessage(), None
        return record


_writer: _Writer | None = None


def install(level: str | int = "INFO", fmt: Format = "auto", stream: IO[str] | None = None) -> None:
    """Send every log record to ``stream`` (stderr) in ``fmt``, written by a background thread;
    calling again changes the format and level (the stream stays the first one's).

    Neither format prints a record's source line, thread or process, so the logging module is
    told not to look them up (its documented optimisation switches): a request line is one
    record per request, and finding the caller's frame alone was a third of its cost."""
    global _writer
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    out = stream or sys.stderr
    root = logging.getLogger()
    if _writer is None:
        _writer = _Writer(out)
        handler = _Handoff(_writer)
        handler.set_name(_HANDLER_NAME)
        root.addHandler(handler)
    _writer.sink.setFormatter(formatter_for(resolve(fmt, _writer.sink.stream)))
    root.setLevel(level if isinstance(level, int) else level.upper())


def flush() -> None:
    """Write every queued line now and stop the writer thread (at exit, or in a benchmark);
    a later :func:`install` starts a new one."""
    global _writer
    if _writer is None:
        return
    _writer.stop()
    root = logging.getLogger()
    for handler in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(handler)
    _writer = None
