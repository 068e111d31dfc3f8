"""One emulated backend as an aiohttp server: vLLM's OpenAI endpoints plus admin controls.

Distance is emulated in user space: half the configured round trip passes before a request
reaches the engine and every response byte leaves half a round trip after the engine produced
it, so TTFT grows by the RTT and inter-token gaps do not. The light endpoints a prober uses
(``/v1/models``, ``/health``) pay the same round trip, so probes see the distance a routed
request pays. ``POST /admin/rtt`` changes the round trip at run time (a region getting far).
"""

from __future__ import annotations

import asyncio
import random
import ssl
import time
from dataclasses import dataclass

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gateway.tokenizer import load_tokenizers
from loadtests.emulator import api_wires
from loadtests.emulator.api_wires import Adapter
from loadtests.emulator.config import EmulatedBackendConfig, FaultConfig
from loadtests.emulator.driver import LiveStats, RealtimeEngine
from loadtests.emulator.faults import plan_request
from loadtests.emulator.metrics import EngineMetrics
from loadtests.emulator.openai_format import (
    ApiError,
    Endpoint,
    bad_request,
    model_not_found,
    models_body,
    parse_request,
    tool_to_call,
)
from loadtests.emulator.streaming import (
    GenerationContext,
    drop_connection,
    respond_complete,
    respond_stream,
)
from loadtests.emulator.wire import WireFactory

__all__ = [
    "EmulatedBackendConfig",
    "FaultConfig",
    "LiveStats",
    "RunningEmulator",
    "start_emulated_backend",
]

JSON = "application/json"


class EmulatedBackend:
    """Everything one listener shares across its requests."""

    def __init__(self, config: EmulatedBackendConfig) -> None:
        self.config = config
        self.faults = config.faults
        self.rtt_ms = config.rtt_ms  # live: /admin/rtt changes it, /admin/reset restores it
        # What light requests (the probes' /v1/models, /health) pay instead, when their path is
        # not the requests' one (a health endpoint in front of the slow hop). None: rtt_ms.
        self.probe_rtt_ms: float | None = None
        self.rng = random.Random(config.seed)
        self.driver = RealtimeEngine(config.engine)
        path = config.engine.tokenizer  # counts prompts in real tokens (gateway/tokenizer.py)
        self.tokenizer = load_tokenizers({"engine": path})["engine"] if path else None
        self.metrics = EngineMetrics(config.models[0])
        self.stats = LiveStats(self.driver)
        self.created = int(time.time())
        self._next_seq = 0

    @property
    def half_rtt_s(self) -> float:
        return self.rtt_ms / 2000.0

    def next_seq_id(self) -> int:
        self._next_seq += 1
        return self._next_seq


BACKEND = web.AppKey("backend", EmulatedBackend)


def error_response(error: ApiError, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        status=error.status, body=error.body(), content_type=JSON, headers=headers or {}
    )


async def _generate(
    request: web.Request, endpoint: Endpoint, adapter: Adapter | None = None
) -> web.StreamResponse:
    backend = request.app[BACKEND]
    backend.stats.requests += 1
    raw = await request.read()
    await asyncio.sleep(backend.half_rtt_s)  # the request's trip to the engine
    response = await _admit(request, backend, raw, endpoint, adapter)
    if isinstance(response, web.Response):
        backend.stats.errors += 1
        await asyncio.sleep(backend.half_rtt_s)
        return response
    if response.parsed.stream:
        return await respond_stream(request, response)
    return await respond_complete(request, response)


async def _admit(
    request: web.Request,
    backend: EmulatedBackend,
    raw: bytes,
    endpoint: Endpoint,
    adapter: Adapter | None,
) -> web.Response | GenerationContext:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return error_response(bad_request(f"request body is not valid JSON: {exc}"))
    wire: WireFactory | None = None
    if adapter is not None and isinstance(body, dict):  # another API, run as chat/completions
        adapted = adapter(body)
        if isinstance(adapted, ApiError):
            return error_response(adapted)
        body, endpoint, wire = adapted
    parsed = parse_request(body, endpoint, backend.config.engine.max_model_len)
    if isinstance(parsed, ApiError):
        return error_response(parsed)
    if parsed.model not in backend.config.models:
        return error_response(model_not_found(parsed.model))
    plan = plan_request(backend.faults, backend.rng)
    if plan.rejection is not None:
        rejection = plan.rejection
        kind = {429: "RateLimitError", 503: "ServiceUnavailableError"}.get(rejection.status)
        error = ApiError(rejection.status, kind or "InternalServerError", rejection.message)
        retry = rejection.retry_after_s
        headers = {"Retry-After": f"{retry:g}"} if retry is not None else None
        return error_response(error, headers)
    tool = tool_to_call(body) if endpoint is Endpoint.CHAT and wire is None else None
    return GenerationContext.start(backend, parsed, plan, wire, tool)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, Endpoint.CHAT)


async def completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, Endpoint.COMPLETION)


async def embeddings(request: web.Request) -> web.StreamResponse:
    return await _generate(request, Endpoint.COMPLETION, api_wires.embeddings)


async def responses(request: web.Request) -> web.StreamResponse:
    return await _generate(request, Endpoint.CHAT, api_wires.responses)


async def messages(request: web.Request) -> web.StreamResponse:
    return await _generate(request, Endpoint.CHAT, api_wires.messages)


async def _round_trip(backend: EmulatedBackend) -> None:
    """A light request's two half trips, for endpoints that answer at once (the probes')."""
    rtt_ms = backend.rtt_ms if backend.probe_rtt_ms is None else backend.probe_rtt_ms
    if rtt_ms > 0:
        await asyncio.sleep(rtt_ms / 1000.0)


async def list_models(request: web.Request) -> web.Response:
    config = request.app[BACKEND].config
    await _round_trip(request.app[BACKEND])
    body = models_body(
        tuple(config.models), request.app[BACKEND].created, config.engine.max_model_len
    )
    return web.Response(body=body, content_type=JSON)


async def health(request: web.Request) -> web.Response:
    await _round_trip(request.app[BACKEND])
    return web.Response(status=200)


async def metrics(request: web.Request) -> web.Response:
    backend = request.app[BACKEND]
    body = backend.metrics.exposition(backend.driver.counters())
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})


async def admin_stats(request: web.Request) -> web.Response:
    backend = request.app[BACKEND]
    payload: dict[str, object] = {**backend.stats.as_dict(), "cold": backend.driver.counters().cold}
    payload["last_step_end_s"] = backend.driver.last_step_end()  # the loop's (monotonic) clock
    return web.Response(body=orjson.dumps(payload), content_type=JSON)


async def admin_faults(request: web.Request) -> web.Response:
    backend = request.app[BACKEND]
    try:
        backend.faults = FaultConfig.model_validate_json(await request.read() or b"{}")
    except ValidationError as exc:
        return error_response(bad_request(f"invalid faults: {exc}"))
    return web.Response(body=backend.faults.model_dump_json().encode(), content_type=JSON)


class RttChange(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rtt_ms: float = Field(ge=0, description="round trip added in user space from now on")
    probe_rtt_ms: float | None = Field(
        default=None,
        ge=0,
        description="what /v1/models and /health (the probes' path) pay instead (default: rtt_ms)",
    )


async def admin_rtt(request: web.Request) -> web.Response:
    """Set the emulated round trip; requests already past their first half keep the old one."""
    backend = request.app[BACKEND]
    try:
        change = RttChange.model_validate_json(await request.read() or b"{}")
    except ValidationError as exc:
        return error_response(bad_request(f"invalid rtt: {exc}"))
    backend.rtt_ms, backend.probe_rtt_ms = change.rtt_ms, change.probe_rtt_ms
    body: dict[str, float] = {"rtt_ms": backend.rtt_ms}
    if backend.probe_rtt_ms is not None:
        body["probe_rtt_ms"] = backend.probe_rtt_ms
    return web.Response(body=orjson.dumps(body), content_type=JSON)


async def admin_reset(request: web.Request) -> web.Response:
    """Clear faults, counters, the engine and its prefix cache; reseed the RNG; config RTT."""
    backend = request.app[BACKEND]
    backend.faults = backend.config.faults
    backend.rtt_ms, backend.probe_rtt_ms = backend.config.rtt_ms, None
    backend.rng = random.Random(backend.config.seed)
    backend.driver.reset()
    backend.stats.reset()
    return web.Response(body=orjson.dumps(backend.stats.as_dict()), content_type=JSON)


@web.middleware
async def refuse_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    backend = request.app[BACKEND]
    if backend.faults.refuse_connections and not request.path.startswith("/admin/"):
        backend.stats.errors += 1
        drop_connection(request)
        return web.Response(status=503)  # never sent: the connection is already reset
    if request.path in backend.faults.unserved_paths:  # a server built without this API
        status = backend.faults.unserved_status
        body = {"error": {"message": "not served here", "type": "NotFoundError", "code": status}}
        return web.Response(status=status, body=orjson.dumps(body), content_type=JSON)
    return await handler(request)


def build_app(config: EmulatedBackendConfig) -> web.Application:
    app = web.Application(middlewares=[refuse_middleware], client_max_size=64 * 1024 * 1024)
    app[BACKEND] = EmulatedBackend(config)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/embeddings", embeddings)
    app.router.add_post("/v1/responses", responses)
    app.router.add_post("/v1/messages", messages)
    app.router.add_get("/v1/models", list_models)
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/admin/stats", admin_stats)
    app.router.add_post("/admin/faults", admin_faults)
    app.router.add_post("/admin/reset", admin_reset)
    app.router.add_post("/admin/rtt", admin_rtt)
    return app


@dataclass(slots=True)
class RunningEmulator:
    name: str
    url: str  # the OpenAI base URL is url + "/v1"
    config: EmulatedBackendConfig
    _runner: web.AppRunner
    _backend: EmulatedBackend

    @property
    def stats(self) -> LiveStats:
        return self._backend.stats

    @property
    def faults(self) -> FaultConfig:
        return self._backend.faults

    def set_faults(self, faults: FaultConfig) -> None:
        self._backend.faults = faults

    def set_rtt_ms(self, rtt_ms: float) -> None:
        self._backend.rtt_ms = rtt_ms

    def open_connections(self) -> int:
        """Client connections the emulator's server holds now (in use or kept alive)."""
        server = self._runner.server
        return 0 if server is None else len(server.connections)

    async def close(self) -> None:
        self._backend.driver.close()
        await self._runner.cleanup()


async def start_emulated_backend(
    config: EmulatedBackendConfig,
    host: str = "127.0.0.1",
    port: int = 0,
    tls: ssl.SSLContext | None = None,
) -> RunningEmulator:
    """Serve ``config`` on ``host:port``; over HTTPS with ``tls`` (a server context), as a real
    provider's endpoint is."""
    app = build_app(config)
    # handler_cancellation: a client that goes away cancels its handler, which frees the slot.
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=tls)
    await site.start()
    bound_port = runner.addresses[0][1]
    scheme = "http" if tls is None else "https"
    url = f"{scheme}://{host}:{bound_port}"
    return RunningEmulator(config.name, url, config, runner, app[BACKEND])
