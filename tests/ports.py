"""Ports for servers that another process binds later (a gateway's gRPC port, a container's
published port): chosen free now and **below the kernel's ephemeral range**. A port-0 socket
of any process (every other test's listeners and connections, a test suite running beside
this one) is only ever given a port inside that range, so it cannot take the port between the
choice and the bind. A port inside the range could be taken: the bind then fails, or a
published port's DNAT rule redirects the other socket's connections to a container
(tests/deploy/test_compose_up.py).
"""

from __future__ import annotations

import random
import socket

_SPAN = 8192  # ports below the ephemeral range to choose from


def ephemeral_low() -> int:
    """The first port the kernel may give a port-0 socket."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as ranges:
        return int(ranges.read().split()[0])


def unclaimed_ports(count: int) -> list[int]:
    """``count`` loopback ports free now, below the ephemeral range, in random order (two
    suites choosing at once rarely meet, and a bind-check skips a port in use)."""
    low = ephemeral_low()
    candidates = list(range(max(1024, low - _SPAN), low))
    random.shuffle(candidates)
    ports: list[int] = []
    for port in candidates:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
        if len(ports) == count:
            return ports
    raise AssertionError(f"fewer than {count} free ports below {low}")


def unclaimed_port() -> int:
    return unclaimed_ports(1)[0]
