"""Tiny scenarios built in code, so each test says exactly what it simulates."""

from __future__ import annotations

from typing import Any

import pytest

from loadtests.sim.scenario import Scenario, ScenarioError, parse_scenario


def tiny(**overrides: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "name": "tiny",
        "seed": 5,
        "duration_s": 20,
        "regions": ["near", "far"],
        "rtt_ms": {"near": {"far": 200}},
        "intra_region_rtt_ms": 2,
        "gateways": {"near": 1},
        "engine_defaults": {"max_num_seqs": 16, "kv_cache_blocks": 4096},
        "backends": [
            {"name": "local", "region": "near", "count": 2},
            {"name": "remote", "region": "far", "count": 2},
        ],
        "clients": {"users": {"region": "near", "rate_rps": 4}},
        "workloads": {
            "chat": {
                "tenants": 3,
                "system_prompts": 2,
                "prefix_tokens": [200, 400],
                "question_tokens": [10, 50],
                "output_tokens": [5, 30],
            }
        },
    }
    raw.update(overrides)
    return raw


def build(raw: dict[str, Any]) -> Scenario:
    scenario = parse_scenario(raw, "tiny.yaml")
    if isinstance(scenario, ScenarioError):
        pytest.fail(scenario.message)
    return scenario
