"""The gRPC server shares the aiohttp app's uvloop and lives exactly as long as the app."""

from __future__ import annotations

import asyncio

import aiohttp
import grpc
import uvloop
from aiohttp import web

from gateway.grpc.client import inference_stub
from gateway.grpc.direct_backend import DirectHttpBackend
from gateway.grpc.server import GRPC_SERVER, GrpcEngine, GrpcServerConfig, grpc_cleanup_ctx
from loadtests.emulator.config import EmulatedBackendConfig
from loadtests.emulator.server import start_emulated_backend
from proto.meridian.v1 import inference_pb2 as pb
from tests.grpc.grpc_support import FAST_ENGINE, MODEL, chat


async def _one_process_two_doors(engine: GrpcEngine) -> tuple[bool, str, int]:
    emulator = await start_emulated_backend(
        EmulatedBackendConfig(name="b1", models=(MODEL,), engine=FAST_ENGINE)
    )
    backend = DirectHttpBackend(emulator.url)
    app = web.Application()

    async def whoami(request: web.Request) -> web.Response:
        return web.Response(text=type(asyncio.get_running_loop()).__module__)

    app.router.add_get("/loop", whoami)
    app.cleanup_ctx.append(grpc_cleanup_ctx(lambda _app: backend, GrpcServerConfig(engine=engine)))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        grpc_server = app[GRPC_SERVER]
        async with grpc.aio.insecure_channel(grpc_server.target) as channel:
            stub = inference_stub(channel)
            chunks = [c async for c in stub.ChatCompletion(chat(max_tokens=3))]
        http_port = runner.addresses[0][1]
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{http_port}/loop") as response,
        ):
            loop_module = await response.text()
    finally:
        await runner.cleanup()  # unwinds cleanup_ctx: stops the gRPC server
        await backend.close()
        await emulator.close()
    stopped = False
    try:
        async with grpc.aio.insecure_channel(grpc_server.target) as channel:
            await inference_stub(channel).ListModels(pb.ListModelsRequest(), timeout=0.5)
    except grpc.aio.AioRpcError as err:
        stopped = err.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    return stopped, loop_module, len(chunks)


def test_grpc_and_http_share_one_uvloop_and_lifecycle(grpc_engine: GrpcEngine) -> None:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        stopped, loop_module, chunk_count = runner.run(_one_process_two_doors(grpc_engine))
    assert loop_module.startswith("uvloop")
    assert chunk_count >= 3
    assert stopped, "the gRPC server outlived the aiohttp app"
