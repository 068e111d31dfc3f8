"""Configs for the door tests: backends with the APIs they declare."""

from __future__ import annotations

from typing import Any

from gateway.config import GatewayConfig, parse_config
from tests.gateway.support import MODEL


def config_with_apis(
    backends: dict[str, tuple[str, list[str] | None]], **extra: Any
) -> GatewayConfig:
    """``backends``: name -> (url, apis or None for the default)."""
    entries = []
    for name, (url, apis) in backends.items():
        entry: dict[str, Any] = {
            "name": name,
            "region": "local",
            "url": url + "/v1",
            "models": [MODEL],
        }
        if apis is not None:
            entry["apis"] = apis
        entries.append(entry)
    data = {
        "backends": entries,
        "routing": {"policy": "round_robin"},
        "timeouts": {"first_token_s": 5.0},
        **extra,
    }
    return parse_config(data, "<doors-test>")
