"""Per-process scheduler and syscall counters on real processes: a parent that starts a
``--worker-index`` child, the child burning CPU and making a known number of write calls
between two readings."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from loadtests.proc_counters import MAIN, Counters, spent, tree_counters

BURN_S = 0.2
WRITES = 500

# The child: says it is ready, waits for a line, sleeps once (a voluntary context switch inside
# the measured window: its waits on stdin may fall before the first reading or after the last),
# burns BURN_S of CPU, makes WRITES write(2) calls to /dev/null, says so, and stays alive until
# its stdin closes.
CHILD = textwrap.dedent(
    f"""
    import os, sys, time
    sink = os.open(os.devnull, os.O_WRONLY)
    print("ready", flush=True)
    sys.stdin.readline()
    time.sleep(0.001)
    start = time.process_time()
    while time.process_time() - start < {BURN_S}:
        pass
    for _ in range({WRITES}):
        os.write(sink, b"x")
    print("done", flush=True)
    sys.stdin.read()
    """
)
PARENT = textwrap.dedent(
    f"""
    import subprocess, sys
    child = subprocess.Popen([sys.executable, "-c", {CHILD!r}, "--worker-index", "1"])
    sys.exit(child.wait())
    """
)


def test_a_worker_child_gets_its_cpu_and_its_write_calls() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert parent.stdin is not None and parent.stdout is not None
    try:
        assert parent.stdout.readline().strip() == "ready"
        before = tree_counters(parent.pid)
        parent.stdin.write("go\n")
        parent.stdin.flush()
        assert parent.stdout.readline().strip() == "done"
        used = spent(tree_counters(parent.pid), before)
    finally:
        parent.stdin.close()
        parent.wait(timeout=30)
    assert set(used) == {MAIN, "worker 1"}
    worker = used["worker 1"]
    assert worker.cpu_s >= BURN_S * 0.99  # schedstat counts nanoseconds
    assert WRITES <= worker.writes <= WRITES + 5  # plus the "done" line
    assert worker.voluntary >= 1  # its sleep
    assert used[MAIN].cpu_s < BURN_S and used[MAIN].writes < 5  # the parent only waited


def test_a_gone_process_reads_as_zeros_and_counters_add_field_by_field() -> None:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait(timeout=30)
    assert tree_counters(process.pid) == {MAIN: Counters()}
    one = Counters(1.0, 2.0, 3, 4, 5, 6)
    assert one.plus(one).minus(one) == one
    assert spent({"a": one}, {}) == {"a": one}
