"""Acceptance 1, 2 and Retry-After: failures before the first token stay invisible, or honest."""

from __future__ import annotations

import time

import orjson

from gateway.state_keys import RELAY
from gateway.timing import parse
from loadtests.emulator.config import FaultConfig
from tests.reliability.support import (
    SETTLE_S,
    EmulatorFactory,
    GatewayFactory,
    carries_token,
    chat,
    closed_port,
    config_for,
    post,
)


def _assert_one_clean_stream(reply_events: list[bytes], tokens: int) -> None:
    data = [e for e in reply_events if e.startswith(b"data: ")]
    assert data[-1] == b"data: [DONE]"
    assert sum(carries_token(e) for e in data) == tokens
    assert not any(b'"error"' in e for e in data)
    ids = {e.split(b'"id":"')[1].split(b'"')[0] for e in data if b'"id":"' in e}
    assert len(ids) == 1, f"events from more than one upstream response: {ids}"


async def test_refused_503_and_stalled_first_backends_each_fall_back_cleanly(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    good = await emulator("z-good")
    unavailable = await emulator("a-503", faults=FaultConfig(unavailable_rate=1.0, retry_after_s=0))
    stalled = await emulator("a-stall", faults=FaultConfig(stall_ms=5_000.0))
    first_urls = {
        "a-refused": f"http://127.0.0.1:{closed_port()}",
        "a-503": unavailable.url,
        "a-stall": stalled.url,
    }
    for name, url in first_urls.items():
        config = config_for({name: url, "z-good": good.url}, timeouts={"first_token_s": 0.3})
        running = await gateway(config)
        reply = await post(running.url, chat(max_tokens=5))
        assert reply.status == 200, (name, reply.body)
        route = reply.headers["X-Meridian-Route"]
        assert "backend=z-good" in route and "attempts=2" in route, (name, route)
        _assert_one_clean_stream(reply.events, 5)
        timing = {e.name: e for e in parse(reply.headers["Server-Timing"])}
        assert timing["attempt1"].desc is not None and timing["attempt1"].desc.startswith(name)
        assert timing["attempt2"].desc == "z-good try ok"
        assert running.app[RELAY].fleet.in_flight(name) == 0
    assert stalled.stats.cancelled == 1  # the slow attempt was cancelled upstream
    assert unavailable.stats.requests == 1


async def test_all_backends_failing_is_a_real_error_never_a_200(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    cases = [
        (FaultConfig(unavailable_rate=1.0, retry_after_s=0), 503, "no_backend_available"),
        (FaultConfig(rate_limit_rate=1.0, retry_after_s=0), 429, "rate_limit_exceeded"),
        (FaultConfig(error_rate=1.0), 502, "upstream_error"),
    ]
    for index, (faults, status, code) in enumerate(cases):
        a = await emulator(f"a{index}", faults=faults)
        b = await emulator(f"b{index}", faults=faults)
        running = await gateway(config_for({"a": a.url, "b": b.url}))
        reply = await post(running.url, chat())
        assert reply.status == status, reply.body
        assert reply.headers["Content-Type"].startswith("application/json")
        error = orjson.loads(reply.body)["error"]
        assert error["code"] == code and "all 2 attempts" in error["message"]
        if status in (429, 503):
            assert int(reply.headers["Retry-After"]) >= 1
        assert a.stats.requests == 1 and b.stats.requests == 1


async def test_retry_after_keeps_a_backend_out_until_it_passes(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    out_s = 2.0  # the Retry-After
    busy = await emulator("a-busy", faults=FaultConfig(unavailable_rate=1.0, retry_after_s=out_s))
    good = await emulator("b-good")
    running = await gateway(config_for({"a-busy": busy.url, "b-good": good.url}))
    # The 503 (and its Retry-After) arrives after this instant, so the backend is out until
    # at least out_s past it: a lower bound that load can only make longer, never break.
    before_first = time.monotonic()
    first = await post(running.url, chat())
    assert first.status == 200 and "attempts=2" in first.headers["X-Meridian-Route"]
    retried = 0
    for _ in range(4):  # round robin would send half of these to a-busy first
        sent = time.monotonic()
        reply = await post(running.url, chat())
        route = reply.headers["X-Meridian-Route"]
        assert reply.status == 200
        if "attempts=1" not in route:  # only once the Retry-After can have passed (slow machine)
            assert sent >= before_first + out_s, route
            retried += 1
    assert busy.stats.requests == 1 + retried
    deadline = time.monotonic() + SETTLE_S  # a hang guard: requests until it is tried again
    while busy.stats.requests == 1:
        assert time.monotonic() < deadline, "never tried again once its Retry-After passed"
        await post(running.url, chat())
    assert time.monotonic() - before_first >= out_s
