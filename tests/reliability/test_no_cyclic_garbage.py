"""A streamed request leaves nothing for the cyclic garbage collector: its objects are freed by
reference counting the moment it ends.

They used to form cycles (the opened stream and its request hold, the upstream response and
its parser, the read watch and its exchange), so every request's ~60 objects waited for a
collection. At c=32 that was a young collection of ~7,000 objects every ~0.5 s (~5 ms, every
stream stalled) and a middle one of ~27,000 every ~5 s (~23 ms): the c=32 p99 of added TTFT
(docs/results/perf-issue16.md, session 19). Here a real gateway process relays 300 streams
(then 300 refusals, then 700 gRPC calls on the h2 engine), and its own
``python_gc_objects_collected_total`` says what the collector had to free meanwhile: a cycle
left by every request makes it thousands (the young generation's threshold, gateway/heap.py,
is crossed at least once); with none, it frees next to nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import grpc

from gateway.grpc.client import inference_stub
from loadtests.bench.lean_client import run_lean
from loadtests.bench.overhead_setup import one_backend_config, overhead_workload
from loadtests.bench.workload import parse_workload
from loadtests.processes import mock_backend
from proto.meridian.v1 import inference_pb2 as pb
from tests.chain.chain_rig import free_port
from tests.reliability.support import ServeProcess, serve_process, write_config
from tests.servers import scraped_sum

REQUESTS = 300
MODEL = "mock-model"


@contextlib.asynccontextmanager
async def gateway_on_a_mock(
    tmp_path: Path, listen: dict[str, object] | None = None
) -> AsyncIterator[ServeProcess]:
    """A ``meridian serve`` process in front of a mock backend (1 ms to a first token)."""
    async with mock_backend(MODEL, ttft_ms=1.0, itl_ms=0.2) as (backend_url, _):
        path = tmp_path / "gateway.yaml"
        config = one_backend_config("b1", backend_url)
        config["backends"][0]["models"] = [MODEL]
        if listen is not None:
            config["listen"] = listen
        write_config(path, config)
        async with serve_process(path) as gateway:
            yield gateway


async def collected_by_the_collector(admin_url: str) -> float:
    async with aiohttp.ClientSession() as session:
        return await scraped_sum(session, admin_url + "/metrics", "python_gc_objects_collected")


async def test_streamed_requests_leave_no_cyclic_garbage(tmp_path: Path) -> None:
    warm, measured = overhead_workload(4, 40), overhead_workload(4, REQUESTS)
    for workload in (warm, measured):
        workload["model"] = MODEL
    async with gateway_on_a_mock(tmp_path) as gateway:
        await run_lean(gateway.url, parse_workload(warm))  # pools, first-use caches
        before = await collected_by_the_collector(gateway.admin_url)
        result = await run_lean(gateway.url, parse_workload(measured))
        after = await collected_by_the_collector(gateway.admin_url)
    assert len(result.records) == REQUESTS
    assert all(record.ok for record in result.records), result.records[0].error_detail
    assert after - before < REQUESTS, f"the collector freed {after - before:.0f} objects"


async def test_refused_requests_leave_no_cyclic_garbage(tmp_path: Path) -> None:
    """A refusal's error held its traceback, whose frames held the error."""
    unknown = b'{"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]}'
    refusals = [(unknown, 404), (b'{"model": ', 400)] * (REQUESTS // 2)
    json = {"Content-Type": "application/json"}
    async with gateway_on_a_mock(tmp_path) as gateway, aiohttp.ClientSession() as session:
        chat = gateway.url + "/v1/chat/completions"
        before = await collected_by_the_collector(gateway.admin_url)
        for body, status in refusals:
            async with session.post(chat, data=body, headers=json) as reply:
                assert reply.status == status, await reply.text()
        after = await collected_by_the_collector(gateway.admin_url)
    assert after - before < REQUESTS, f"the collector freed {after - before:.0f} objects"


# Each h2 call left ~19 objects: the young generation's threshold (10,000) is crossed within
# this many calls, so a cycle per call shows. (grpcio's own call objects leave 5 a call, in its
# Cython method lookup: not the gateway's, and not tested here.)
GRPC_CALLS = 700


async def test_grpc_calls_on_the_h2_engine_leave_no_cyclic_garbage(tmp_path: Path) -> None:
    """On the h2 engine a call and its servicer context held each other."""
    port = free_port()
    listen = {"host": "127.0.0.1", "grpc_port": port, "grpc_engine": "h2"}
    message = pb.ChatMessage(role="user", text="hello " * 10)
    request = pb.ChatCompletionRequest(model=MODEL, messages=[message], max_tokens=8)
    async with (
        gateway_on_a_mock(tmp_path, listen) as gateway,
        grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel,
    ):
        stub = inference_stub(channel)
        async for _ in stub.ChatCompletion(request):  # the channel, first-use caches
            pass
        before = await collected_by_the_collector(gateway.admin_url)
        for _ in range(GRPC_CALLS):
            chunks = [chunk async for chunk in stub.ChatCompletion(request)]
            assert any(choice.delta.content for chunk in chunks for choice in chunk.choices)
        after = await collected_by_the_collector(gateway.admin_url)
    assert after - before < REQUESTS, f"the collector freed {after - before:.0f} objects"
