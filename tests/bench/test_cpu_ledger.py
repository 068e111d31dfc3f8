"""The CPU ledger of a benchmark run, on real processes: a parent that starts a
``--worker-index`` child, the child burning a known amount of CPU between two readings."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from loadtests.cpu_ledger import (
    IDLE,
    LOADGEN,
    OTHERS,
    ROOT_GROUP,
    CpuLedger,
    _autogroup,
    format_ledger,
)

BURN_S = 0.3

# The child: says it is ready, waits for a line, burns BURN_S of its own CPU, says so, and
# stays alive (a process that exited is no longer in /proc) until its stdin closes.
CHILD = textwrap.dedent(
    f"""
    import sys, time
    print("ready", flush=True)
    sys.stdin.readline()
    start = time.process_time()
    while time.process_time() - start < {BURN_S}:
        pass
    print("burnt", flush=True)
    sys.stdin.read()
    """
)
# The parent starts the child with ``--worker-index 3`` in its argv, as the supervisor of
# ``meridian serve --workers N`` does, and passes stdin/stdout through.
PARENT = textwrap.dedent(
    f"""
    import subprocess, sys
    child = subprocess.Popen([sys.executable, "-c", {CHILD!r}, "--worker-index", "3"])
    sys.exit(child.wait())
    """
)


def test_a_worker_child_is_its_own_entry_and_gets_what_it_burnt() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert parent.stdin is not None and parent.stdout is not None
    try:
        assert parent.stdout.readline().strip() == "ready"
        ledger = CpuLedger({"gw": parent.pid})
        before = ledger.read()
        parent.stdin.write("go\n")
        parent.stdin.flush()
        assert parent.stdout.readline().strip() == "burnt"
        spent = ledger.read().minus(before)
    finally:
        parent.stdin.close()
        parent.wait(timeout=30)
    tick = 0.02  # /proc counts in clock ticks (10 ms); allow one either side
    assert spent.by_label["gw/worker 3"] >= BURN_S - tick
    assert spent.by_label["gw"] < BURN_S  # the parent only waited
    assert {LOADGEN, OTHERS, IDLE} <= spent.by_label.keys()
    assert spent.wall > 0
    table = format_ledger("side", spent, requests=10)
    assert "gw/worker 3" in table and "us/request" in table


def test_readings_add_and_subtract_label_by_label() -> None:
    ledger = CpuLedger({})
    first = ledger.read()
    second = ledger.read()
    delta = second.minus(first)
    assert delta.plus(delta).by_label[LOADGEN] == 2 * delta.by_label[LOADGEN]
    assert delta.plus(delta).wall == 2 * delta.wall


def test_a_busy_process_of_another_session_is_another_busy_autogroup() -> None:
    if not Path("/proc/self/autogroup").exists():
        pytest.skip("this kernel has no autogroups")
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a new session is a new autogroup
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        assert child.stdout.readline().strip() == "ready"
        ledger = CpuLedger({})
        before = ledger.read()
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "burnt"
        spent = ledger.read().minus(before)
        group = Path(f"/proc/{child.pid}/autogroup").read_text().split()[0]
    finally:
        child.stdin.close()
        child.wait(timeout=30)
    # a test runner that never started a session (a CI job started by init) is in the
    # kernel's default group, whose autogroup file is empty
    assert group != spent.own_group and spent.own_group.startswith("/autogroup-")
    assert group.startswith("/autogroup-") and group != ROOT_GROUP
    assert spent.by_group[group] >= BURN_S - 0.02  # clock ticks, as above
    if spent.by_group[group] / spent.wall >= 0.1:  # a slow host may stretch the wall time
        assert spent.busy_groups() >= 1
        assert "busy autogroups" in format_ledger("side", spent, requests=10)


def test_a_process_in_the_default_autogroup_is_counted_in_the_root_group(tmp_path: Path) -> None:
    # the kernel prints nothing for a task of the default group (a CI runner started by init
    # never made a session of its own); the ledger must not take it for a kernel thread
    (tmp_path / "autogroup").write_text("")
    assert _autogroup(tmp_path) == ROOT_GROUP
    assert _autogroup(tmp_path, kernel_thread=True) == ""
    (tmp_path / "autogroup").write_text("/autogroup-7 nice 0\n")
    assert _autogroup(tmp_path) == "/autogroup-7"
    assert _autogroup(tmp_path / "ended") == ""
