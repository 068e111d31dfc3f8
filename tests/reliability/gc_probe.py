"""Runs ``meridian`` with a full garbage collection on demand, for the cyclic-garbage tests.

``python -m tests.reliability.gc_probe REPORT meridian-args...``: on SIGUSR2 the process runs
a full collection that keeps what it finds (``gc.DEBUG_SAVEALL``), counts it by type and writes
``{type: count}`` to REPORT as JSON (atomically: the file's appearance is the test's event).

Why not the gateway's own ``python_gc_objects_collected_total``: the gateway raises the young
threshold to 10,000 (gateway/heap.py) and most of a request's objects die by reference count,
so a few hundred requests' worth of cycles may never reach a collection inside a test's window
(session 21's lean-door cycle passed that way most runs). A collection asked for by the test,
after its load, sees every cycle the load left, on every run.
"""

from __future__ import annotations

import gc
import json
import signal
import sys
from collections import Counter
from pathlib import Path
from types import FrameType


def type_name(obj: object) -> str:
    kind = type(obj)
    return f"{kind.__module__}.{kind.__qualname__}"


def collect_and_report(report: Path) -> None:
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        found = Counter(type_name(obj) for obj in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    partial = report.with_suffix(".partial")
    partial.write_text(json.dumps(found))
    partial.replace(report)


def main(argv: list[str]) -> int:
    from gateway.cli import main as meridian

    report = Path(argv[0])

    def on_signal(signum: int, frame: FrameType | None) -> None:
        collect_and_report(report)

    signal.signal(signal.SIGUSR2, on_signal)
    return meridian(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
