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

The kernel shares CPU between *autogroups* (``/proc/sys/kernel/sched_autogroup_enabled``: one
group per session, e.g. each engineer's shell), equally whatever the nice values inside them:
``nice`` only ranks a group's own processes. So the ledger also counts how many groups were
busy during the run; with k of them busy, this run's group gets about ``cores / k``.
"""

from __future__ import annotations

import dataclasses
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
_BUSY_SHARE = 0.1  # an autogroup that used this much of a core during a run was competing
# The kernel's default autogroup (id 0): a process that never started a session of its own
# since boot (a CI runner started by init, say) is in it, and its ``autogroup`` file is empty.
ROOT_GROUP = "/autogroup-0"
_PF_KTHREAD = 0x00200000  # ``/proc/<pid>/stat`` flags: a kernel thread


@dataclass(frozen=True)
class CpuReading:
    """Cumulative CPU seconds per label at one instant (``wall``: ``time.monotonic()``)."""

    wall: float
    by_label: Mapping[str, float]
    # CPU seconds of the live processes of each autogroup (``/proc/<pid>/autogroup``); in a
    # difference, a group whose processes ended in between counts no less than zero
    by_group: Mapping[str, float] = dataclasses.field(default_factory=dict)
    own_group: str = ""  # the load generator's autogroup

    def minus(self, earlier: CpuReading) -> CpuReading:
        """What was spent between ``earlier`` and this reading. A process that started or
        ended in between counts only what it spent while both readings could see it."""
        groups = self.by_group.keys() | earlier.by_group.keys()
        return CpuReading(
            self.wall - earlier.wall,
            _combine(self.by_label, earlier.by_label, -1),
            {g: max(0.0, self.by_group.get(g, 0.0) - earlier.by_group.get(g, 0.0)) for g in groups},
            self.own_group,
        )

    def plus(self, other: CpuReading) -> CpuReading:
        return CpuReading(
            self.wall + other.wall,
            _combine(self.by_label, other.by_label, 1),
            _combine(self.by_group, other.by_group, 1),
            self.own_group or other.own_group,
        )

    def busy_groups(self, threshold: float = _BUSY_SHARE) -> int:
        """Autogroups that used at least ``threshold`` of a core over ``wall`` (a difference)."""
        if self.wall <= 0:
            return 0
        return sum(1 for seconds in self.by_group.values() if seconds / self.wall >= threshold)


def _combine(a: Mapping[str, float], b: Mapping[str, float], sign: int) -> dict[str, float]:
    return {k: a.get(k, 0.0) + sign * b.get(k, 0.0) for k in a.keys() | b.keys()}


def _processes() -> tuple[dict[int, float], dict[int, list[int]], dict[str, float]]:
    """CPU seconds (user + system) of every live process, each one's children, and the CPU
    seconds of each autogroup's live processes."""
    cpu: dict[int, float] = {}
    children: dict[int, list[int]] = {}
    groups: dict[str, float] = {}
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
            group = _autogroup(entry, kernel_thread=bool(int(fields[6]) & _PF_KTHREAD))
        except OSError:
            continue  # ended while we looked
        pid = int(entry.name)
        children.setdefault(int(fields[1]), []).append(pid)
        cpu[pid] = (int(fields[11]) + int(fields[12])) / _TICK
        groups[group] = groups.get(group, 0.0) + cpu[pid]
    return cpu, children, groups


def _autogroup(entry: Path, kernel_thread: bool = False) -> str:
    """``/autogroup-N`` of a process: ``ROOT_GROUP`` for a user process in the default group,
    "" for a kernel thread or without autogroups."""
    if kernel_thread:
        return ""
    try:
        words = (entry / "autogroup").read_text().split()
    except FileNotFoundError:
        return ""
    return words[0] if words else ROOT_GROUP


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
        cpu, children, groups = _processes()
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
        groups.pop("", None)  # kernel threads: not a group the scheduler shares with us
        return CpuReading(wall, by_label, groups, _autogroup(_PROC / "self"))


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
    busy = spent.busy_groups()
    if busy:  # the kernel's share between sessions, which nice does not change
        own = spent.by_group.get(spent.own_group, 0.0) / spent.wall >= _BUSY_SHARE
        sharing = busy if own else busy + 1
        lines.append(
            f"  busy autogroups (>= {_BUSY_SHARE:.0%} of a core): {busy} "
            f"({'ours among them' if own else 'and ours'}), so this run's fair share is "
            f"about {cores / sharing:.2f} of {cores} cores"
        )
    return "\n".join(lines)
