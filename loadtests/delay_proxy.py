"""A user-space TCP proxy that delays each direction: the distance between two regions.

Every chunk is forwarded ``rtt_ms / 2`` after it arrived, in order, so a request and its answer
cross it in one round trip. The upstream address may be set after the proxy listens, which lets
two gateways be configured to point at each other before either has started.

Standalone (the compose topology in deploy/docker/compose.yaml puts one between each pair of
regional gateways)::

    python -m loadtests.delay_proxy --listen 0.0.0.0:9000 --upstream gw-eu-west:8080 --rtt-ms 80
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
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

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> DelayProxy:
        self.server = await asyncio.start_server(self._accept, host, port)
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


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host, int(port)


async def _serve(listen: tuple[str, int], upstream: tuple[str, int], rtt_ms: float) -> None:
    proxy = await DelayProxy(rtt_ms, upstream).start(*listen)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    assert proxy.server is not None
    bound = proxy.server.sockets[0].getsockname()
    print(f"delay proxy {bound[0]}:{bound[1]} -> {upstream[0]}:{upstream[1]} (+{rtt_ms} ms)")
    sys.stdout.flush()
    await stop.wait()
    await proxy.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.delay_proxy", description=__doc__)
    parser.add_argument("--listen", type=_address, default=("127.0.0.1", 0), help="HOST:PORT")
    parser.add_argument("--upstream", type=_address, required=True, help="HOST:PORT")
    parser.add_argument("--rtt-ms", type=float, required=True, help="round trip to add")
    args = parser.parse_args(argv)
    asyncio.run(_serve(args.listen, args.upstream, args.rtt_ms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
