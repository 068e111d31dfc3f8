"""A backend in a thread of its own that can hold the test's event loop over one answer.

The loop's lag is made, not waited for: when the armed request arrives, the backend has the
loop held (a callback that blocks it), writes its whole answer, and the hold lasts ``hold_s``
past that write. The answer then sits unread in the kernel for ``hold_s`` with the loop busy,
as in a burst of thousands of streams (``python -m loadtests.bench_streams --streams 5000``),
and every timer that came due meanwhile runs late.
"""

from __future__ import annotations

import asyncio
import http.server
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

_HANDSHAKE_S = 30.0  # a bound on the threads' waits for each other, so a broken test ends

Route = tuple[str, str]  # (method, path)
Answer = tuple[str, bytes]  # (content type, body)


def hold_until(monotonic: float) -> None:
    """Block the calling thread (the event loop's, here) until ``monotonic`` has passed."""
    while (left := monotonic - time.monotonic()) > 0:
        time.sleep(left)


class HeldAnswer:
    """Holds the loop over the next answer to the path given to :meth:`arm`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, hold_s: float) -> None:
        self._loop = loop
        self._hold_s = hold_s
        self._armed: str | None = None
        self._holding = threading.Event()
        self._answered = threading.Event()
        self._answered_at = 0.0

    def arm(self, path: str) -> None:
        self._armed = path

    @property
    def answered_at(self) -> float:
        """``time.monotonic()`` once the held answer was written (0 before)."""
        return self._answered_at

    def before_answer(self, path: str) -> bool:  # the backend's thread
        """Has the loop held if ``path`` is armed; whether it is."""
        if path != self._armed:
            return False
        self._armed = None
        self._loop.call_soon_threadsafe(self._hold)
        assert self._holding.wait(_HANDSHAKE_S)
        return True

    def after_answer(self) -> None:  # the backend's thread, once the answer is written
        self._answered_at = time.monotonic()
        self._answered.set()

    def _hold(self) -> None:  # the loop's thread
        self._holding.set()
        assert self._answered.wait(_HANDSHAKE_S)
        hold_until(self._answered_at + self._hold_s)


def _handler(
    held: HeldAnswer, answers: Mapping[Route, Answer]
) -> type[http.server.BaseHTTPRequestHandler]:
    class Backend(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the gateway's pools expect

        def do_GET(self) -> None:
            self._answer("GET")

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self._answer("POST")

        def _answer(self, method: str) -> None:
            path = self.path.partition("?")[0]
            found = answers.get((method, path))
            if found is None:
                self.send_error(404)
                return
            content_type, body = found
            holding = held.before_answer(path)
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
            if holding:
                held.after_answer()

        def log_message(self, *args: object) -> None:
            pass

    return Backend


@contextmanager
def thread_backend(held: HeldAnswer, answers: Mapping[Route, Answer]) -> Iterator[str]:
    """Serve ``answers`` (404 for anything else) on a loopback port; yields the base url."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(held, answers))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="held-backend")
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
