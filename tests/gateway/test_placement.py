"""Placement policy end to end: residency is a hard filter, whichever backend predicts faster."""

from __future__ import annotations

from collections.abc import Mapping

import aiohttp

from gateway.config import GatewayConfig, parse_config
from tests.gateway.support import MODEL

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def _config(urls: dict[str, str], placement: Mapping[str, object]) -> GatewayConfig:
    return parse_config(
        {
            "region": "us-east",
            "regions": [{"name": "us-east", "rtt_ms": 2}, {"name": "eu-west", "rtt_ms": 80}],
            "backends": [
                {"name": name, "region": name.split("/")[0], "url": url + "/v1", "models": [MODEL]}
                for name, url in urls.items()
            ],
            "placement": placement,
        },
        "<test>",
    )


async def _route(url: str, tenant: str) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            url + "/v1/chat/completions", json=CHAT, headers={"X-Meridian-Tenant": tenant}
        ) as response,
    ):
        await response.read()
        return response.status, response.headers.get("X-Meridian-Route", "")


async def test_residency_overrides_the_faster_region(emulator, gateway) -> None:
    us = await emulator("us-east")
    eu = await emulator("eu-west")
    placement = {"tenants": {"acme-eu": {"allowed_regions": ["eu-west"]}}}
    running = await gateway(_config({"us-east": us.url, "eu-west": eu.url}, placement))
    for _ in range(5):
        status, route = await _route(running.url, "acme-eu")
        assert status == 200 and "region=eu-west" in route
    status, route = await _route(running.url, "someone-else")
    assert status == 200 and "region=us-east" in route  # 2 ms away beats 80 ms away


async def test_residency_with_no_allowed_backend_is_503_naming_why(emulator, gateway) -> None:
    us = await emulator("us-east")
    placement = {"tenants": {"acme-eu": {"allowed_regions": ["eu-west"]}}}
    running = await gateway(_config({"us-east": us.url}, placement))
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            running.url + "/v1/chat/completions",
            json=CHAT,
            headers={"X-Meridian-Tenant": "acme-eu"},
        ) as response,
    ):
        assert response.status == 503
        body = await response.json()
    assert "us-east" in body["error"]["message"]
    assert us.stats.requests == 0


def test_placement_regions_must_exist() -> None:
    import pytest

    from gateway.config import ConfigError

    with pytest.raises(ConfigError, match="placement names regions not in 'regions': mars"):
        _config({"us-east": "http://h"}, {"origins": {"us-east": {"allowed_regions": ["mars"]}}})
