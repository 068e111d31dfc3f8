"""The client against a real HTTP server on 127.0.0.1 that scripts the bytes of each response."""

import asyncio
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from loadtests.bench.client import stream_completion
from loadtests.bench.records import ErrorKind
from loadtests.bench.runner import run_bench
from loadtests.bench.workload import parse_workload

GAP_S = 0.05
SEEN = web.AppKey("seen", list)


def _chunk(
    content: str | None = None, finish: str | None = None, usage: dict[str, Any] | None = None
) -> bytes:
    choices = (
        []
        if content is None and finish is None
        else [
            {"index": 0, "delta": {"content": content} if content else {}, "finish_reason": finish}
        ]
    )
    payload: dict[str, Any] = {"object": "chat.completion.chunk", "choices": choices}
    if usage:
        payload["usage"] = usage
    return b"data: " + orjson.dumps(payload) + b"\r\n\r\n"


async def _stream(request: web.Request, script: list[bytes | float]) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "X-Meridian-Route": "region=us-east; backend=a1",
            "Server-Timing": "gw;dur=1.2, upstream_ttfb;dur=40",
        }
    )
    await response.prepare(request)
    for part in script:
        if isinstance(part, float):
            await asyncio.sleep(part)
        else:
            await response.write(part)
    return response


async def happy(request):
    body = await request.json()
    request.app[SEEN].append((dict(request.headers), body))
    usage = {
        "prompt_tokens": 77,
        "completion_tokens": 3,
        "prompt_tokens_details": {"cached_tokens": 32},
    }
    return await _stream(
        request,
        [
            b": warming up\n\n",
            _chunk("Hel"),
            GAP_S,
            _chunk("lo"),
            GAP_S,
            _chunk(" you", finish="stop"),
            _chunk(usage=usage),
            b"data: [DONE]\n\n",
            b': meridian-timing {"itl_ms": [50, 50]}\n\n',
        ],
    )


async def rate_limited(request):
    return web.json_response({"error": {"message": "slow down"}}, status=429)


async def broken(request):
    response = await _stream(request, [_chunk("a"), _chunk("b")])
    request.transport.close()  # dies mid-stream: no finish_reason, no [DONE]
    return response


async def in_stream_error(request):
    return await _stream(request, [_chunk("a"), b'data: {"error": {"message": "oom"}}\n\n'])


async def stall(request):
    return await _stream(request, [_chunk("a"), 1.0])


@pytest.fixture
async def server():
    app = web.Application()
    app[SEEN] = []
    for path, handler in {
        "happy": happy,
        "429": rate_limited,
        "broken": broken,
        "error": in_stream_error,
        "stall": stall,
    }.items():
        app.router.add_post(f"/{path}/v1/chat/completions", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield app, f"http://127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


WORKLOAD = {
    "seed": 1,
    "model": "m",
    "arrival": {"mode": "closed", "concurrency": 2},
    "limits": {"requests": 4},
    "mix": [{"kind": "chat", "user_tokens": 8, "max_tokens": 3}],
    "populations": [{"origin": "eu-west", "addresses": ["203.0.113.9"]}],
    "tenants": [{"name": "acme"}],
}


async def test_run_records_timing_usage_route_and_final_comment(server):
    app, url = server
    result = await run_bench(url + "/happy", parse_workload(WORKLOAD))
    assert len(result.records) == 4 and all(r.ok for r in result.records)
    record = result.records[0]
    assert record.token_times_s[0] == record.ttft_s
    # The gaps are the differences of the token times; each token is written GAP_S after the
    # one before, so the last arrives at least 2 * GAP_S after the send (a single gap can be
    # shorter on a busy machine: a late token, then one on time).
    times = record.token_times_s
    assert record.itl_gaps_s == pytest.approx((times[1] - times[0], times[2] - times[1]))
    assert times[-1] >= 2 * GAP_S
    assert (record.e2e_s or 0.0) >= record.token_times_s[-1]
    assert (record.prompt_tokens, record.completion_tokens, record.cached_tokens) == (77, 3, 32)
    assert record.usage_reported
    assert record.backend == "a1"
    assert record.server_timing == "gw;dur=1.2, upstream_ttfb;dur=40"
    assert record.final_comment == 'meridian-timing {"itl_ms": [50, 50]}'
    headers, body = app[SEEN][0]
    assert headers["X-Meridian-Origin"] == "eu-west"
    assert headers["X-Forwarded-For"] == "203.0.113.9"
    assert headers["X-Meridian-Tenant"] == "acme"
    assert body["user"] == "acme" and body["model"] == "m" and body["max_tokens"] == 3


async def test_identity_can_be_turned_off(server):
    app, url = server
    identity = {
        "origin_header": None,
        "forwarded_for": False,
        "tenant_header": None,
        "tenant_in_user_field": False,
    }
    workload = parse_workload({**WORKLOAD, "identity": identity, "limits": {"requests": 1}})
    await run_bench(url + "/happy", workload)
    headers, body = app[SEEN][0]
    assert not {"X-Meridian-Origin", "X-Forwarded-For", "X-Meridian-Tenant"} & set(headers)
    assert "user" not in body


@pytest.mark.parametrize(
    ("path", "kind", "status"),
    [
        ("429", ErrorKind.HTTP_STATUS, 429),
        ("broken", ErrorKind.STREAM_BROKEN, 200),
        ("error", ErrorKind.STREAM_ERROR, 200),
    ],
)
async def test_failures_are_classified(server, path, kind, status):
    _, url = server
    async with aiohttp.ClientSession() as http:
        exchange = await stream_completion(http, f"{url}/{path}/v1/chat/completions", {}, {})
    assert (exchange.error, exchange.status) == (kind, status)
    assert exchange.detail


async def test_timeout_and_refused_connection():
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=0.3)) as http:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", stall)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            stalled = await stream_completion(
                http, f"http://127.0.0.1:{port}/v1/chat/completions", {}, {}
            )
        finally:
            await runner.cleanup()
        refused = await stream_completion(
            http, f"http://127.0.0.1:{port}/v1/chat/completions", {}, {}
        )
    assert stalled.error is ErrorKind.TIMEOUT and stalled.token_times
    assert refused.error is ErrorKind.CONNECT and refused.status is None


async def test_closed_loop_ramp_up_spreads_the_users_starts(server):
    _, url = server
    arrival = {"mode": "closed", "concurrency": 4, "ramp_up_s": 0.3}
    workload = parse_workload({**WORKLOAD, "arrival": arrival})
    result = await run_bench(url + "/happy", workload)
    starts = sorted(r.sent_s for r in result.records)
    # Users start at 0, 75, 150 and 225 ms; user 0's next request waits for its ~100 ms reply.
    assert starts[1] - starts[0] >= 0.06
