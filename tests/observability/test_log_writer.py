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


CHILD_ONE_WRITE = textwrap.dedent(
    """
    import io, logging, sys, threading
    import orjson
    from gateway.observability import log_format

    class Recording(io.StringIO):
        # The first write waits until the lines after it are queued, so the writer finds them
        # all at its next look.
        def __init__(self):
            super().__init__()
            self.writes = []
            self.inside, self.go_on = threading.Event(), threading.Event()

        def write(self, text):
            self.writes.append(text)
            if len(self.writes) == 1:
                self.inside.set()
                self.go_on.wait(30)
            return super().write(text)

    class Unprintable:
        def __str__(self):
            raise ValueError("no text")

    out = Recording()
    log = logging.getLogger("meridian.test")
    log_format.install("INFO", "json", out)
    log.info("first")
    assert out.inside.wait(30)
    for n in range(200):
        log.info("line %d", n)
    # Fails in the writer thread (the JSON formatter's str() of a field): logging's own error
    # report, on stderr, and the lines around it are written.
    log.info("unformattable", extra={log_format.FIELDS_ATTR: {"bad": Unprintable()}})
    log.info("after")
    out.go_on.set()
    log_format.flush()
    sys.stdout.write(orjson.dumps([[orjson.loads(l)["msg"] for l in w.splitlines()] for w in out.writes]).decode())
    """
)


def test_lines_found_together_are_one_write_and_a_bad_one_loses_only_itself() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD_ONE_WRITE], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    writes = orjson.loads(done.stdout)
    assert writes == [["first"], [f"line {n}" for n in range(200)] + ["after"]]
    assert "Logging error" in done.stderr and "no text" in done.stderr  # reported, not hidden


CHILD_ON_A_LOOP = textwrap.dedent(
    """
    import asyncio, atexit, io, logging, sys, threading
    import orjson
    from gateway.observability import log_format

    class Recording(io.StringIO):
        def __init__(self):
            super().__init__()
            self.writes = []
            self.wrote = threading.Event()

        def write(self, text):
            self.writes.append(text)
            self.wrote.set()
            return super().write(text)

    def messages():
        return [[orjson.loads(line)["msg"] for line in w.splitlines()] for w in out.writes]

    out = Recording()
    log = logging.getLogger("meridian.test")
    log_format.install("INFO", "json", out)

    async def main():
        for n in range(3):
            log.info("line %d", n)
        other = threading.Thread(target=log.info, args=("from another thread",))
        other.start()
        other.join()
        # The loop is held here, so its lines cannot be handed over: the writer writes the
        # other thread's line alone.
        assert out.wrote.wait(30)
        out.wrote.clear()
        await asyncio.get_running_loop().run_in_executor(None, out.wrote.wait, 30)

    asyncio.run(main())
    log.info("off the loop")  # no loop running: to the writer at once
    log_format.flush()
    atexit.register(lambda: sys.stdout.write(orjson.dumps(messages()).decode()))
    log_format.install("INFO", "json", out)  # its exit hook runs before the one above

    async def ends_at_once(message):
        log.info(message)  # its hand-over never runs before the loop ends

    async def logs_and_waits(message):
        log.info(message)  # what the loop before held goes first
        await asyncio.get_running_loop().run_in_executor(None, out.wrote.wait, 30)

    asyncio.run(ends_at_once("held by a loop that ended"))
    out.wrote.clear()
    asyncio.run(logs_and_waits("on the next loop"))
    asyncio.run(ends_at_once("held as the last loop ends"))  # written at exit
    """
)


def test_lines_logged_on_the_loop_are_handed_over_later_together_and_at_exit() -> None:
    """The request line is logged on the event loop as a request ends: it waits there, so
    the writer thread does not take the GIL as the next request arrives."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD_ON_A_LOOP], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    writes = orjson.loads(done.stdout)
    assert writes[:3] == [["from another thread"], ["line 0", "line 1", "line 2"], ["off the loop"]]
    assert [line for write in writes[3:] for line in write] == [
        "held by a loop that ended",
        "on the next loop",
        "held as the last loop ends",
    ]
