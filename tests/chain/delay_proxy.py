"""A user-space TCP proxy that delays each direction: the distance between two regions.

Every chunk is forwarded ``rtt_ms / 2`` after it arrived, in order, so a request and its answer
cross it in one round trip. The upstream address may be set after the proxy listens, which lets
two gateways be configured to point at each other before either has started.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field


@dataclass
class DelayProxy:
    rtt_ms: float
    upstream: tuple[str, int] | None = None
    server: asyncio.Server | None = None
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def url(self) -> str:
        assert self.server is not None
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def point_at(self, url: str) -> None:
        host, _, port = url.removeprefix("http://").rstrip("/").partition(":")
        self.upstream = (host, int(port))

    async def start(self) -> DelayProxy:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.server is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.server.wait_closed(), 1.0)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        try:
            if self.upstream is None:
                return
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
            try:
                await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))
            finally:
                up_writer.close()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()
            self.tasks.discard(task)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        one_way_s = self.rtt_ms / 2000.0

        async def deliver() -> None:
            while True:
                due, chunk = await queue.get()
                await asyncio.sleep(max(0.0, due - loop.time()))
                if not chunk:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(chunk)
                await writer.drain()

        sender = asyncio.ensure_future(deliver())
        try:
            while chunk := await reader.read(65536):
                queue.put_nowait((loop.time() + one_way_s, chunk))
            queue.put_nowait((loop.time() + one_way_s, b""))
            await sender
        finally:
            sender.cancel()
