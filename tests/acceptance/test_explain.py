"""``/v1/meridian/route`` and ``meridian explain`` against real emulated backends on loopback,
and the emulator's live round trip that probes now see."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import yaml
from aiohttp.test_utils import make_mocked_request

from gateway.app import RunningGateway, start_gateway
from gateway.config import parse_config
from gateway.explain import _is_local_admin
from loadtests.emulator.config import EmulatedBackendConfig, EngineParams
from loadtests.emulator.server import RunningEmulator, start_emulated_backend
from tests.servers import PROCESS_BOUND_S, hang_bound

MODEL = "m"
FAR_MS = 120_000.0  # a round trip that no answer on a busy machine comes near
ENGINE = EngineParams(
    first_token_overhead_ms=1.0,
    prefill_tokens_per_s=100_000.0,
    decode_base_ms=2.0,
    decode_per_seq_ms=0.0,
    default_output_tokens=2,
)


@pytest.fixture
async def backends() -> AsyncIterator[dict[str, RunningEmulator]]:
    near = await start_emulated_backend(
        EmulatedBackendConfig(name="near", models=[MODEL], engine=ENGINE, region="here")
    )
    far = await start_emulated_backend(
        EmulatedBackendConfig(
            name="far", models=[MODEL], engine=ENGINE, region="there", rtt_ms=60.0
        )
    )
    yield {"near": near, "far": far}
    await near.close()
    await far.close()


def config_data(backends: dict[str, RunningEmulator]) -> dict[str, Any]:
    return {
        "region": "here",
        "regions": [{"name": "here"}, {"name": "there", "rtt_ms": 60.0}],
        "backends": [
            {
                "name": name,
                "region": emu.config.region,
                "url": emu.url + "/v1",
                "models": [MODEL],
                "capacity": {"prefill_tokens_per_s": 100_000.0, "first_token_overhead_ms": 1.0},
            }
            for name, emu in backends.items()
        ],
        "signals": {"probes": {"interval_s": 0.2}, "engine_metrics": {"interval_s": 0.2}},
    }


@pytest.fixture
async def gateway(backends: dict[str, RunningEmulator]) -> AsyncIterator[RunningGateway]:
    running = await start_gateway(parse_config(config_data(backends)), "127.0.0.1", 0)
    yield running
    await running.close()


async def _route(session: aiohttp.ClientSession, url: str, **kwargs: Any) -> dict[str, Any]:
    deadline = time.monotonic() + hang_bound(5.0)
    while True:
        async with session.get(f"{url}/v1/meridian/route", **kwargs) as resp:
            assert resp.status == 200, await resp.text()
            report: dict[str, Any] = await resp.json()
        signals = [c["signals"] for c in report["candidates"]]
        if all(s["probe_age_s"] is not None for s in signals) or time.monotonic() > deadline:
            return report
        await asyncio.sleep(0.05)


async def test_explain_shows_every_term_its_age_and_why(gateway: RunningGateway):
    params = {"model": MODEL, "prompt": "hello there " * 50, "origin": "there"}
    async with aiohttp.ClientSession() as session:
        report = await _route(session, gateway.url, params=params)
    assert report["policy"] == "predicted_ttft" and report["chosen"] == "near"
    assert report["origin"] == {"region": "there", "source": "given"}
    assert report["profile"]["prompt_tokens"] > 100 and report["profile"]["prefix_blocks"] > 5
    near, far = report["candidates"]
    assert set(near["terms"]) >= {"rtt", "queue", "prefill", "cold_start", "bias"}
    assert near["terms"]["prefill"]["age_s"] == "config"  # nothing learned yet
    assert isinstance(near["terms"]["rtt"]["age_s"], float)  # measured by a probe
    assert far["signals"]["probe_rtt_ms"] >= 60.0  # probes pay the emulated round trip
    assert far["terms"]["rtt"]["ms"] >= 60.0 and "rtt +" in far["why"]
    assert near["why"].startswith("chosen")
    assert "hello" not in orjson.dumps(report).decode()  # no prompt text in the report


async def test_explain_post_body_and_filtered_backends(gateway: RunningGateway):
    body = {"model": MODEL, "prompt": "a completion prompt", "max_tokens": 4}
    async with aiohttp.ClientSession() as session:
        url = f"{gateway.url}/v1/meridian/route"
        async with session.post(url, json=body, params={"origin": "192.0.2.1"}) as resp:
            assert resp.status == 200
            report = await resp.json()
        async with session.post(url, json={"model": "nope", "prompt": "x"}) as resp:
            assert resp.status == 404
        async with session.get(url, params={"model": MODEL}) as resp:
            assert resp.status == 400 and "prompt" in (await resp.json())["error"]["message"]
        async with session.get(url, params={"model": MODEL, "prompt": "x", "origin": "mars"}) as r:
            assert r.status == 400 and "origin" in (await r.json())["error"]["message"]
    assert report["profile"]["max_tokens"] == 4
    assert report["origin"]["source"] == "default"  # no GeoIP database configured
    assert len(report["candidates"]) + len(report["filtered"]) == 2


async def test_explain_refuses_proxied_requests(gateway: RunningGateway):
    params = {"model": MODEL, "prompt": "x"}
    async with aiohttp.ClientSession() as session:
        for header in ("X-Forwarded-For", "Forwarded", "X-Real-IP"):
            async with session.get(
                f"{gateway.url}/v1/meridian/route", params=params, headers={header: "192.0.2.1"}
            ) as resp:
                assert resp.status == 403
                assert (await resp.json())["error"]["code"] == "admin_only"


def test_only_loopback_peers_are_local_admins():
    local = make_mocked_request("GET", "/", transport=_Transport("127.0.0.1"))
    remote = make_mocked_request("GET", "/", transport=_Transport("192.0.2.7"))
    v6 = make_mocked_request("GET", "/", transport=_Transport("::1"))
    assert _is_local_admin(local) and _is_local_admin(v6) and not _is_local_admin(remote)


class _Transport:
    def __init__(self, peer: str) -> None:
        self.peer = peer

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return (self.peer, 1234) if name == "peername" else default


async def test_meridian_explain_command_probes_once_then_explains(
    backends: dict[str, RunningEmulator], tmp_path: Path
):
    config = tmp_path / "gw.yaml"
    config.write_text(yaml.safe_dump(config_data(backends)))
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("tell me about routing " * 30)
    argv = ["explain", "--config", str(config), "--model", MODEL, "--prompt-file", str(prompt)]
    text = await _meridian(*argv, "--origin", "there")
    assert "1* near" in text and "2  far" in text
    assert "terms: rtt" in text and "why: chosen" in text and "origin there (given)" in text
    report = orjson.loads(await _meridian(*argv, "--json"))
    far = next(c for c in report["candidates"] if c["backend"] == "far")
    assert far["signals"]["probe_age_s"] is not None and far["terms"]["rtt"]["ms"] >= 60.0


async def _meridian(*args: str) -> str:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), timeout=PROCESS_BOUND_S)
    assert process.returncode == 0, err.decode()
    return out.decode()


async def test_emulator_rtt_applies_to_probe_endpoints_and_changes_live(
    backends: dict[str, RunningEmulator],
):
    far = backends["far"]
    async with aiohttp.ClientSession() as session:

        async def timed(path: str) -> float:
            """Milliseconds for one GET; one that would pay FAR_MS fails the test instead."""
            started = time.perf_counter()
            async with asyncio.timeout(FAR_MS / 2000.0):
                async with session.get(far.url + path) as resp:
                    assert resp.status == 200
                    await resp.read()
            return (time.perf_counter() - started) * 1000.0

        assert await timed("/v1/models") >= 60.0 and await timed("/health") >= 60.0
        async with session.post(far.url + "/admin/rtt", json={"rtt_ms": 150}) as resp:
            assert (await resp.json()) == {"rtt_ms": 150.0}
        assert await timed("/v1/models") >= 150.0
        async with session.post(far.url + "/admin/rtt", json={"rtt_ms": -1}) as resp:
            assert resp.status == 400
        # Upper bounds against a round trip no busy machine comes near: a scrape or a request
        # that paid it would take FAR_MS, twice the bound timed() allows.
        async with session.post(far.url + "/admin/rtt", json={"rtt_ms": FAR_MS}) as resp:
            assert resp.status == 200
        await timed("/metrics")  # scrapes are not slowed: metrics stay cheap
        async with session.post(far.url + "/admin/reset") as resp:
            assert resp.status == 200
        assert await timed("/v1/models") >= 60.0  # back to the configured round trip


async def test_meridian_explain_asks_a_running_gateway(gateway: RunningGateway, tmp_path: Path):
    body = tmp_path / "request.json"
    body.write_text('{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}')
    async with aiohttp.ClientSession() as session:
        await _route(session, gateway.url, params={"model": MODEL, "prompt": "warm up"})
    args = ["explain", "--url", gateway.url, "--model", MODEL, "--prompt-file", str(body)]
    report = orjson.loads(await _meridian(*args, "--json", "--origin", "here"))
    assert report["profile"]["max_tokens"] == 3 and report["origin"]["region"] == "here"
    assert {c["backend"] for c in report["candidates"]} == {"near", "far"}
