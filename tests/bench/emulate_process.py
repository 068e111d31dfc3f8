"""``meridian emulate`` as a separate process, the way a user starts it next to ``bench``."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator

import orjson


def meridian(*args: str) -> list[str]:
    return [sys.executable, "-m", "gateway.cli", *args]


@contextlib.contextmanager
def emulate(*args: str) -> Iterator[str]:
    """Start ``meridian emulate ARGS``; yields its URL once it printed ``{"ready": true}``."""
    process = subprocess.Popen(meridian("emulate", *args), stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        lines = [orjson.loads(process.stdout.readline()) for _ in range(2)]
        assert lines[1] == {"ready": True}
        yield lines[0]["url"]
    finally:
        process.terminate()
        process.wait(timeout=30)
