"""The embedded default: the emulated three-region fleet in the gateway's own process.

It exists so that ``meridian serve`` with no config gives a newcomer a working gateway to point
the ``openai`` SDK at. The fleet is ``loadtests/fleets/three-region.yaml`` (the same file
``meridian emulate`` and the benchmarks use), seen from a gateway in us-east: every backend is an
emulated serving engine on a loopback port with its region's round trip added in user space.
Nothing here is used when a config file is given.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import loadtests
from gateway.config import GatewayConfig, parse_config
from loadtests.emulator.config import EmulatedBackendConfig
from loadtests.emulator.fleet import FleetError, FleetFile, load_fleet
from loadtests.emulator.server import start_emulated_backend

log = logging.getLogger("meridian.embedded")

FLEET_FILE = Path(loadtests.__file__).parent / "fleets" / "three-region.yaml"
GATEWAY_REGION = "us-east"
# Where the fleet's regions are (AWS us-east-1, eu-west-1, ap-southeast-1), for GeoIP distances.
LOCATIONS = {
    "us-east": (38.9, -77.4),
    "eu-west": (53.3, -6.3),
    "ap-southeast": (1.35, 103.8),
}


def backend_entry(spec: EmulatedBackendConfig, url: str) -> dict[str, Any]:
    engine = spec.engine
    return {
        "name": spec.name,
        "region": spec.region,
        "kind": spec.kind.value,
        "url": url + "/v1",
        "engine": "vllm",
        "models": list(spec.models),
        "capacity": {
            "max_num_seqs": engine.max_num_seqs,
            "prefill_tokens_per_s": engine.prefill_tokens_per_s,
            # Routing's ITL is one engine step at a half-full batch.
            "itl_ms": engine.decode_base_ms + engine.decode_per_seq_ms * engine.max_num_seqs / 2,
            "max_num_batched_tokens": engine.max_num_batched_tokens,
            "first_token_overhead_ms": engine.first_token_overhead_ms,
            "cold_start_ms": engine.cold_start_ms,
            "idle_timeout_s": engine.idle_timeout_s,
        },
    }


def region_entries(fleet: FleetFile) -> list[dict[str, Any]]:
    entries = []
    for name in fleet.regions:
        entry: dict[str, Any] = {"name": name, "rtt_ms": fleet.rtt(GATEWAY_REGION, name)}
        if name in LOCATIONS:
            lat, lon = LOCATIONS[name]
            entry["location"] = {"lat": lat, "lon": lon}
        entries.append(entry)
    return entries


@contextlib.asynccontextmanager
async def start_embedded_fleet(host: str = "127.0.0.1") -> AsyncIterator[GatewayConfig]:
    """Start the emulated fleet; yields the gateway config that points at it."""
    fleet = load_fleet(FLEET_FILE)
    if isinstance(fleet, FleetError):
        raise RuntimeError(f"embedded fleet: {fleet.message}")
    async with contextlib.AsyncExitStack() as stack:
        backends = []
        for spec in fleet.backend_configs(from_region=GATEWAY_REGION):
            running = await start_emulated_backend(spec, host=host, port=0)
            stack.push_async_callback(running.close)
            log.info(
                "EMULATED backend %s (%s, %s, rtt %.0f ms) at %s",
                spec.name,
                spec.region,
                spec.kind.value,
                spec.rtt_ms,
                running.url,
            )
            backends.append(backend_entry(spec, running.url))
        yield parse_config(
            {
                "region": GATEWAY_REGION,
                "regions": region_entries(fleet),
                "backends": backends,
                # A demo in front of emulators: no keys, and the start log says auth is off.
                "auth": {"mode": "off"},
            },
            "<embedded default>",
        )
