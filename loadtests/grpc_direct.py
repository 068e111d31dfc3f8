"""A bare gRPC door straight to one backend: the same-protocol baseline of the gRPC overhead
benchmark (``loadtests/bench_grpc_overhead.py``).

    python -m loadtests.grpc_direct --backend-url http://127.0.0.1:PORT [--engine grpcio|h2]

Serves ``meridian.v1.Inference`` with the gateway's own servicer over
:class:`gateway.grpc.direct_backend.DirectHttpBackend` (no routing, relay core or timing), on an
ephemeral port, and prints one JSON line ``{"url": "127.0.0.1:PORT", "ready": true}``. What the
gateway's gRPC door adds over it is the gateway's own work, as the HTTP door's added TTFT is
measured against the backend's own HTTP; what it adds over the direct HTTP side includes the gRPC
machinery of both ends (grpc.aio's completion-queue round trips), which no gateway code removes.
Runs until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

import orjson

from gateway.grpc.direct_backend import DirectHttpBackend
from gateway.grpc.server import GrpcEngine, GrpcServerConfig, serving_grpc


async def serve(backend_url: str, engine: GrpcEngine = "grpcio") -> None:
    backend = DirectHttpBackend(backend_url)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with serving_grpc(
            backend, GrpcServerConfig(reflection=False, engine=engine)
        ) as running:
            sys.stdout.write(orjson.dumps({"url": running.target, "ready": True}).decode() + "\n")
            sys.stdout.flush()
            await stop.wait()
    finally:
        await backend.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.grpc_direct", description=__doc__)
    parser.add_argument("--backend-url", required=True, help="the backend's root URL")
    parser.add_argument("--engine", choices=("grpcio", "h2"), default="grpcio", help="gRPC engine")
    args = parser.parse_args(argv)
    import uvloop

    uvloop.run(serve(args.backend_url, args.engine))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
