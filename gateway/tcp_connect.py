"""A TCP connect against a deadline that the kernel judges, not the event loop's lag.

Under a burst (thousands of streams arriving at one worker at once) one turn of the event loop
can run for seconds: every new request's parse and decision, one after another. Then the timers
that came due run before the task woken by the poll resumes (gateway/lag_timeout.py), so a plain
``asyncio.timeout`` around ``create_connection`` fires for a handshake the kernel finished
seconds earlier and that the loop had no turn to look at yet. The gateway then blamed the
backend: a 504, a failure on its record, and five of them ejected a healthy backend (measured:
5,754 504s of an 8,000-stream burst, ``python -m loadtests.bench_streams --streams 8000``).

Here the deadline only ends the wait. What happened is then asked of the socket itself: a
handshake the kernel completed is a connection however late the loop noticed it, one that
failed is its error, and only one still in progress has timed out.
"""

from __future__ import annotations

import asyncio
import errno
import os
import select
import socket
from typing import Any

SocketAddress = tuple[socket.AddressFamily, tuple[str, int] | tuple[str, int, int, int]]

# A non-blocking TCP connect under way (EINTR: a signal came, the handshake goes on). Not
# EAGAIN: for TCP that is "no local port left", a failure, not a connect in progress.
_IN_PROGRESS = (errno.EINPROGRESS, errno.EINTR)


class ConnectTimeout(TimeoutError):
    """The kernel had not completed the TCP handshake by the deadline."""


def literal_addresses(host: str, port: int) -> list[SocketAddress] | None:
    """The address an IP literal names, without any lookup; None for a host name."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    except socket.gaierror:
        return None
    return _addresses(found)


async def looked_up(host: str, port: int) -> list[SocketAddress]:
    """A host name's addresses in the resolver's order, by the loop's resolver (a thread; never
    the loop's own)."""
    loop = asyncio.get_running_loop()
    return _addresses(await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM))


def _addresses(found: list[tuple[Any, ...]]) -> list[SocketAddress]:
    return [(socket.AddressFamily(entry[0]), entry[4]) for entry in found]


async def connect_socket(target: SocketAddress, deadline: float) -> socket.socket:
    """A connected non-blocking socket to ``target``; :class:`ConnectTimeout` if the kernel has
    not completed the handshake by ``deadline`` (the loop's clock); else the connect's error."""
    family, address = target
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        error = sock.connect_ex(address)
        if error in _IN_PROGRESS:
            await _writable_or_deadline(sock, deadline)
            if not _settled(sock):
                raise ConnectTimeout("no TCP handshake within the connect timeout")
            error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if error:
            raise OSError(error, f"connect failed: {os.strerror(error)}")
    except BaseException:
        sock.close()
        raise
    return sock


async def _writable_or_deadline(sock: socket.socket, deadline: float) -> None:
    """Until the socket polls writable (its connect settled) or ``deadline`` passes."""
    loop = asyncio.get_running_loop()
    woken: asyncio.Future[None] = loop.create_future()
    loop.add_writer(sock, _wake, woken)
    expiry = loop.call_at(deadline, _wake, woken)
    try:
        await woken
    finally:
        expiry.cancel()
        loop.remove_writer(sock)


def _wake(woken: asyncio.Future[None]) -> None:
    if not woken.done():
        woken.set_result(None)


def _settled(sock: socket.socket) -> bool:
    """Whether the kernel has finished the connect, asked now without waiting: a connect in
    progress polls neither writable nor in error."""
    poller = select.poll()
    poller.register(sock, select.POLLOUT)
    return bool(poller.poll(0))
