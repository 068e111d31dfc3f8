"""A streamed request leaves nothing for the cyclic garbage collector: its objects are freed by
reference counting the moment it ends.

They used to form cycles (the opened stream and its request hold, the upstream response and
its parser, the read watch and its exchange; in session 21 the lean door's SSE response counting
its bytes into itself), so every request's objects waited for a collection. At c=32 that was a
young collection of ~7,000 objects every ~0.5 s (~5 ms, every stream stalled) and a middle one
of ~27,000 every ~5 s (~23 ms): the c=32 p99 of added TTFT (docs/results/perf-issue16.md,
session 19). Here a real gateway process relays 300 streams (then 300 refusals, then 700 gRPC
calls on the h2 engine); before and after, the test has it run a full collection that keeps
what it finds (``tests/reliability/gc_probe.py``), so every cycle the load left is counted, by
type, on every run (the gateway's own young threshold is 10,000 allocations: a test that waited
for it saw a per-request cycle only when a collection happened to fall in its window).
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import grpc

from gateway.grpc.client import inference_stub
from loadtests.bench.lean_client import run_lean
from loadtests.bench.overhead_setup import one_backend_config, overhead_workload
from loadtests.bench.workload import parse_workload
from loadtests.processes import mock_backend
from proto.meridian.v1 import inference_pb2 as pb
from tests.ports import unclaimed_port
from tests.reliability.support import ServeProcess, serve_process, write_config
from tests.servers import settle

REQUESTS = 300
MODEL = "mock-model"


@dataclass
class ProbedGateway:
    """A gateway process that runs a full collection when asked and reports what it freed."""

    process: ServeProcess
    report: Path

    @property
    def url(self) -> str:
        return self.process.url

    async def collect(self) -> Counter[str]:
        """What a full collection finds now, by type (everything a load left since the last)."""
        self.report.unlink(missing_ok=True)
        self.process.signal(signal.SIGUSR2)
        await settle(self.report.exists)
        found: dict[str, int] = json.loads(self.report.read_text())
        return Counter(found)


@contextlib.asynccontextmanager
async def gateway_on_a_mock(
    tmp_path: Path, listen: dict[str, object] | None = None
) -> AsyncIterator[ProbedGateway]:
    """A probed ``meridian serve`` process in front of a mock backend (1 ms to a first token)."""
    async with mock_backend(MODEL, ttft_ms=1.0, itl_ms=0.2) as (backend_url, _):
        path = tmp_path / "gateway.yaml"
        config = one_backend_config("b1", backend_url)
        config["backends"][0]["models"] = [MODEL]
        if listen is not None:
            config["listen"] = listen
        write_config(path, config)
        report = tmp_path / "collected.json"
        launcher = [sys.executable, "-m", "tests.reliability.gc_probe", str(report)]
        async with serve_process(path, launcher) as process:
            yield ProbedGateway(process, report)


def described(found: Counter[str]) -> str:
    return f"the collector found {found.total()} objects: {found.most_common(8)}"


async def test_streamed_requests_leave_no_cyclic_garbage(tmp_path: Path) -> None:
    warm, measured = overhead_workload(4, 40), overhead_workload(4, REQUESTS)
    for workload in (warm, measured):
        workload["model"] = MODEL
    async with gateway_on_a_mock(tmp_path) as gateway:
        await run_lean(gateway.url, parse_workload(warm))  # pools, first-use caches
        await gateway.collect()
        result = await run_lean(gateway.url, parse_workload(measured))
        found = await gateway.collect()
    assert len(result.records) == REQUESTS
    assert all(record.ok for record in result.records), result.records[0].error_detail
    assert found.total() < REQUESTS, described(found)


async def test_refused_requests_leave_no_cyclic_garbage(tmp_path: Path) -> None:
    """A refusal's error held its traceback, whose frames held the error."""
    unknown = b'{"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]}'
    refusals = [(unknown, 404), (b'{"model": ', 400)] * (REQUESTS // 2)
    headers = {"Content-Type": "application/json"}
    async with gateway_on_a_mock(tmp_path) as gateway, aiohttp.ClientSession() as session:
        chat = gateway.url + "/v1/chat/completions"
        await gateway.collect()
        for body, status in refusals:
            async with session.post(chat, data=body, headers=headers) as reply:
                assert reply.status == status, await reply.text()
        found = await gateway.collect()
    assert found.total() < REQUESTS, described(found)


# Each h2 call left ~19 objects: the young generation's threshold (10,000) is crossed within
# this many calls, so a cycle per call shows. (grpcio's own call objects leave 5 a call, in its
# Cython method lookup: not the gateway's, and not tested here.)
GRPC_CALLS = 700


async def test_grpc_calls_on_the_h2_engine_leave_no_cyclic_garbage(tmp_path: Path) -> None:
    """On the h2 engine a call and its servicer context held each other."""
    port = unclaimed_port()
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
        await gateway.collect()
        for _ in range(GRPC_CALLS):
            chunks = [chunk async for chunk in stub.ChatCompletion(request)]
            assert any(choice.delta.content for chunk in chunks for choice in chunk.choices)
        found = await gateway.collect()
    assert found.total() < REQUESTS, described(found)
