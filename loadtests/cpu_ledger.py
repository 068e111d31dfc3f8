"""Where the CPU of a benchmark run goes: every process of it, and the rest of the machine.

A benchmark on a shared 2-core host measures whatever CPU is left to it. This ledger reads
``/proc`` before and after a run and splits the machine's busy time into the load generator
(this process), the mock backend, each gateway process (a ``--workers`` supervisor and each
worker by its ``--worker-index``) and everybody else, plus idle time, so a throughput ratio can
be read against the CPU that was there to spend:

    ledger = CpuLedger({"emulator": emulator_pid, "gw x2": gateway_pid})
    before = ledger.read()
    ...  # the run
    spent = ledger.read().minus(before)   # CPU seconds per label, "others", "idle", wall
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

LOADGEN = "loadgen"
OTHERS = "others"  # every process of the machine that is not one of ours
IDLE = "idle"

_PROC = Path("/proc")
_TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class CpuReading:
    """Cumulative CPU seconds per label at one instant (``wall``: ``time.monotonic()``)."""

    wall: float
    by_label: Mapping[str, float]

    def minus(self, earlier: CpuReading) -> CpuReading:
        """What was spent between ``earlier`` and this reading. A process that started or
        ended in between counts only what it spent while both readings could see it."""
        labels = self.by_label.keys() | earlier.by_label.keys()
        return CpuReading(
            self.wall - earlier.wall,
            {k: self.by_label.get(k, 0.0) - earlier.by_label.get(k, 0.0) for k in labels},
        )

    def plus(self, other: CpuReading) -> CpuReading:
        labels = self.by_label.keys() | other.by_label.keys()
        return CpuReading(
            self.wall + other.wall,
            {k: self.by_label.get(k, 0.0) + other.by_label.get(k, 0.0) for k in labels},
        )


def _processes() -> tuple[dict[int, float], dict[int, list[int]]]:
    """CPU seconds (user + system) of every live process, and each one's children."""
    cpu: dict[int, float] = {}
    children: dict[int, list[int]] = {}
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue  # ended while we looked
        pid = int(entry.name)
        children.setdefault(int(fields[1]), []).append(pid)
        cpu[pid] = (int(fields[11]) + int(fields[12])) / _TICK
    return cpu, children


def _machine() -> tuple[float, float]:
    """Busy and idle CPU seconds of the whole machine since boot (``/proc/stat``)."""
    ticks = [int(v) for v in (_PROC / "stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = ticks[3] + ticks[4]  # idle + iowait
    busy = sum(ticks[:8]) - idle  # user nice system idle iowait irq softirq steal
    return busy / _TICK, idle / _TICK


def worker_label(pid: int) -> str | None:
    """``worker N`` for a ``meridian serve --worker-index N`` process."""
    try:
        argv = (_PROC / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    if b"--worker-index" in argv:
        at = argv.index(b"--worker-index") + 1
        if at < len(argv):
            return f"worker {argv[at].decode()}"
    return None


class CpuLedger:
    """Reads CPU per label: ``roots`` maps a label to a process whose whole tree it gets; a
    tree's ``--worker-index`` processes get their own ``<label>/worker N`` entries."""

    def __init__(self, roots: Mapping[str, int]) -> None:
        self.roots = dict(roots)

    def read(self) -> CpuReading:
        wall = time.monotonic()
        cpu, children = _processes()
        busy, idle = _machine()
        by_label: dict[str, float] = {}
        ours = 0.0
        own = os.getpid()
        trees = {**self.roots, LOADGEN: own}
        for label, root in trees.items():
            todo = [root]
            while todo:
                pid = todo.pop()
                spent = cpu.get(pid, 0.0)
                worker = worker_label(pid) if pid != root else None
                key = label if worker is None else f"{label}/{worker}"
                by_label[key] = by_label.get(key, 0.0) + spent
                ours += spent
                if label != LOADGEN:  # the load generator's children are the other roots
                    todo.extend(children.get(pid, ()))
        by_label[OTHERS] = busy - ours
        by_label[IDLE] = idle
        return CpuReading(wall, by_label)


def format_ledger(title: str, spent: CpuReading, requests: int) -> str:
    """One side's ledger: CPU seconds, share of the machine, and µs per request per label."""
    cores = len(os.sched_getaffinity(0))
    capacity = spent.wall * cores
    lines = [f"{title}: {spent.wall:.2f} s wall x {cores} cores, {requests} requests"]
    order = sorted(spent.by_label, key=lambda k: (k in (OTHERS, IDLE), k))
    for label in order:
        seconds = spent.by_label[label]
        per_request = seconds / max(requests, 1) * 1e6
        lines.append(
            f"  {label:<22} {seconds:8.2f} s  {seconds / capacity:6.1%} of the machine  "
            f"{per_request:8.0f} us/request"
        )
    ours = sum(v for k, v in spent.by_label.items() if k not in (OTHERS, IDLE))
    per_request = ours / max(requests, 1)
    if per_request > 0:  # the ceiling: what the run's own CPU per request allows on idle cores
        lines.append(
            f"  the run's processes: {per_request * 1e6:.0f} us/request, so at most "
            f"{cores / per_request:.0f} requests/s on {cores} idle cores "
            f"({requests / spent.wall:.0f} measured)"
        )
    return "\n".join(lines)
