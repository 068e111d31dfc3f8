"""What an editor gets from the config format: the schema's identity and enums, a version key,
modelines in the shipped files, and warnings for settings that are almost certainly wrong."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.config import SCHEMA_ID, ConfigError, json_schema, parse_config
from gateway.config_warnings import config_warnings
from routing.policies import POLICIES

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = [ROOT / "deploy" / "gateway.example.yaml", ROOT / "deploy/kubernetes/base/gateway.yaml"]
MODELINE = "# yaml-language-server: $schema="


def _backend(**extra: Any) -> dict[str, Any]:
    return {"name": "b", "region": "r", "url": "http://127.0.0.1:9/v1", "models": ["m"], **extra}


def test_schema_has_an_id_a_version_and_closed_enums() -> None:
    schema = json_schema()
    assert schema["$id"] == SCHEMA_ID and schema["$schema"].endswith("2020-12/schema")
    assert schema["properties"]["version"]["const"] == 1
    routing = schema["$defs"]["RoutingConfig"]["properties"]["policy"]
    assert routing["enum"] == sorted(POLICIES)
    apis = schema["$defs"]["BackendConfig"]["properties"]["apis"]["items"]
    assert set(apis["enum"]) == {"chat", "completions", "embeddings", "responses", "messages"}


def test_version_defaults_to_1_and_others_are_refused() -> None:
    assert parse_config({"backends": [_backend()]}).version == 1
    with pytest.raises(ConfigError, match=r"gw.yaml: version: Input should be 1"):
        parse_config({"version": 2, "backends": [_backend()]}, "gw.yaml")


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_configs_point_editors_at_the_schema(path: Path) -> None:
    first = path.read_text().splitlines()[0]
    assert first.startswith(MODELINE)
    target = (path.parent / first[len(MODELINE) :]).resolve()
    assert target == ROOT / "docs" / "config.schema.json"
    assert yaml.safe_load(path.read_text())["backends"]


@pytest.mark.parametrize(
    ("data", "key"),
    [
        (
            {"backends": [_backend(kind="serverless")]},
            "backends[0].capacity.cold_start_ms",
        ),
        (
            {"backends": [_backend(kind="serverless", capacity={"cold_start_ms": 4000})]},
            "backends[0].capacity.idle_timeout_s",
        ),
        (
            {
                "backends": [_backend()],
                "signals": {"engine_metrics": {"interval_s": 30}, "probes": {"interval_s": 5}},
            },
            "signals.engine_metrics.interval_s",
        ),
    ],
)
def test_almost_certainly_wrong_settings_warn_by_key(data: dict[str, Any], key: str) -> None:
    warnings = config_warnings(parse_config(data))
    assert len(warnings) == 1 and warnings[0].startswith(key + ":"), warnings


def test_sound_settings_do_not_warn() -> None:
    capacity = {"cold_start_ms": 4000, "idle_timeout_s": 300}
    data = {"backends": [_backend(), _backend(name="s", kind="serverless", capacity=capacity)]}
    assert config_warnings(parse_config(data)) == []
    assert (
        config_warnings(parse_config({"backends": [_backend(kind="serverless", keep_warm=True)]}))
        == []
    )


def test_check_config_prints_the_warnings(tmp_path: Path) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump({"backends": [_backend(kind="serverless")]}))
    result = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "check-config", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert f"{path}: warning: backends[0].capacity.cold_start_ms:" in result.stderr


def _properties(node: dict[str, Any], defs: dict[str, Any], path: str, seen: frozenset[str]):
    """Every property under ``node``, following $ref, anyOf, items and additionalProperties."""
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        if name not in seen:
            yield from _properties(defs[name], defs, path, seen | {name})
        return
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in node.get(key, ()):
            yield from _properties(sub, defs, path, seen)
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            yield from _properties(
                node[key], defs, f"{path}[]" if key == "items" else f"{path}.*", seen
            )
    for name, sub in node.get("properties", {}).items():
        where = f"{path}.{name}" if path else name
        yield where, sub
        yield from _properties(sub, defs, where, seen)


def test_every_field_of_the_schema_is_described() -> None:
    schema = json_schema()
    undescribed = sorted(
        {
            where
            for where, sub in _properties(schema, schema["$defs"], "", frozenset())
            if not sub.get("description")
        }
    )
    assert undescribed == [], (
        f"{len(undescribed)} fields need Field(description=...): {undescribed}"
    )
