"""Settings that validate but are almost certainly wrong: each a warning naming the key, what
will happen and what to set. ``meridian check-config`` prints them; ``serve`` and a reload log
them. Add a check here, with its test in tests/gateway/test_config_editor.py."""

from __future__ import annotations

from collections.abc import Callable

from gateway.config import GatewayConfig
from routing.types import BackendKind


def _serverless_without_cold_start(config: GatewayConfig) -> list[str]:
    return [
        f"backends[{i}].capacity.cold_start_ms: backend {b.name!r} is serverless but has no "
        "cold start (0 ms): routing will predict its first request after an idle spell as if "
        "warm; set the measured scale-from-zero time"
        for i, b in enumerate(config.backends)
        if b.kind is BackendKind.SERVERLESS and b.capacity.cold_start_ms == 0 and not b.keep_warm
    ]


def _serverless_without_idle_timeout(config: GatewayConfig) -> list[str]:
    return [
        f"backends[{i}].capacity.idle_timeout_s: serverless backend {b.name!r} has a cold start "
        "but no idle timeout: routing cannot tell when it has scaled to zero; set the "
        "platform's scale-to-zero delay"
        for i, b in enumerate(config.backends)
        if b.kind is BackendKind.SERVERLESS
        and b.capacity.cold_start_ms > 0
        and b.capacity.idle_timeout_s is None
    ]


def _scrape_slower_than_probes(config: GatewayConfig) -> list[str]:
    signals = config.signals
    scrape, probe = signals.engine_metrics.interval_s, signals.probes.interval_s
    if not signals.engine_metrics.enabled or scrape <= probe:
        return []
    return [
        f"signals.engine_metrics.interval_s: {scrape:g}s is longer than "
        f"signals.probes.interval_s ({probe:g}s): queue and KV signals will be staler than "
        "the probes that say a backend is up; scrape at least as often as you probe"
    ]


CHECKS: tuple[Callable[[GatewayConfig], list[str]], ...] = (
    _serverless_without_cold_start,
    _serverless_without_idle_timeout,
    _scrape_slower_than_probes,
)


def config_warnings(config: GatewayConfig) -> list[str]:
    return [warning for check in CHECKS for warning in check(config)]
