"""Replicas sharing one config must not break routing ties in lockstep (herding)."""

from __future__ import annotations

from typing import Any

from gateway.config import parse_config
from gateway.state.wiring import SharedState

BACKENDS = [{"name": "a", "region": "r", "url": "http://h/v1", "models": ["m"]}]


def _salt(state: dict[str, Any]) -> int:
    shared = SharedState.from_config(parse_config({"backends": BACKENDS, "state": state}))
    return shared.seed_salt()


def test_a_lone_gateway_keeps_its_configured_seed() -> None:
    assert _salt({}) == 0


def test_replicas_on_shared_state_get_different_seeds() -> None:
    redis = {"backend": "redis", "url": "redis://127.0.0.1:1/0"}
    one = _salt({**redis, "replica_id": "gw-1"})
    two = _salt({**redis, "replica_id": "gw-2"})
    assert one != two and one != 0
    assert one == _salt({**redis, "replica_id": "gw-1"})  # stable for a given replica
