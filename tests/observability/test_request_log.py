"""One JSON request-log line per request, checked field by field, on real traffic: a success, a
retry, a failure before the first token, a mid-stream failure, a cancel, a refusal — and no
prompt, completion or secret in any line."""

from __future__ import annotations

import asyncio

import aiohttp
import orjson
import pytest

from gateway.state_keys import RELAY
from loadtests.emulator.config import FaultConfig
from tests.gateway.support import FAST_ENGINE, MODEL, config_for
from tests.observability.support import CapturedLog, until
from tests.servers import unanswering_port

PROMPT_CANARY = "canary-prompt-7f3a9c"
SECRET_CANARY = "canary-secret-51d0e2"


def _chat(stream: bool = True, **extra: object) -> dict[str, object]:
    body: dict[str, object] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": f"say hello {PROMPT_CANARY}"}],
        "stream": stream,
        **extra,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


async def _post(url: str, body: object, headers: dict[str, str] | None = None) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session:
        async with session.post(
            url + "/v1/chat/completions", json=body, headers=headers or {}
        ) as response:
            return response.status, await response.text()


async def test_a_streamed_success_is_one_line_with_every_field(
    emulator, gateway, captured: CapturedLog
) -> None:
    backend = await emulator("b1")
    running = await gateway(config_for({"b1": backend.url}))
    status, _ = await _post(
        running.url,
        _chat(max_tokens=6),
        {"X-Request-Id": "req-ok-1", "X-Meridian-Tenant": "acme"},
    )
    assert status == 200
    (line,) = await captured.wait_requests(1)
    assert line["logger"] == "meridian.request" and line["level"] == "info"
    assert line["time"].endswith("Z")
    assert line["request_id"] == "req-ok-1"
    assert len(line["trace_id"]) == 32
    assert (line["door"], line["endpoint"], line["model"]) == ("http", "chat", MODEL)
    assert line["tenant"] == "acme"
    assert line["route"] == {"region": "local", "backend": "b1", "kind": "dedicated"}
    assert (line["attempts"], line["hedges"]) == (1, 0)
    assert line["attempt_outcomes"] == [{"backend": "b1", "hedge": False, "outcome": "ok"}]
    assert line["predicted_ttft_ms"] > 0
    assert 0 < line["ttft_ms"] <= line["e2e_ms"]
    assert line["itl_p50_ms"] > 0 and line["itl_p99_ms"] >= line["itl_p50_ms"]
    assert line["completion_tokens"] == 6
    assert line["prompt_tokens"] > 0 and line["prompt_tokens_estimated"] is False
    assert (line["status"], line["outcome"], line["error"]) == (200, "ok", None)


async def test_a_retry_lists_each_attempt_and_its_outcome(
    emulator, gateway, captured: CapturedLog
) -> None:
    failing = await emulator("b1", faults=FaultConfig(error_rate=1.0))
    healthy = await emulator("b2")
    config = config_for({"b1": failing.url, "b2": healthy.url}, routing={"policy": "round_robin"})
    running = await gateway(config)
    # Round robin starts at b1 for the first request: the retry goes to b2.
    status, _ = await _post(running.url, _chat())
    assert status == 200
    (line,) = await captured.wait_requests(1)
    assert line["route"]["backend"] == "b2"
    assert line["attempts"] == 2
    assert line["attempt_outcomes"] == [
        {"backend": "b1", "hedge": False, "outcome": "500"},
        {"backend": "b2", "hedge": False, "outcome": "ok"},
    ]
    assert line["outcome"] == "ok"


async def test_a_backend_that_never_completes_the_handshake_is_a_timeout_and_the_retry_goes_on(
    emulator, gateway, captured: CapturedLog
) -> None:
    healthy = await emulator("b2")
    silent = f"http://127.0.0.1:{unanswering_port()}"
    timeouts = {"first_token_s": 5.0, "connect_s": 0.2}
    config = config_for(
        {"b1": silent, "b2": healthy.url}, routing={"policy": "round_robin"}, timeouts=timeouts
    )
    running = await gateway(config)
    status, _ = await _post(running.url, _chat())  # round robin starts at b1
    assert status == 200
    (line,) = await captured.wait_requests(1)
    assert line["attempt_outcomes"] == [
        {"backend": "b1", "hedge": False, "outcome": "timeout"},
        {"backend": "b2", "hedge": False, "outcome": "ok"},
    ]


async def test_every_attempt_failing_is_logged_with_the_status_the_client_got(
    emulator, gateway, captured: CapturedLog
) -> None:
    backend = await emulator("b1", faults=FaultConfig(error_rate=1.0))
    running = await gateway(config_for({"b1": backend.url}))
    status, _ = await _post(running.url, _chat(stream=False), {"X-Request-Id": "req-fail"})
    assert status == 502
    (line,) = await captured.wait_requests(1)
    assert line["request_id"] == "req-fail"
    assert (line["status"], line["outcome"], line["error"]) == (502, "failed", "upstream_error")
    assert line["route"] is None
    assert line["attempt_outcomes"] == [{"backend": "b1", "hedge": False, "outcome": "500"}]
    assert line["e2e_ms"] > 0


async def test_a_stream_that_breaks_mid_way_is_a_failure_with_its_kind(
    emulator, gateway, captured: CapturedLog
) -> None:
    backend = await emulator("b1", faults=FaultConfig(die_after_tokens=3))
    running = await gateway(config_for({"b1": backend.url}))
    status, body = await _post(running.url, _chat(max_tokens=20))
    assert status == 200 and "error" in body
    (line,) = await captured.wait_requests(1)
    assert line["status"] == 200  # the headers had gone out
    assert line["outcome"] == "failed"
    assert line["error"] in {"upstream_disconnected", "upstream_truncated"}
    assert line["completion_tokens"] >= 1
    assert line["route"]["backend"] == "b1"


async def test_a_client_that_leaves_mid_stream_is_a_cancel(
    emulator, gateway, captured: CapturedLog
) -> None:
    slow = FAST_ENGINE.model_copy(update={"decode_base_ms": 20.0})
    backend = await emulator("b1", engine=slow)
    running = await gateway(config_for({"b1": backend.url}))
    async with aiohttp.ClientSession() as session:
        response = await session.post(
            running.url + "/v1/chat/completions", json=_chat(max_tokens=500)
        )
        assert response.status == 200
        await response.content.readany()
        response.close()
    (line,) = await captured.wait_requests(1)
    assert (line["status"], line["outcome"], line["error"]) == (
        499,
        "cancelled",
        "client_cancelled",
    )
    assert line["route"]["backend"] == "b1"


async def test_a_request_refused_at_the_door_is_logged(gateway, emulator, captured) -> None:
    backend = await emulator("b1")
    running = await gateway(config_for({"b1": backend.url}))
    async with aiohttp.ClientSession() as session:
        async with session.post(
            running.url + "/v1/chat/completions",
            data=b"{not json",
            headers={"X-Request-Id": "req-bad"},
        ) as response:
            assert response.status == 400
    status, _ = await _post(running.url, {**_chat(), "model": "no-such-model"})
    assert status == 404
    bad_json, unknown_model = await captured.wait_requests(2)
    assert bad_json["request_id"] == "req-bad"
    assert (bad_json["door"], bad_json["status"], bad_json["error"]) == (
        "http",
        400,
        "invalid_json",
    )
    assert unknown_model["status"] == 404 and unknown_model["outcome"] == "failed"


async def test_no_prompt_completion_or_secret_in_any_line(
    emulator, gateway, captured: CapturedLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MERIDIAN_TEST_BACKEND_KEY", SECRET_CANARY)
    failing = await emulator("b1", faults=FaultConfig(error_rate=1.0))
    healthy = await emulator("b2")
    backends = [
        {
            "name": name,
            "region": "local",
            "url": url + "/v1",
            "models": [MODEL],
            "api_key": {"env": "MERIDIAN_TEST_BACKEND_KEY"},
        }
        for name, url in (("b1", failing.url), ("b2", healthy.url))
    ]
    running = await gateway(config_for({}, backends=backends, routing={"policy": "round_robin"}))
    secret_headers = {
        "Authorization": f"Bearer {SECRET_CANARY}",
        "X-Api-Key": SECRET_CANARY,
        "Cookie": f"session={SECRET_CANARY}",
    }
    completions = []
    for stream in (True, False, True):
        status, body = await _post(running.url, _chat(stream=stream), secret_headers)
        assert status == 200
        if not stream:
            completions.append(orjson.loads(body)["choices"][0]["message"]["content"])
    await _post(running.url, {"model": MODEL, "messages": PROMPT_CANARY}, secret_headers)
    lines = await captured.wait_requests(4)
    assert [line["attempts"] for line in lines[:3]] == [2, 1, 2]  # b1 failed, b2 served
    text = captured.text()
    assert completions[0] and completions[0] not in text
    for canary in (PROMPT_CANARY, SECRET_CANARY):
        assert canary not in text


async def test_sampling_keeps_failures_and_the_switch_turns_it_off(
    emulator, gateway, captured: CapturedLog
) -> None:
    backend = await emulator("b1")
    sampled = await gateway(config_for({"b1": backend.url}, logging={"sample_rate": 0.0}))
    for _ in range(3):
        assert (await _post(sampled.url, _chat()))[0] == 200
    assert (await _post(sampled.url, {**_chat(), "model": "nope"}))[0] == 404
    (line,) = await captured.wait_requests(1)
    assert line["status"] == 404
    off = await gateway(config_for({"b1": backend.url}, logging={"requests": False}))
    assert (await _post(off.url, {**_chat(), "model": "nope"}))[0] == 404
    assert (await _post(off.url, _chat()))[0] == 200
    # Both requests are over (their responses are complete); neither wrote a line.
    assert off.app[RELAY].fleet.in_flight("b1") == 0
    assert len(captured.requests()) == 1


@pytest.mark.parametrize("rate", [0.25, 0.5])
def test_sampling_picks_by_request_id_so_every_hop_agrees(rate: float) -> None:
    from gateway.observability.config import LoggingConfig
    from gateway.observability.record import Outcome
    from gateway.observability.request_log import RequestLog

    log = RequestLog(LoggingConfig(sample_rate=rate))
    other = RequestLog(LoggingConfig(sample_rate=rate))
    ids = [f"req-{i}" for i in range(2000)]
    import logging

    logging.getLogger("meridian.request").setLevel(logging.INFO)
    kept = [i for i in ids if log.wants(i, Outcome.OK)]
    assert kept == [i for i in ids if other.wants(i, Outcome.OK)]
    assert abs(len(kept) / len(ids) - rate) < 0.05
    assert all(log.wants(i, Outcome.FAILED) for i in ids[:50])
    logging.getLogger("meridian.request").setLevel(logging.NOTSET)


async def test_cancel_line_is_written_once(emulator, gateway, captured: CapturedLog) -> None:
    """A request abandoned while waiting for its first token: one line, cancelled."""
    backend = await emulator("b1", faults=FaultConfig(stall_ms=10_000.0))
    running = await gateway(config_for({"b1": backend.url}))
    async with aiohttp.ClientSession() as session:
        task = asyncio.ensure_future(
            session.post(running.url + "/v1/chat/completions", json=_chat())
        )
        await until(lambda: backend.stats.requests >= 1)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    (line,) = await captured.wait_requests(1)
    assert (line["status"], line["outcome"]) == (499, "cancelled")
    assert line["attempt_outcomes"] == [{"backend": "b1", "hedge": False, "outcome": "cancelled"}]


async def test_the_tenant_is_the_keys_and_the_key_never_appears(
    emulator, gateway, captured: CapturedLog
) -> None:
    from tests.security.auth_support import issue

    key = issue("acme-corp")
    backend = await emulator("b1")
    running = await gateway(config_for({"b1": backend.url}, auth={"keys": [key.entry]}))
    headers = {**key.headers, "X-Meridian-Tenant": "spoofed", "X-Request-Id": "req-key"}
    status, _ = await _post(running.url, _chat(), headers)
    assert status == 200
    (line,) = await captured.wait_requests(1)
    assert line["request_id"] == "req-key" and line["tenant"] == "acme-corp"
    assert key.key not in captured.text() and key.entry["sha256"] not in captured.text()


async def test_prefix_hashes_are_logged_when_asked_and_a_replay_of_the_log_shares_them(
    emulator, gateway, captured: CapturedLog, tmp_path
) -> None:
    """``logging.prefix_hashes``: two requests with one system prompt log hash chains that share
    its blocks (hex, no prompt text), and ``meridian sim --replay`` of the log reads them."""
    from loadtests.sim.replay_import import from_request_log

    backend = await emulator("b1")
    running = await gateway(config_for({"b1": backend.url}, logging={"prefix_hashes": True}))
    system = {"role": "system", "content": f"You are a careful assistant. {PROMPT_CANARY} " * 8}
    for question in ("the first question, asked at length " * 6, "another one entirely " * 10):
        body = _chat(max_tokens=3)
        body["messages"] = [system, {"role": "user", "content": question}]
        status, _ = await _post(running.url, body)
        assert status == 200
    first, second = await captured.wait_requests(2)
    assert PROMPT_CANARY not in captured.text()
    a, b = first["prefix_hashes"], second["prefix_hashes"]
    assert first["prefix_block_tokens"] == 16 and all(len(h) == 16 for h in a + b)
    shared = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), len(a))
    assert 4 <= shared < min(len(a), len(b))  # the system prompt's blocks, then their own
    log = tmp_path / "gateway.log"
    log.write_text(captured.text())
    trace = from_request_log(log)
    assert [line.prefix_hashes for line in trace.lines] == [
        tuple(int(h, 16) for h in a),
        tuple(int(h, 16) for h in b),
    ]


async def test_prefix_hashes_are_not_logged_by_default(
    emulator, gateway, captured: CapturedLog
) -> None:
    backend = await emulator("b1")
    running = await gateway(config_for({"b1": backend.url}))
    assert (await _post(running.url, _chat(max_tokens=3)))[0] == 200
    (line,) = await captured.wait_requests(1)
    assert "prefix_hashes" not in line
