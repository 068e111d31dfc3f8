"""The compose topology run for real (``make image-test``): three regional gateways, their
emulated engines and the delay proxies between them, on a podman network. A streaming request
to us-east is served there; with us-east's engine stopped, the same request is served by
eu-west through the chain link and its 80 ms delay proxy.

Redis is left out: no registry can be reached to pull its image in CI. The gateways then serve
on local state (their shared state is ``degraded``), which is also what this checks.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
import yaml
from openai import OpenAI

from tests.deploy.test_image import IMAGE, podman_env
from tests.deploy.tools import DEPLOY, run, tool
from tests.ports import unclaimed_ports

COMPOSE = DEPLOY / "docker" / "compose.yaml"
PROJECT = "meridian-ci"
pytestmark = [
    pytest.mark.skipif(IMAGE is None, reason="no image built: run `make image-test`"),
    pytest.mark.timeout(600),
]
REGIONS = ("us-east", "eu-west", "ap-southeast")


def _ready(url: str, bound_s: float = 180.0) -> None:
    """Poll /readyz until the gateway says ready (its own readiness, not a sleep)."""
    deadline = time.monotonic() + bound_s
    while True:
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        assert time.monotonic() < deadline, f"{url} not ready after {bound_s} s"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def topology() -> Iterator[dict[str, str]]:
    ports = dict(zip(REGIONS, unclaimed_ports(3), strict=True))
    env = podman_env() | {"MERIDIAN_IMAGE": IMAGE or ""}
    env |= {f"MERIDIAN_PORT_{r.upper().replace('-', '_')}": str(p) for r, p in ports.items()}
    services = [s for s in yaml.safe_load(COMPOSE.read_text())["services"] if "redis" not in s]
    compose = [tool("podman-compose"), "-p", PROJECT, "-f", str(COMPOSE)]
    try:
        run([*compose, "up", "-d", "--no-build", *services], env=env)
        urls = {r: f"http://127.0.0.1:{p}" for r, p in ports.items()}
        for url in urls.values():
            _ready(url)
        yield urls | {"_compose": " ".join(map(str, compose))}
    finally:
        subprocess.run([*compose, "down", "-t", "5"], env=env, capture_output=True, check=False)


def _stream(url: str) -> tuple[str, str]:
    client = OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
    with client.chat.completions.with_streaming_response.create(
        model="llama-3.1-70b",
        messages=[{"role": "user", "content": "Where does the time go?"}],
        max_tokens=8,
        stream=True,
    ) as response:
        route = response.headers.get("x-meridian-route", "")
        text = "".join(c.choices[0].delta.content or "" for c in response.parse() if c.choices)
    return route, text


def test_each_region_serves_a_stream_locally(topology: dict[str, str]) -> None:
    for region in REGIONS:
        route, text = _stream(topology[region])
        assert text
        assert f"region={region}" in route, route


def test_a_region_without_its_engine_is_served_through_the_chain(
    topology: dict[str, str],
) -> None:
    env = podman_env()
    run([*topology["_compose"].split(), "stop", "-t", "2", "emu-us-east"], env=env | os.environ)
    route, text = _stream(topology["us-east"])
    assert text
    assert "region=eu-west" in route, route  # the nearest other region, 80 ms away
