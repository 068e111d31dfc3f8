"""A first token that waited unread in the kernel while the gateway's loop was busy is the
gateway's time, not the backend's (gateway/read_lag.py): ``upstream_ttfb``, which routing
learns, leaves it out, and ``upstream_read_lag`` (Server-Timing) and ``upstream_read_lag_ms``
(the request log) show it; and a first-token deadline the busy loop let pass is no failure of
the backend (gateway/lag_timeout.py). The loop is held over the backend's answer by
tests/held_loop.py."""

from __future__ import annotations

import asyncio
import socket
import time

import aiohttp
import orjson
import pytest

from gateway.app import RunningGateway
from gateway.loop_health import LATEST, RECENT_SAMPLES, SAMPLE_INTERVAL_S, LatestLag
from gateway.read_lag import FLOOR_MS, unread_ms
from gateway.state_keys import RELAY
from gateway.timing import parse
from routing.learner import OnlineLearner
from tests.gateway.support import MODEL, config_for
from tests.held_loop import HeldAnswer, hold_until, thread_backend
from tests.observability.support import CapturedLog
from tests.servers import settle

HOLD_S = 0.3
CHAT_PATH = "/v1/chat/completions"


def _chunk(delta: dict[str, str], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    chunk = {"id": "c1", "object": "chat.completion.chunk", "model": MODEL, "choices": [choice]}
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


STREAM = b"".join(
    [
        _chunk({"role": "assistant"}),
        _chunk({"content": "Hello"}),
        _chunk({}, "stop"),
        b"data: [DONE]\n\n",
    ]
)
ANSWERS = {
    ("GET", "/v1/models"): ("application/json", b'{"object": "list", "data": []}'),
    ("POST", CHAT_PATH): ("text/event-stream", STREAM),
}


def learner_of(running: RunningGateway) -> OnlineLearner:
    router = running.app[RELAY].router
    learner = getattr(getattr(router, "scorer", None), "learner", None)
    assert isinstance(learner, OnlineLearner), router  # the default policy, predicted_ttft
    return learner


def _body() -> dict[str, object]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}


async def test_a_first_token_the_busy_loop_left_unread_is_not_the_backends_time(
    gateway, captured: CapturedLog
) -> None:
    held = HeldAnswer(asyncio.get_running_loop(), HOLD_S)
    with thread_backend(held, ANSWERS) as url:
        running = await gateway(config_for({"b1": url}))
        held.arm(CHAT_PATH)
        async with (
            aiohttp.ClientSession() as session,
            session.post(running.url + CHAT_PATH, json=_body()) as response,
        ):
            assert response.status == 200
            timing = {e.name: e.dur_ms or 0.0 for e in parse(response.headers["Server-Timing"])}
            text = (await response.read()).decode()
    assert '"content":"Hello"' in text and text.endswith("data: [DONE]\n\n")
    # The stream sat in the kernel for HOLD_S; the kernel counts in ticks of up to FLOOR_MS, and
    # a tick is taken off its reading (gateway/read_lag.py).
    hold_ms = HOLD_S * 1000.0
    assert timing["upstream_read_lag"] >= hold_ms - 2 * FLOOR_MS
    assert timing["ttft"] >= hold_ms
    assert timing["upstream_ttfb"] <= timing["ttft"] - (hold_ms - 2 * FLOOR_MS)
    assert timing["gw"] >= hold_ms - 2 * FLOOR_MS  # the wait is the gateway's own time
    # Routing learns the token as arriving when it did, not when the busy loop read it.
    learned = learner_of(running).estimate("b1")
    assert learned is not None and learned.offset_at is not None
    assert learned.offset_at < held.answered_at + HOLD_S / 2
    (line,) = await captured.wait_requests(1)
    assert line["upstream_read_lag_ms"] == pytest.approx(timing["upstream_read_lag"], abs=0.01)
    assert line["upstream_ttfb_ms"] == pytest.approx(timing["upstream_ttfb"], abs=0.01)


async def test_a_first_token_deadline_the_busy_loop_let_pass_is_not_the_backends_silence(
    gateway,
) -> None:
    """The answer comes well within ``first_token_s``, but the loop is held past the deadline:
    ``asyncio.timeout`` would fail the attempt (here, the only backend: a 504). The hold begins
    as the backend has the request, long before the deadline however busy the machine."""
    first_token_s = 1.0
    held = HeldAnswer(asyncio.get_running_loop(), first_token_s + 0.5)
    with thread_backend(held, ANSWERS) as url:
        running = await gateway(config_for({"b1": url}, timeouts={"first_token_s": first_token_s}))
        held.arm(CHAT_PATH)
        async with (
            aiohttp.ClientSession() as session,
            session.post(running.url + CHAT_PATH, json=_body()) as response,
        ):
            text = (await response.read()).decode()
            route = response.headers.get("X-Meridian-Route", "")
    assert response.status == 200, text
    assert "attempts=1" in route and text.endswith("data: [DONE]\n\n")


def test_the_kernels_reading_never_overstates_a_wait() -> None:
    """Its reading may be a tick more than the wait (a probe's ~1 ms round trip read -1.8 ms
    once less it): ``unread_ms`` takes a tick off, so it is at most the wait, and at most two
    ticks less."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        ours = socket.create_connection(server.getsockname())
        theirs, _ = server.accept()
        with ours, theirs:
            for wait_s in (0.0, 0.013, 0.027, 0.061):
                sent = time.perf_counter()
                theirs.sendall(b"x")
                hold_until(time.monotonic() + wait_s)
                waited_ms = unread_ms(ours)
                elapsed_ms = (time.perf_counter() - sent) * 1000.0
                assert ours.recv(1) == b"x"
                assert elapsed_ms - 2 * FLOOR_MS - 1.0 <= waited_ms <= elapsed_ms, wait_s


def test_the_loop_counts_as_behind_while_any_recent_sample_was_late() -> None:
    lag = LatestLag()
    lag.note(0.8)
    for _ in range(RECENT_SAMPLES - 1):  # on time since, but the late turn is recent
        lag.note(0.0)
        assert lag.recent_s == 0.8 and lag.late_s == 0.0
    lag.note(0.002)
    assert lag.recent_s == 0.002 and lag.samples == RECENT_SAMPLES + 1


def test_a_sample_overdue_now_means_the_turn_in_progress_is_late() -> None:
    """The first tokens a long turn reads are read before its late sample can be noted."""
    lag = LatestLag()
    assert not lag.behind(time.perf_counter(), 0.01)  # no sampler running: never overdue
    lag.due_at = 100.0
    assert not lag.behind(100.005, 0.01)  # the loop's next turn runs it: not late yet
    assert lag.behind(100.02, 0.01)
    assert lag.recent_s == 0.0 and lag.samples == 0


async def _next_sample() -> None:
    samples = LATEST.samples
    await settle(lambda: LATEST.samples != samples)


async def _late_then_on_time() -> int:
    """Holds the loop over a whole sample period (a sample falls due in it and runs at least
    0.2 periods late), then waits for a sample that runs on time; ``LATEST.samples`` as the
    late one was noted."""
    for _ in range(10):
        hold_until(time.monotonic() + 1.2 * SAMPLE_INTERVAL_S)  # a turn of a burst
        await _next_sample()
        late = LATEST.samples
        assert LATEST.late_s * 1000.0 >= FLOOR_MS
        await _next_sample()
        if LATEST.late_s * 1000.0 < FLOOR_MS:  # else the machine lagged the loop: again
            return late
    pytest.fail("the loop never ran a sample on time after a late one")


async def test_a_first_token_earlier_than_predicted_is_corrected_while_the_loop_was_behind(
    gateway,
) -> None:
    """In a burst, routing predicts the queue, so a first token that waited unread may still
    come before its prediction; the latest lag sample alone may read on time between two long
    turns. The loop is held here over a whole sample period (a sample runs late), the next
    sample runs on time, then the loop is held over the backend's answer for a tenth of a
    period, with 3 s predicted (the backend's configured overhead): the wait comes out of
    ``upstream_ttfb`` all the same."""
    hold_s = 0.05
    held = HeldAnswer(asyncio.get_running_loop(), hold_s)
    capacity = {"first_token_overhead_ms": 3000.0}
    with thread_backend(held, ANSWERS) as url:
        config = config_for({"b1": url}, backends=[
            {"name": "b1", "region": "local", "url": url + "/v1", "models": [MODEL],
             "capacity": capacity},
        ])  # fmt: skip
        running = await gateway(config)
        async with aiohttp.ClientSession() as session:
            for _ in range(3):  # a request that outlasts the window is inconclusive: again
                late = await _late_then_on_time()
                held.arm(CHAT_PATH)
                async with session.post(running.url + CHAT_PATH, json=_body()) as response:
                    assert response.status == 200
                    server_timing = response.headers["Server-Timing"]
                    await response.read()
                if LATEST.samples - late < RECENT_SAMPLES:
                    break
            else:
                pytest.fail("three requests each outlasted the loop's recent samples")
    timing = {e.name: e.dur_ms or 0.0 for e in parse(server_timing)}
    read_lag_ms = timing.get("upstream_read_lag", 0.0)
    assert read_lag_ms >= hold_s * 1000.0 - 2 * FLOOR_MS, timing
    assert timing["upstream_ttfb"] <= timing["ttft"] - (hold_s * 1000.0 - 2 * FLOOR_MS), timing
    # Not the late first token routing did not expect (that one is asked about anyway).
    assert timing["upstream_ttfb"] + read_lag_ms < timing["predicted_ttft"], timing
