"""Acceptance 11: reload on SIGHUP or file change, against a real ``meridian serve`` process."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from pathlib import Path

import aiohttp

from tests.reliability.support import (
    FAST_ENGINE,
    EmulatorFactory,
    SseReply,
    chat,
    config_data,
    post,
    serve_process,
    write_config,
)

SLOW = FAST_ENGINE.model_copy(update={"decode_base_ms": 20.0})


async def _wait_log(gw_log: Callable[[], str], text: str, within: float = 5.0) -> None:
    for _ in range(int(within / 0.05)):
        if text in gw_log():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"log never said {text!r}:\n{gw_log()}")


async def _backend_of(url: str) -> str:
    reply = await post(url, chat(max_tokens=2))
    assert reply.status == 200 and reply.done
    return reply.headers["X-Meridian-Route"].split("backend=")[1].split(";")[0]


async def test_broken_config_is_refused_valid_one_applied_in_flight_unaffected(
    tmp_path: Path, emulator: EmulatorFactory
) -> None:
    old = await emulator("b-old", engine=SLOW)
    new = await emulator("b-new")
    path = tmp_path / "gateway.yaml"
    write_config(path, config_data({"b-old": old.url}, reload={"watch_interval_s": None}))
    async with serve_process(path) as gw, aiohttp.ClientSession() as session:
        body = chat(max_tokens=60)  # ~1.2 s on b-old, across both reloads
        async with session.post(gw.url + "/v1/chat/completions", json=body) as in_flight:
            assert in_flight.headers["X-Meridian-Route"].startswith("region=local; backend=b-old")
            path.write_text("backends: [unclosed\n")
            gw.signal(signal.SIGHUP)
            await _wait_log(gw.log, "rejected, keeping the running config")
            assert "not valid YAML" in gw.log()
            assert await _backend_of(gw.url) == "b-old"
            write_config(path, config_data({"b-new": new.url}, reload={"watch_interval_s": 0.2}))
            gw.signal(signal.SIGHUP)
            await _wait_log(gw.log, "config reloaded (SIGHUP): backends added=['b-new']")
            assert await _backend_of(gw.url) == "b-new"
            raw = await in_flight.read()
        reply = SseReply(200, {}, [e for e in raw.split(b"\n\n") if e], raw)
        assert reply.done and reply.tokens == 60 and not reply.errors()
        # The file watcher (now every 0.2 s) picks up a change without a signal.
        write_config(path, config_data({"b-old": old.url}, reload={"watch_interval_s": 0.2}))
        await _wait_log(gw.log, "config reloaded (file changed)")
        assert await _backend_of(gw.url) == "b-old"
        await _wait_log(gw.log, "closed 1 retired upstream pool(s)")
        gw.signal(signal.SIGTERM)
        assert await asyncio.wait_for(gw.process.wait(), 10) == 0
