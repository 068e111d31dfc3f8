"""The listening port shared by every worker: ``SO_REUSEPORT`` lets each worker bind its own
listener to it, and the kernel spreads new connections over them."""

from __future__ import annotations

import math
import os
import socket
from pathlib import Path

_CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")  # cgroup v2: "<quota> <period>" or "max ..."


def usable_cores(cpu_max: Path = _CGROUP_CPU_MAX) -> int:
    """The CPUs this process may use: its affinity mask, capped by a cgroup CPU quota (a
    container limited to 2 CPUs on a 64-core host gets 2)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    try:
        quota, period = cpu_max.read_text().split()[:2]
        if quota != "max":
            cores = min(cores, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        pass  # no cgroup v2 limit readable: the affinity mask decides
    return max(1, cores)


def reserve_port(host: str, port: int) -> socket.socket:
    """A bound, *not listening* ``SO_REUSEPORT`` socket on ``host:port`` (0: any free port).
    Held by the supervisor so the port stays ours while workers come and go; a socket that
    does not listen is never handed a connection."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock
