"""The upstream connect's deadline (gateway/tcp_connect.py): a handshake the kernel completed is
a connection even when the loop, busy for longer than the timeout, looks at it only after the
deadline; one still in progress at the deadline is a timeout; a refused one is its error.

The loop's lag is made, not waited for: the test blocks the loop in a plain ``accept()`` on a
listening socket, which returns once the kernel has completed the handshake — so the handshake
is done, and the deadline (a microsecond) long past, before the loop next runs a timer or polls.
A host that never answers is a port whose accept queue is full, so the kernel drops its SYNs
(``tests.servers.unanswering_port``).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from yarl import URL

from gateway.http_client import ConnectionPool
from gateway.tcp_connect import ConnectTimeout, connect_socket, literal_addresses, looked_up
from tests.gateway.support import MODEL, config_for
from tests.servers import GatewayFactory, open_fds, refusing_port, unanswering_port

_SAFETY_S = 30.0  # a blocking accept that never returns would hang the suite: it fails instead


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    sock = socket.create_server(("127.0.0.1", 0), backlog=8)
    sock.settimeout(_SAFETY_S)
    yield sock
    sock.close()


def _url(sock: socket.socket) -> URL:
    return URL(f"http://127.0.0.1:{sock.getsockname()[1]}")


async def _start_then_block_until_accepted(
    listener: socket.socket, connecting: asyncio.Future[Any]
) -> socket.socket:
    """Let ``connecting`` send its SYN, then hold the loop until the kernel finished the
    handshake (the accept queue has it) — the deadline passes meanwhile."""
    await asyncio.sleep(0)  # one turn: the connect runs up to its wait
    assert not connecting.done()
    accepted, _ = listener.accept()  # blocks the loop, on purpose
    return accepted


async def test_a_handshake_done_before_a_late_loop_looks_is_a_connection(
    listener: socket.socket,
) -> None:
    pool = ConnectionPool(_url(listener), 4, True)
    acquiring = asyncio.ensure_future(pool.acquire(connect_s=1e-6))
    accepted = await _start_then_block_until_accepted(listener, acquiring)
    try:
        conn, reused, _ = await acquiring
        assert not reused and not conn.closed
        conn.close()
    finally:
        accepted.close()
        pool.close()


async def test_the_socket_level_connect_reads_the_kernel_after_a_late_deadline(
    listener: socket.socket,
) -> None:
    (target,) = literal_addresses("127.0.0.1", listener.getsockname()[1]) or []
    deadline = asyncio.get_running_loop().time()  # already passed
    connecting = asyncio.ensure_future(connect_socket(target, deadline))
    accepted = await _start_then_block_until_accepted(listener, connecting)
    with accepted, await connecting as sock:
        assert sock.getpeername() == accepted.getsockname()


async def test_a_handshake_still_in_progress_at_the_deadline_times_out_and_leaks_no_socket() -> (
    None
):
    (target,) = literal_addresses("127.0.0.1", unanswering_port()) or []
    opened_before = open_fds()
    with pytest.raises(ConnectTimeout):
        await connect_socket(target, asyncio.get_running_loop().time() + 0.05)
    assert open_fds() == opened_before


async def test_a_refused_connect_is_its_error_not_a_timeout() -> None:
    pool = ConnectionPool(URL(f"http://127.0.0.1:{refusing_port()}"), 4, True)
    with pytest.raises(ConnectionRefusedError):
        await pool.acquire(connect_s=30.0)


async def test_a_host_name_is_looked_up_and_an_ip_literal_is_not() -> None:
    assert literal_addresses("127.0.0.1", 80) == [(socket.AF_INET, ("127.0.0.1", 80))]
    assert literal_addresses("::1", 80) == [(socket.AF_INET6, ("::1", 80, 0, 0))]
    assert literal_addresses("localhost", 80) is None
    found = await looked_up("localhost", 80)
    assert found and all(address[1] == 80 for _, address in found)


async def test_the_client_is_told_the_backend_took_no_connection_not_that_no_token_came(
    gateway: GatewayFactory,
) -> None:
    timeouts = {"first_token_s": 30.0, "connect_s": 0.2}
    running = await gateway(
        config_for({"b1": f"http://127.0.0.1:{unanswering_port()}"}, timeouts=timeouts)
    )
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    async with aiohttp.ClientSession() as session:
        async with session.post(running.url + "/v1/chat/completions", json=body) as response:
            assert response.status == 504
            error = (await response.json())["error"]
    assert error["code"] == "upstream_timeout"
    assert "b1: timeout (no connection within the connect timeout)" in error["message"]
    assert "127.0.0.1" not in error["message"]
