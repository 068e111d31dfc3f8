"""``slo_cost`` through a real gateway: objectives from the header or the tenant's class, the
Server-Timing entries that explain the choice, spend and attainment metrics."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import aiohttp
import grpc
import pytest

from gateway.app import RunningGateway
from gateway.auth.keys import digest, new_key
from gateway.config import ConfigError, GatewayConfig, parse_config
from gateway.grpc.client import inference_stub
from gateway.grpc.mount import GRPC_SERVER
from gateway.objectives import OBJECTIVE_HEADER
from gateway.state_keys import METRICS
from gateway.timing import parse
from loadtests.emulator.server import RunningEmulator
from proto.meridian.v1 import inference_pb2 as pb
from tests.gateway.support import MODEL, EmulatorFactory, GatewayFactory

CHAT = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "hi"}],
    "max_tokens": 4,
    "stream": True,
}
LOCAL_PRICE = {"prompt_per_mtok": 3.0, "completion_per_mtok": 15.0}
REMOTE_PRICE = {"prompt_per_mtok": 0.5, "completion_per_mtok": 1.5}
REMOTE_RTT_MS = 120.0


def _config(urls: dict[str, str], **extra: Any) -> GatewayConfig:
    prices = {"us-east": LOCAL_PRICE, "eu-west": REMOTE_PRICE}
    objectives = extra.pop("objectives", None)
    return parse_config(
        {
            "region": "us-east",
            "regions": [
                {"name": "us-east", "rtt_ms": 1},
                {"name": "eu-west", "rtt_ms": REMOTE_RTT_MS},
            ],
            "backends": [
                {
                    "name": name,
                    "region": name,
                    "url": url + "/v1",
                    "models": [MODEL],
                    "price": prices[name],
                }
                for name, url in urls.items()
            ],
            "routing": {"policy": "slo_cost"},
            "objectives": objectives
            or {
                "classes": {"interactive": {"ttft_ms": 60}, "batch": {"ttft_ms": 5000}},
                "tenants": {"nightly": "batch"},
                "default_class": "interactive",
                "header": {"allow": True, "min_ms": 10, "max_ms": 60000},
            },
            **extra,
        },
        "<test>",
    )


async def _send(url: str, headers: dict[str, str]) -> tuple[int, str, dict[str, Any], bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + "/v1/chat/completions", json=CHAT, headers=headers) as response,
    ):
        body = await response.read()
        timing = {e.name: e for e in parse(response.headers.get("Server-Timing", ""))}
        return response.status, response.headers.get("X-Meridian-Route", ""), timing, body


async def _fleet(emulator: EmulatorFactory, gateway: GatewayFactory) -> RunningGateway:
    local = await emulator("us-east")
    remote = await emulator("eu-west", rtt_ms=REMOTE_RTT_MS)
    return await gateway(_config({"us-east": local.url, "eu-west": remote.url}))


async def _counted(running: RunningGateway, name: str, labels: dict[str, str]) -> float:
    """The counter once the request's end was booked (the client may read the last byte
    before the gateway's book-keeping ran): waits on the counter itself, never on a clock."""
    registry = running.app[METRICS].registry
    for _ in itertools.count():
        if value := registry.get_sample_value(name, labels):
            return value
        await asyncio.sleep(0.01)
    raise AssertionError("unreachable")


async def test_a_loose_objective_goes_to_the_cheaper_region(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    running = await _fleet(emulator, gateway)
    status, route, timing, _ = await _send(running.url, {"X-Meridian-Tenant": "nightly"})
    assert status == 200 and "backend=eu-west" in route
    objective = timing["objective"]
    assert objective.dur_ms == 5000 and objective.desc is not None
    assert "class=batch chosen=eu-west" in objective.desc and "expected cost" in objective.desc
    assert timing["slo.eu-west"].desc is not None and "meets" in timing["slo.eu-west"].desc
    assert timing["slo.us-east"].desc is not None and "cost=" in timing["slo.us-east"].desc
    for backend in ("eu-west", "us-east"):  # dur = that candidate's predicted p90 TTFT
        entry = timing[f"slo.{backend}"]
        assert entry.dur_ms is not None and entry.dur_ms > 0
    assert timing["slo.eu-west"].dur_ms > timing["slo.us-east"].dur_ms  # 120 ms farther
    spend = {"tenant": "nightly", "model": MODEL, "backend": "eu-west"}
    assert await _counted(running, "meridian_spend_total", spend) > 0
    met = {"class": "batch", "outcome": "met"}
    assert await _counted(running, "meridian_objective_requests_total", met) == 1


async def test_a_tight_objective_from_the_class_forces_the_local_one(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    running = await _fleet(emulator, gateway)
    status, route, timing, _ = await _send(running.url, {"X-Meridian-Tenant": "someone"})
    assert status == 200 and "backend=us-east" in route
    assert timing["objective"].dur_ms == 60
    assert "misses" in (timing["slo.eu-west"].desc or "")
    spend = {"tenant": "other", "model": MODEL, "backend": "us-east"}
    assert await _counted(running, "meridian_spend_total", spend) > 0


async def test_the_header_overrides_the_class_within_bounds(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    running = await _fleet(emulator, gateway)
    status, route, timing, _ = await _send(running.url, {OBJECTIVE_HEADER: "3000"})
    assert status == 200 and "backend=eu-west" in route
    assert "class=header" in (timing["objective"].desc or "")
    status, _, _, body = await _send(running.url, {OBJECTIVE_HEADER: "999999"})
    assert status == 400 and b"invalid_objective" in body and b"between 10 and 60000" in body
    status, _, _, body = await _send(running.url, {OBJECTIVE_HEADER: "soon"})
    assert status == 400 and b"invalid_objective" in body


async def test_explain_shows_the_objective_and_every_cost(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    running = await _fleet(emulator, gateway)
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            running.url + "/v1/meridian/route", json=CHAT, headers={OBJECTIVE_HEADER: "3000"}
        ) as response,
    ):
        assert response.status == 200
        report = await response.json()
    assert report["profile"]["ttft_objective_ms"] == 3000
    assert report["profile"]["objective_class"] == "header"
    assert report["chosen"] == "eu-west"
    costs = {c["backend"]: c["expected_cost"] for c in report["candidates"]}
    assert 0 < costs["eu-west"] < costs["us-east"]
    for candidate in report["candidates"]:  # every candidate's p90 beside its mean
        assert candidate["predicted_ttft_p90_ms"] >= candidate["predicted_ttft_ms"] > 0
    why = {c["backend"]: c["why"] for c in report["candidates"]}
    assert why["eu-west"] and why["us-east"] and why["eu-west"] != why["us-east"]


def test_objective_classes_must_exist() -> None:
    with pytest.raises(ConfigError, match=r"objectives: .*tenants.acme: class 'gold' is not in"):
        _config({"us-east": "http://h"}, objectives={"tenants": {"acme": "gold"}})
    with pytest.raises(ConfigError, match="min_ms"):
        _config({"us-east": "http://h"}, objectives={"header": {"min_ms": 5, "max_ms": 1}})
    with pytest.raises(ConfigError, match="reserved"):
        _config({"us-east": "http://h"}, objectives={"classes": {"header": {"ttft_ms": 1}}})


async def _two_keys(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> tuple[RunningGateway, str, str, RunningEmulator, RunningEmulator]:
    """A gateway (HTTP and gRPC) in front of a local and a cheaper remote emulator, and two
    keys of one tenant: the first's id has the batch class, the second gets the tenant's
    default tight class."""
    batch_key, batch_id = new_key()
    other_key, other_id = new_key()
    local = await emulator("us-east")
    remote = await emulator("eu-west", rtt_ms=REMOTE_RTT_MS)
    objectives = {
        "classes": {"interactive": {"ttft_ms": 60}, "batch": {"ttft_ms": 5000}},
        "keys": {batch_id: "batch"},
        "default_class": "interactive",
    }
    auth = {
        "mode": "keys",
        "keys": [
            {"id": key_id, "sha256": digest(key), "tenant": "acme"}
            for key, key_id in ((batch_key, batch_id), (other_key, other_id))
        ],
    }
    listen = {"host": "127.0.0.1", "port": 0, "grpc_port": 0}
    urls = {"us-east": local.url, "eu-west": remote.url}
    running = await gateway(_config(urls, objectives=objectives, auth=auth, listen=listen))
    return running, batch_key, other_key, local, remote


async def test_an_api_keys_class_sets_the_objective_before_its_tenants(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    """Two keys of one tenant: the one whose id the config gives the batch class goes to the
    cheap region; the other gets the tenant's (default) tight class and stays local."""
    running, batch_key, other_key, _, _ = await _two_keys(emulator, gateway)
    status, route, timing, _ = await _send(running.url, {"Authorization": f"Bearer {batch_key}"})
    assert status == 200 and "backend=eu-west" in route
    assert "class=batch" in (timing["objective"].desc or "")
    status, route, timing, _ = await _send(running.url, {"Authorization": f"Bearer {other_key}"})
    assert status == 200 and "backend=us-east" in route
    assert "class=interactive" in (timing["objective"].desc or "")


def test_a_keys_class_must_exist() -> None:
    with pytest.raises(ConfigError, match=r"keys.abcd1234: class 'gold' is not in"):
        _config({"us-east": "http://h"}, objectives={"keys": {"abcd1234": "gold"}})


async def test_an_api_keys_class_sets_the_objective_on_the_grpc_door_too(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    """The gRPC door authenticates the call's ``authorization`` metadata as the HTTP door does
    its header, and the key it finds picks the class: the batch key's call goes to the cheap
    region, the other key's (the tenant's default, tight class) stays local."""
    running, batch_key, other_key, local, remote = await _two_keys(emulator, gateway)
    request = pb.ChatCompletionRequest(
        model=MODEL, messages=[pb.ChatMessage(role="user", text="hi")], max_tokens=4
    )
    routes = []
    async with grpc.aio.insecure_channel(running.app[GRPC_SERVER].target) as channel:
        for key in (batch_key, other_key):
            call = inference_stub(channel).ChatCompletion(
                request, metadata=(("authorization", f"Bearer {key}"),), timeout=30.0
            )
            chunks = [chunk async for chunk in call]
            assert chunks and await call.code() is grpc.StatusCode.OK
            initial = dict(await call.initial_metadata() or ())
            timing = {e.name: e for e in parse(str(initial["server-timing"]))}
            routes.append((str(initial["x-meridian-route"]), timing["objective"].desc or ""))
    (batch_route, batch_desc), (other_route, other_desc) = routes
    assert "backend=eu-west" in batch_route and "class=batch" in batch_desc
    assert "backend=us-east" in other_route and "class=interactive" in other_desc
    assert remote.stats.requests == 1 and local.stats.requests == 1
