"""The fleet a recorded trace is replayed on: a fleet file (``loadtests/fleets``, the one
``meridian emulate`` runs) for the engines, regions and round trips, plus optionally the
operator's gateway config for what only it knows: the gateway's region, backend prices and the
routing parameters of its policy.

A backend's ``rtt_ms`` override in the fleet file is not modelled (the region matrix is).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.config import GatewayConfig, load_config
from gateway.pricing import PriceConfig
from loadtests.emulator.fleet import FleetError, load_fleet
from loadtests.sim.scenario import Scenario, ScenarioError, parse_scenario


@dataclass(frozen=True, slots=True)
class ReplayFleet:
    scenario: Scenario
    gateway_region: str
    recorded_policy: str | None  # the config's routing policy: what the trace was served by


def _prices(config: GatewayConfig | None) -> Mapping[str, PriceConfig]:
    if config is None:
        return {}
    return {b.name: b.price for b in config.backends if b.price is not None}


def _signals(config: GatewayConfig | None) -> dict[str, float]:
    """The recording gateway's scrape and probe intervals (the simulator's defaults without a
    config): how often its router saw engine queues decides how often it routed on a stale one;
    and their jitter: each backend is then read on its own schedule, as the gateway's loops
    read it (loadtests/sim/signal_schedule.py), not all at once on a shared tick."""
    if config is None:
        return {}
    scrape = config.signals.engine_metrics.interval_s
    probe = config.signals.probes.interval_s
    return {
        "scrape_interval_s": scrape,
        "probe_interval_s": probe,
        "snapshot_interval_s": min(1.0, scrape, probe),
        "schedule_jitter": config.signals.engine_metrics.jitter,
    }


def replay_fleet(
    fleet_path: Path,
    config_path: Path | None,
    gateway_region: str | None,
    span_s: float,
    signals_after_s: float = 0.0,
) -> ReplayFleet | str:
    """The replay's scenario, or an error message naming the file. ``signals_after_s``: the
    replay's gateway neither scrapes nor probes before then (``--signals-after``: the
    recording gateway had just started, docs/replay.md)."""
    fleet = load_fleet(fleet_path)
    if isinstance(fleet, FleetError):
        return fleet.message
    config = load_config(config_path) if config_path is not None else None
    region = gateway_region or (config.region if config is not None else None) or fleet.regions[0]
    if region not in fleet.regions:
        return f"{fleet_path}: the gateway region {region!r} is not in its regions"
    prices = _prices(config)
    backends: list[dict[str, Any]] = []
    for entry in fleet.backend_configs(region):
        group: dict[str, Any] = {
            "name": entry.name, "region": entry.region, "kind": entry.kind.value,
            "engine": entry.engine.model_dump(),
        }  # fmt: skip
        if entry.name in prices:
            group["price"] = prices[entry.name].model_dump()
        backends.append(group)
    policy_params: dict[str, Any] = {}
    if config is not None:
        policy_params[config.routing.policy] = dict(config.routing.params)
    raw = {
        "name": f"replay-{fleet.name}",
        "description": f"replay on {fleet_path.name}",
        "duration_s": max(span_s, 1.0),
        "model": fleet.defaults.models[0],
        "regions": list(fleet.regions),
        "rtt_ms": {a: dict(row) for a, row in fleet.rtt_ms.items()},
        "intra_region_rtt_ms": fleet.intra_region_rtt_ms,
        "gateways": {region: 1},
        "backends": backends,
        "clients": {"replay": {"region": region, "rate_rps": 1.0}},  # unused: arrivals are given
        "workloads": {"replay": {}},
        "policy_params": policy_params,
        "signals": {**_signals(config), "signals_after_s": signals_after_s},
    }
    scenario = parse_scenario(raw, str(fleet_path))
    if isinstance(scenario, ScenarioError):
        return scenario.message
    return ReplayFleet(scenario, region, None if config is None else config.routing.policy)
