"""What the door-timeout tests share: a gateway in front of one emulated backend, with the
lean door or aiohttp's server reading the listener, and the door's counters."""

from __future__ import annotations

from gateway.app import RunningGateway
from gateway.state_keys import METRICS
from tests.gateway.support import config_for
from tests.servers import EmulatorFactory, GatewayFactory

# The factories, and whether the lean door reads the listener (gateway/lean_door) or aiohttp's
# server does (door.lean: false; a TLS listener): each has the door's timeouts and caps.
Rig = tuple[EmulatorFactory, GatewayFactory, bool]


async def door_gateway(rig: Rig, **door: object) -> RunningGateway:
    """A gateway with ``door`` settings (and the rig's door) in front of emulated backend b1."""
    emulator, gateway, lean = rig
    door.setdefault("lean", lean)
    backend = await emulator("b1")
    return await gateway(config_for({"b1": backend.url}, door=door))


def sample(running: RunningGateway, name: str, **labels: str) -> float:
    return running.app[METRICS].registry.get_sample_value(name, labels) or 0.0


def door_timeouts(running: RunningGateway, phase: str) -> float:
    """Requests the door ended with a 408 in ``phase`` (headers, body)."""
    return sample(running, "meridian_door_timeouts_total", phase=phase)
