"""The embedded default: a small emulated three-region fleet in the gateway's own process.

It exists so that ``meridian serve`` with no config gives a newcomer a working gateway to point
the ``openai`` SDK at. Every backend is an emulated serving engine (``loadtests.emulator``) on a
loopback port, with the round trip from a gateway in us-east to its region added in user space.
Nothing here is used when a config file is given.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from gateway.config import GatewayConfig, parse_config
from loadtests.emulator.config import EmulatedBackendConfig, EngineParams
from loadtests.emulator.server import start_emulated_backend
from routing.types import BackendKind

log = logging.getLogger("meridian.embedded")

DEMO_MODEL = "meridian-demo-8b"
GATEWAY_REGION = "us-east"
# Round trip from us-east to each region (public cloud inter-region measurements, rounded).
REGIONS = {
    "us-east": (39.0, -77.5, 2.0),
    "eu-west": (53.3, -6.3, 80.0),
    "ap-southeast": (1.35, 103.8, 215.0),
}
ENGINE = EngineParams(
    max_num_seqs=64,
    prefill_tokens_per_s=20_000.0,
    decode_base_ms=12.0,
    decode_per_seq_ms=0.25,
    first_token_overhead_ms=8.0,
    default_output_tokens=32,
)
SERVERLESS_ENGINE = ENGINE.model_copy(update={"cold_start_ms": 2_000.0, "idle_timeout_s": 120.0})


def _emulated_fleet() -> list[EmulatedBackendConfig]:
    fleet = []
    for index, (region, (_, _, rtt_ms)) in enumerate(REGIONS.items()):
        for kind, engine in (
            (BackendKind.DEDICATED, ENGINE),
            (BackendKind.SERVERLESS, SERVERLESS_ENGINE),
        ):
            fleet.append(
                EmulatedBackendConfig(
                    name=f"{region}-{kind.value}",
                    models=(DEMO_MODEL,),
                    region=region,
                    kind=kind,
                    engine=engine,
                    rtt_ms=rtt_ms,
                    seed=index,
                )
            )
    return fleet


@contextlib.asynccontextmanager
async def start_embedded_fleet(host: str = "127.0.0.1") -> AsyncIterator[GatewayConfig]:
    """Start the emulated fleet; yields the gateway config that points at it."""
    async with contextlib.AsyncExitStack() as stack:
        backends = []
        for spec in _emulated_fleet():
            running = await start_emulated_backend(spec, host=host, port=0)
            stack.push_async_callback(running.close)
            log.info(
                "EMULATED backend %s (%s, %s) at %s", spec.name, spec.region, spec.kind, running.url
            )
            engine = spec.engine
            backends.append(
                {
                    "name": spec.name,
                    "region": spec.region,
                    "kind": spec.kind.value,
                    "url": running.url + "/v1",
                    "engine": "vllm",
                    "models": list(spec.models),
                    "capacity": {
                        "max_num_seqs": engine.max_num_seqs,
                        "prefill_tokens_per_s": engine.prefill_tokens_per_s,
                        "itl_ms": engine.decode_base_ms,
                        "first_token_overhead_ms": engine.first_token_overhead_ms,
                        "cold_start_ms": engine.cold_start_ms,
                        "idle_timeout_s": engine.idle_timeout_s,
                    },
                }
            )
        regions = [
            {"name": name, "location": {"lat": lat, "lon": lon}, "rtt_ms": rtt}
            for name, (lat, lon, rtt) in REGIONS.items()
        ]
        yield parse_config(
            {"region": GATEWAY_REGION, "regions": regions, "backends": backends},
            "<embedded default>",
        )
