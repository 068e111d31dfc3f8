"""A tiny real HTTP backend for signal tests: canned metrics pages, a models list, a canary.

Real sockets on 127.0.0.1; behaviour is changed between requests by mutating ``CannedBackend``
fields. Nothing of Meridian's is mocked.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from aiohttp import web

from gateway.signals.targets import BackendTarget, Engine
from routing.types import BackendKind, BackendSpec
from tests.servers import refusing_port

VLLM_PAGE = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 4.0
vllm:num_requests_waiting{engine="1",model_name="m"} 1.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.75
# HELP vllm:prefix_cache_queries Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000.0
# HELP vllm:prefix_cache_hits Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 250.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 3.0
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 5.0
vllm:time_to_first_token_seconds_count{model_name="m"} 5.0
vllm:time_to_first_token_seconds_sum{model_name="m"} 0.9
"""

VLLM_OLD_PAGE = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 7.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 0.0
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.5
# TYPE vllm:gpu_prefix_cache_hit_rate gauge
vllm:gpu_prefix_cache_hit_rate{model_name="m"} 0.4
"""

SGLANG_PAGE = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m"} 8.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m"} 4.0
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="m"} 0.52
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{model_name="m"} 0.28
"""

TGI_PAGE = """\
# TYPE tgi_queue_size gauge
tgi_queue_size 6
# TYPE tgi_batch_current_size gauge
tgi_batch_current_size 12
# TYPE tgi_request_count counter
tgi_request_count 100
"""

LLAMACPP_PAGE = """\
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 2
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 1
# HELP llamacpp:kv_cache_usage_ratio KV-cache usage. 1 means 100 percent usage.
# TYPE llamacpp:kv_cache_usage_ratio gauge
llamacpp:kv_cache_usage_ratio 0.63
"""


@dataclass
class CannedBackend:
    """What the server answers; tests mutate these between requests."""

    metrics_page: str | bytes = VLLM_PAGE
    metrics_status: int = 200
    metrics_delay_s: float = 0.0
    huge_metrics_bytes: int = 0  # > 0: stream this many bytes, chunked, no Content-Length
    models_status: int = 200
    models_delay_s: float = 0.0
    canary_ttft_s: float = 0.0
    canary_status: int = 200
    requests: dict[str, int] = field(default_factory=dict)
    models_in_flight: int = 0
    models_in_flight_max: int = 0  # the most /v1/models requests answered at once
    url: str = ""

    def count(self, path: str) -> None:
        self.requests[path] = self.requests.get(path, 0) + 1


BACKEND = web.AppKey("backend", CannedBackend)


async def _metrics(request: web.Request) -> web.StreamResponse:
    backend: CannedBackend = request.app[BACKEND]
    backend.count("/metrics")
    await asyncio.sleep(backend.metrics_delay_s)
    if backend.huge_metrics_bytes:
        response = web.StreamResponse()
        await response.prepare(request)
        line = b"# a comment line that makes the page long " + b"x" * 1000 + b"\n"
        sent = 0
        while sent < backend.huge_metrics_bytes:
            await response.write(line)
            sent += len(line)
        await response.write_eof()
        return response
    body = backend.metrics_page
    data = body.encode() if isinstance(body, str) else body
    return web.Response(body=data, status=backend.metrics_status, content_type="text/plain")


async def _models(request: web.Request) -> web.Response:
    backend: CannedBackend = request.app[BACKEND]
    backend.count("/v1/models")
    backend.models_in_flight += 1
    backend.models_in_flight_max = max(backend.models_in_flight_max, backend.models_in_flight)
    try:
        await asyncio.sleep(backend.models_delay_s)
    finally:
        backend.models_in_flight -= 1
    return web.json_response(
        {"object": "list", "data": [{"id": "m", "object": "model"}]}, status=backend.models_status
    )


async def _chat(request: web.Request) -> web.StreamResponse:
    backend: CannedBackend = request.app[BACKEND]
    backend.count("/v1/chat/completions")
    await request.read()
    if backend.canary_status != 200:
        return web.json_response({"error": "no"}, status=backend.canary_status)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    role = b'{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}'
    await response.write(b"data: " + role + b"\n\n")  # vLLM sends the role before any token
    await asyncio.sleep(backend.canary_ttft_s)
    token = b'{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"length"}]}'
    await response.write(b"data: " + token + b"\n\ndata: [DONE]\n\n")
    await response.write_eof()
    return response


@asynccontextmanager
async def canned_backend(backend: CannedBackend | None = None) -> AsyncIterator[CannedBackend]:
    backend = backend or CannedBackend()
    app = web.Application()
    app[BACKEND] = backend
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/v1/models", _models)
    app.router.add_post("/v1/chat/completions", _chat)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    backend.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield backend
    finally:
        await runner.cleanup()


def target(
    name: str,
    url: str,
    engine: Engine = Engine.VLLM,
    kind: BackendKind = BackendKind.DEDICATED,
    region: str = "local",
    idle_timeout_s: float | None = None,
    keep_warm: bool = False,
) -> BackendTarget:
    spec = BackendSpec(
        name=name,
        region=region,
        kind=kind,
        models=frozenset({"m"}),
        idle_timeout_s=idle_timeout_s,
    )
    return BackendTarget(spec=spec, base_url=url, engine=engine, keep_warm=keep_warm)


def closed_port_url() -> str:
    """A loopback URL nothing listens on while the tests run (a port bound and closed at once
    could be handed to another server, of this suite or of the machine, meanwhile)."""
    return f"http://127.0.0.1:{refusing_port()}"


class FakeClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
