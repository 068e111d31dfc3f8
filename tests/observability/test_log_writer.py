"""The log writer thread (``gateway/observability/log_format.py``): lines logged in a burst are
all written, in order, by ``flush()`` and at exit; a later ``install()`` writes again. In a
child process: the writer is process-wide."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import orjson

BURST = 500

CHILD = textwrap.dedent(
    f"""
    import logging, sys
    from gateway.observability import log_format
    log = logging.getLogger("meridian.test")
    log_format.install("INFO", "json", sys.stdout)
    for n in range({BURST}):
        log.info("line", extra={{log_format.FIELDS_ATTR: {{"n": n}}}})
    log_format.flush()  # everything queued is written before it returns
    sys.stdout.write("--flushed--\\n")
    sys.stdout.flush()
    log_format.install("INFO", "json", sys.stdout)  # a new writer thread
    log.info("again", extra={{log_format.FIELDS_ATTR: {{"n": -1}}}})
    log.info("at exit", extra={{log_format.FIELDS_ATTR: {{"n": -2}}}})
    # no flush: the atexit hook writes what is left
    """
)


def test_a_burst_is_written_whole_and_in_order_by_flush_and_at_exit() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60, check=True
    )
    before, marker, after = done.stdout.partition("--flushed--\n")
    assert marker, done.stdout[-500:]
    lines = [orjson.loads(line) for line in before.splitlines()]
    assert [line["n"] for line in lines] == list(range(BURST))
    assert {line["msg"] for line in lines} == {"line"}
    assert [orjson.loads(line)["msg"] for line in after.splitlines()] == ["again", "at exit"]


CHILD_ARGS = textwrap.dedent(
    """
    import logging, sys
    from gateway.observability import log_format
    log = logging.getLogger("meridian.test")
    log_format.install("INFO", "json", sys.stdout)
    seen = ["at the call"]
    log.info("value %s", seen)
    seen[0] = "changed after the call"  # the line shows what the caller logged
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("failed %d", 7)
    log_format.flush()
    """
)


def test_a_line_keeps_its_args_as_logged_and_its_traceback_in_exc() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD_ARGS], capture_output=True, text=True, timeout=60, check=True
    )
    value, failed = (orjson.loads(line) for line in done.stdout.splitlines())
    assert value["msg"] == "value ['at the call']"
    assert failed["msg"] == "failed 7"
    assert failed["level"] == "error"
    assert "RuntimeError: boom" in failed["exc"]
