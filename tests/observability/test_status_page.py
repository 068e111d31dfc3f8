"""The live status page in a real headless Chromium: it loads, shows every configured backend
by region, and updates when a backend is ejected; and the same data as JSON."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from gateway.state_keys import RELAY
from loadtests.emulator.config import FaultConfig
from tests.gateway.support import MODEL, config_for
from tests.observability.browser import chromium

OUTLIER = {
    "consecutive_failures": 2,
    "base_ejection_s": 300.0,  # stays ejected for the whole test
    "max_ejection_percent": 50,
    "panic_threshold": 0.0,
}


async def _fleet(emulator, gateway) -> tuple[Any, dict[str, Any]]:
    emulators = {name: await emulator(name) for name in ("eu-1", "eu-2", "us-1")}
    backends = [
        {"name": name, "region": name[:2], "url": e.url + "/v1", "models": [MODEL]}
        for name, e in emulators.items()
    ]
    regions = [{"name": "eu", "rtt_ms": 1.0}, {"name": "us", "rtt_ms": 30.0}]
    config = config_for(
        {},
        region="eu",
        regions=regions,
        backends=backends,
        chain={"id": "eu-gw"},
        routing={"policy": "round_robin"},
        signals={"outlier": OUTLIER, "tick_interval_s": 0.02, "probes": {"enabled": False}},
    )
    return await gateway(config), emulators


async def _chat(session: aiohttp.ClientSession, url: str) -> int:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    async with session.post(url + "/v1/chat/completions", json=body) as response:
        await response.read()
        return response.status


# Read the page in one script: it redraws every refresh, so elements found one call earlier
# may be gone (stale) by the next.
_PAGE_STATE = """
return {
  rows: Array.from(document.querySelectorAll("tr[data-backend]")).map(
    r => [r.dataset.backend, r.dataset.health, r.innerText]),
  regions: Array.from(document.querySelectorAll("section[data-region]")).map(
    s => s.dataset.region),
  gateway: document.getElementById("gateway").innerText,
  summary: document.getElementById("summary").innerText,
  updates: Number(document.body.dataset.updates || 0),
};
"""


def _page(driver: WebDriver) -> dict[str, Any]:
    state: dict[str, Any] = driver.execute_script(_PAGE_STATE)
    return state


def _rows(driver: WebDriver) -> dict[str, str]:
    return {name: health for name, health, _ in _page(driver)["rows"]}


async def test_status_page_shows_every_backend_and_updates_on_ejection(
    emulator, gateway, tmp_path: Path
) -> None:
    running, emulators = await _fleet(emulator, gateway)
    async with aiohttp.ClientSession() as session:
        for _ in range(6):
            assert await _chat(session, running.url) == 200
    with chromium() as driver:
        await asyncio.to_thread(driver.get, running.admin_url + "/status?refresh=0.2")
        wait = WebDriverWait(driver, 30, poll_frequency=0.05)
        await asyncio.to_thread(wait.until, lambda d: len(_rows(d)) == 3)
        page = _page(driver)
        assert {name: health for name, health, _ in page["rows"]} == {
            "eu-1": "ok",
            "eu-2": "ok",
            "us-1": "ok",
        }
        assert page["regions"] == ["eu", "us"]
        assert "eu-gw" in page["gateway"]
        assert "3 of 3 backends usable" in page["summary"]
        eu1 = next(text for name, _, text in page["rows"] if name == "eu-1")
        assert "ms" in eu1 and "%" in eu1  # observed TTFT and traffic share are filled in

        # eu-2 starts failing: outlier detection ejects it, and the open page shows it.
        emulators["eu-2"].set_faults(FaultConfig(error_rate=1.0))
        relay = running.app[RELAY]
        async with aiohttp.ClientSession() as session:
            while "eu-2" not in relay.fleet.health().ejected_until:
                assert await _chat(session, running.url) == 200  # retried elsewhere
        await asyncio.to_thread(wait.until, lambda d: _rows(d).get("eu-2") == "ejected")
        page = _page(driver)
        assert _rows(driver)["eu-1"] == "ok"
        assert "2 of 3 backends usable" in page["summary"]
        driver.save_screenshot(str(tmp_path / "status.png"))
    assert (tmp_path / "status.png").stat().st_size > 10_000


async def test_status_json_has_the_same_data_on_the_admin_listener_only(emulator, gateway) -> None:
    running, _ = await _fleet(emulator, gateway)
    async with aiohttp.ClientSession() as session:
        for _ in range(3):
            assert await _chat(session, running.url) == 200
        async with session.get(running.admin_url + "/status.json") as response:
            assert response.status == 200
            data = await response.json()
        for path in ("/status", "/status.json"):  # the public port does not have it
            async with session.get(running.url + path) as response:
                assert response.status == 404
    assert data["gateway"]["id"] == "eu-gw" and data["gateway"]["region"] == "eu"
    assert data["regions"] == [
        {"name": "eu", "backends": ["eu-1", "eu-2"]},
        {"name": "us", "backends": ["us-1"]},
    ]
    rows = {b["name"]: b for b in data["backends"]}
    assert set(rows) == {"eu-1", "eu-2", "us-1"}
    assert sum(b["requests"] for b in rows.values()) == 3
    assert abs(sum(b["traffic_share"] for b in rows.values()) - 1.0) < 0.01
    for row in rows.values():
        assert row["health"] == "ok" and row["warm"] is True and row["in_flight"] == 0
        assert row["observed_ttft_ms"] > 0
    assert data["state"] == {"backend": "memory", "status": "ok"}
