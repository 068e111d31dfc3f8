"""Real processes for the acceptance suite: ``meridian emulate`` fleets and ``meridian serve``.

A fleet file is started as one emulator process; the gateway's config is generated from the
same file (each backend's URL, region, kind and the capacities an operator would configure
from its spec sheet), written to disk and served by a gateway process. Tests then talk HTTP to
both: the gateway as a client would, the emulators' ``/admin/*`` to inject faults and distance.
"""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

from gateway.chain.hop_timing import TIMING_COMMENT
from gateway.timing import parse
from loadtests.emulator.fleet import FleetError, load_fleet
from tests.servers import hang_bound

MERIDIAN = [sys.executable, "-m", "gateway.cli"]
START_TIMEOUT_S = 30.0
TRUSTED_PROXY = "127.0.0.1"

# Where the three-region fleet's regions are (the GeoIP fixtures' networks map near these).
REGION_LOCATIONS = {
    "us-east": {"lat": 38.9, "lon": -77.0},
    "eu-west": {"lat": 53.35, "lon": -6.26},
    "ap-southeast": {"lat": 1.29, "lon": 103.85},
}


@dataclass(frozen=True, slots=True)
class Node:
    """One emulated backend as ``meridian emulate`` announced it."""

    name: str
    url: str
    region: str
    kind: str
    models: tuple[str, ...]


class Process:
    def __init__(self, argv: list[str], log_path: Path) -> None:
        self.log = log_path.open("wb")
        self.popen = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.log, text=True)

    def readline(self) -> str:
        assert self.popen.stdout is not None
        line = self.popen.stdout.readline()
        if not line:
            code = self.popen.wait(timeout=5)
            raise RuntimeError(f"process exited ({code}) before it was ready; see {self.log.name}")
        return line

    def stop(self) -> None:
        self.popen.terminate()
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(timeout=5)
        if self.popen.stdout is not None:
            self.popen.stdout.close()
        self.log.close()


def start_fleet(fleet_file: Path, from_region: str, logs: Path) -> tuple[Process, dict[str, Node]]:
    process = Process(
        [*MERIDIAN, "emulate", str(fleet_file), "--from-region", from_region],
        logs / f"emulate-{fleet_file.stem}.log",
    )
    nodes: dict[str, Node] = {}
    while True:
        line = orjson.loads(process.readline())
        if line == {"ready": True}:
            return process, nodes
        node = Node(line["name"], line["url"], line["region"], line["kind"], tuple(line["models"]))
        nodes[node.name] = node


def _capacity(engine: Any) -> dict[str, Any]:
    """What an operator writes down about a backend: its nominal speeds, not live signals."""
    capacity: dict[str, Any] = {
        "max_num_seqs": engine.max_num_seqs,
        "prefill_tokens_per_s": engine.prefill_tokens_per_s,
        "itl_ms": engine.decode_base_ms + engine.decode_per_seq_ms,
        "first_token_overhead_ms": engine.first_token_overhead_ms,
        "cold_start_ms": engine.cold_start_ms,
    }
    if engine.idle_timeout_s is not None:
        capacity["idle_timeout_s"] = engine.idle_timeout_s
    return capacity


def gateway_config(
    fleet_file: Path,
    gateway_region: str,
    nodes: Mapping[str, Node],
    signals: dict[str, Any],
    **extra: Any,
) -> dict[str, Any]:
    fleet = load_fleet(fleet_file)
    assert not isinstance(fleet, FleetError), str(fleet)
    backends = []
    for config in fleet.backend_configs(gateway_region):
        node = nodes[config.name]
        backends.append(
            {
                "name": config.name,
                "region": config.region,
                "kind": str(config.kind),
                "url": node.url + "/v1",
                "engine": "vllm",
                "models": list(config.models),
                "capacity": _capacity(config.engine),
            }
        )
    regions = [
        {
            "name": name,
            "location": REGION_LOCATIONS.get(name),
            "rtt_ms": fleet.rtt(gateway_region, name),
        }
        for name in fleet.regions
    ]
    return {
        "region": gateway_region,
        "regions": regions,
        "backends": backends,
        "signals": signals,
        "timeouts": {"first_token_s": 20.0},
        **extra,
    }


def geo_signals(database: Path, regions: list[str], default_origin: str) -> dict[str, Any]:
    """The ``signals.geo`` section. Region coordinates are repeated there because the config
    checks ``default_origin`` against ``signals.geo.regions`` before ``regions`` fills it in."""
    return {
        "database_path": str(database),
        "trusted_proxies": [f"{TRUSTED_PROXY}/32"],
        "default_origin": default_origin,
        "regions": {
            name: {
                "latitude": REGION_LOCATIONS[name]["lat"],
                "longitude": REGION_LOCATIONS[name]["lon"],
            }
            for name in regions
        },
    }


def start_gateway(config: dict[str, Any], workdir: Path, name: str) -> tuple[Process, str]:
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    argv = [*MERIDIAN, "serve", "--config", str(path), "--port", "0", "--log-level", "INFO"]
    argv += ["--workers", "1"]  # one gateway process per region in these scenarios
    process = Process(argv, workdir / f"gateway-{name}.log")
    line = process.readline()
    prefix = "meridian listening on "
    assert line.startswith(prefix), line
    url = line[len(prefix) :].strip()
    admin_line = process.readline()
    assert admin_line.startswith("meridian admin on "), admin_line
    ADMIN_URLS[url] = admin_line.split()[-1]
    return process, url


# Public URL -> admin listener URL (state, /metrics, readiness details) of every gateway started.
ADMIN_URLS: dict[str, str] = {}


def admin_of(url: str) -> str:
    return ADMIN_URLS[url]


async def wait_for_signals(
    session: aiohttp.ClientSession, gateway: str, model: str, timeout_s: float = 15.0
) -> dict[str, Any]:
    """Until the gateway has probed and scraped every backend at least once."""
    deadline = time.monotonic() + hang_bound(timeout_s)
    report: dict[str, Any] = {}
    while time.monotonic() < deadline:
        report = await explain(session, gateway, model, "warm-up")
        rows = report["candidates"] + report["filtered"]
        signals = [row["signals"] for row in rows]
        if all(s["probe_age_s"] is not None and s["metrics_age_s"] is not None for s in signals):
            return report
        await asyncio.sleep(0.1)
    raise AssertionError(f"signals never arrived: {report}")


async def until_probes_rank_as_configured(
    session: aiohttp.ClientSession,
    gateway: str,
    model: str,
    config: Mapping[str, Any],
    backends: list[str],
) -> None:
    """Until the gateway's probed round trips order ``backends`` as its configuration's region
    RTTs do, each gap at least half the configured one. The first probes run while the fleet
    and the gateway just started (on a loaded machine every one of them took 0.2-1.2 s longer):
    an unequal share of that stall puts a far backend ahead of a near one for several probe
    intervals (the smoothed RTT keeps 70% a probe), which no routing claim is about."""
    region_rtt = {r["name"]: r["rtt_ms"] for r in config["regions"]}
    region_of = {b["name"]: b["region"] for b in config["backends"]}
    configured = {name: region_rtt[region_of[name]] for name in backends}
    order = sorted(configured, key=configured.__getitem__)
    deadline = time.monotonic() + hang_bound(30.0)
    probed: dict[str, float] = {}
    while time.monotonic() < deadline:
        report = await explain(session, gateway, model, "warm-up")
        probed = {c["backend"]: c["terms"]["rtt"]["ms"] for c in report["candidates"]}
        if all(name in probed for name in order) and all(
            probed[b] - probed[a] >= (configured[b] - configured[a]) / 2
            for a, b in itertools.pairwise(order)
        ):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"probes never ranked {configured} as configured: {probed}")


async def explain(
    session: aiohttp.ClientSession,
    gateway: str,
    model: str,
    prompt: str,
    origin: str | None = None,
    max_tokens: int | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": prompt}]}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    params = {"origin": origin} if origin else {}
    async with session.post(f"{gateway}/v1/meridian/route", json=body, params=params) as resp:
        assert resp.status == 200, await resp.text()
        report: dict[str, Any] = await resp.json()
        return report


@dataclass(frozen=True, slots=True)
class Served:
    """One relayed request as the client saw it."""

    status: int
    backend: str | None
    region: str | None
    predicted_ttft_ms: float | None
    timing: dict[str, float]  # Server-Timing name -> dur (ms)
    client_ttft_ms: float | None
    cached_tokens: int | None
    sent_at: float  # monotonic
    # The backend's own account (the gateway's end-of-stream summary, ``upstream_timing``),
    # entry name without the hop label -> ms: an emulator's engine phases and ``emit_lag``.
    backend_timing: dict[str, float] = field(default_factory=dict)

    @property
    def upstream_ttfb_ms(self) -> float:
        return self.timing["upstream_ttfb"]


def _route(header: str) -> dict[str, str]:
    parts = (p.strip().partition("=") for p in header.split(";") if "=" in p)
    return {key: value for key, _, value in parts}


def carries_token(line: bytes) -> bool:
    """Whether an SSE line carries generated text (not vLLM's empty role preamble)."""
    line = line.strip()
    if not line.startswith(b"data: {"):
        return False
    choices = orjson.loads(line[6:]).get("choices") or []
    delta = choices[0].get("delta") or {} if choices else {}
    return bool(delta.get("content") or (choices and choices[0].get("text")))


def _backend_timing(summary: bytes) -> dict[str, float]:
    upstream = orjson.loads(summary).get("upstream_timing") or {}
    return {name.rpartition(".")[2]: float(ms) for name, ms in upstream.items()}


def _cached_tokens(line: bytes) -> int | None:
    if not line.startswith(b"data: {"):
        return None
    usage = orjson.loads(line[6:]).get("usage")
    if not isinstance(usage, dict):
        return None
    details = usage.get("prompt_tokens_details") or {}
    return int(details.get("cached_tokens") or 0)


async def chat(
    session: aiohttp.ClientSession,
    gateway: str,
    model: str,
    messages: list[dict[str, str]],
    *,
    client_ip: str | None = None,
    max_tokens: int = 2,
) -> Served:
    """A streamed chat completion; ``client_ip`` arrives as X-Forwarded-For from loopback."""
    headers = {"X-Forwarded-For": client_ip} if client_ip else {}
    body = {
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    sent = time.monotonic()
    async with session.post(f"{gateway}/v1/chat/completions", json=body, headers=headers) as resp:
        if resp.status != 200:
            await resp.read()
            return Served(resp.status, None, None, None, {}, None, None, sent)
        first_at: float | None = None
        cached: int | None = None
        backend_timing: dict[str, float] = {}
        async for raw in resp.content:
            line = raw.strip()
            if first_at is None and carries_token(line):
                first_at = time.monotonic()
            cached = _cached_tokens(line) if cached is None else cached
            if line.startswith(TIMING_COMMENT.strip()):
                backend_timing = _backend_timing(line[len(TIMING_COMMENT.strip()) :])
        route = _route(resp.headers.get("X-Meridian-Route", ""))
        timing = {e.name: e.dur_ms for e in parse(resp.headers.get("Server-Timing", ""))}
        predicted = route.get("predicted_ttft_ms")
        return Served(
            status=200,
            backend=route.get("backend"),
            region=route.get("region"),
            predicted_ttft_ms=float(predicted) if predicted is not None else None,
            timing={k: v for k, v in timing.items() if v is not None},
            client_ttft_ms=None if first_at is None else (first_at - sent) * 1000.0,
            cached_tokens=cached,
            sent_at=sent,
            backend_timing=backend_timing,
        )


async def admin(session: aiohttp.ClientSession, node: Node, what: str, body: Any = None) -> Any:
    """POST /admin/<what> (faults, rtt, reset) or GET /admin/stats on an emulated backend."""
    if what == "stats":
        async with session.get(f"{node.url}/admin/stats") as resp:
            return await resp.json()
    async with session.post(f"{node.url}/admin/{what}", json=body or {}) as resp:
        assert resp.status == 200, await resp.text()
        return await resp.json()


async def backend_total(
    session: aiohttp.ClientSession, gateway: str, sample: str, backend: str
) -> float:
    """A /metrics sample summed over every series of ``backend`` (whatever its other labels)."""
    async with session.get(f"{admin_of(gateway)}/metrics") as resp:
        return backend_sum(await resp.text(), sample, backend)


def backend_sum(text: str, sample: str, backend: str, *labels: str) -> float:
    """``sample`` in a /metrics text, summed over the series of ``backend`` that carry every
    one of ``labels`` (``'le="0.1"'``, say)."""
    wanted = (f'backend="{backend}"', *labels)
    total = 0.0
    for line in text.splitlines():
        if line.startswith(sample + "{") and all(label in line for label in wanted):
            total += float(line.rsplit(" ", 1)[1])
    return total
