"""What the scheduler and the kernel counted for each process of a tree, from ``/proc``.

CPU time alone cannot tell *why* one setup costs more per request than another on a busy
2-core host (no hardware counters in this VM). These counters can, because most of them do
not depend on how busy the machine is:

    before = tree_counters(gateway_pid)
    ...  # the run
    spent = {k: v.minus(before[k]) for k, v in tree_counters(gateway_pid).items()}

- ``cpu_s`` / ``wait_s``: time on a CPU and time runnable but waiting for one
  (``/proc/<pid>/task/*/schedstat``, nanoseconds);
- ``voluntary`` / ``involuntary``: context switches (the loop went to sleep / was preempted);
- ``reads`` / ``writes``: read- and write-family system calls (``/proc/<pid>/io``), i.e. how
  many times the event loop went to the kernel to move bytes.

A process is keyed ``main`` (the root) or ``worker N`` (a ``--worker-index N`` process of the
tree, see ``cpu_ledger.worker_label``); other descendants are added to their parent's key.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from loadtests.cpu_ledger import worker_label

_PROC = Path("/proc")
MAIN = "main"


@dataclass(frozen=True)
class Counters:
    cpu_s: float = 0.0
    wait_s: float = 0.0
    voluntary: int = 0
    involuntary: int = 0
    reads: int = 0
    writes: int = 0

    def minus(self, earlier: Counters) -> Counters:
        return Counters(
            *(
                a - b
                for a, b in zip(
                    dataclasses.astuple(self), dataclasses.astuple(earlier), strict=True
                )
            )
        )

    def plus(self, other: Counters) -> Counters:
        return Counters(
            *(
                a + b
                for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(other), strict=True)
            )
        )


def process_counters(pid: int) -> Counters:
    """One process, all its threads; zeros if it is gone."""
    cpu_ns = wait_ns = voluntary = involuntary = 0
    try:
        tasks = list((_PROC / str(pid) / "task").iterdir())
        for task in tasks:
            run, wait, _ = (task / "schedstat").read_text().split()
            cpu_ns, wait_ns = cpu_ns + int(run), wait_ns + int(wait)
            for row in (task / "status").read_text().splitlines():
                if row.startswith("voluntary_ctxt_switches:"):
                    voluntary += int(row.split()[1])
                elif row.startswith("nonvoluntary_ctxt_switches:"):
                    involuntary += int(row.split()[1])
        io = dict(
            row.split(": ") for row in (_PROC / str(pid) / "io").read_text().splitlines() if row
        )
    except (OSError, ValueError):
        return Counters()
    return Counters(
        cpu_ns / 1e9, wait_ns / 1e9, voluntary, involuntary, int(io["syscr"]), int(io["syscw"])
    )


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in _PROC.iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    return children


def tree_counters(root: int) -> dict[str, Counters]:
    """``root`` and its live descendants, keyed ``main`` / ``worker N``."""
    children = _children()
    out: dict[str, Counters] = {}
    todo = [(root, MAIN)]
    while todo:
        pid, parent_key = todo.pop()
        key = (worker_label(pid) or parent_key) if pid != root else MAIN
        out[key] = out.get(key, Counters()).plus(process_counters(pid))
        todo.extend((child, key) for child in children.get(pid, ()))
    return out


def tree_total(root: int) -> Counters:
    """``root``'s whole live process tree, summed (``tree_counters`` without the keys)."""
    total = Counters()
    for counters in tree_counters(root).values():
        total = total.plus(counters)
    return total


def spent(after: dict[str, Counters], before: dict[str, Counters]) -> dict[str, Counters]:
    """What each key counted between two ``tree_counters`` readings."""
    return {key: value.minus(before.get(key, Counters())) for key, value in after.items()}
