"""Fleet files: the shipped ones load, bad ones fail naming file and key, a fleet process runs."""

from __future__ import annotations

import json
import signal
import urllib.request
from pathlib import Path

import pytest

from loadtests.emulator.fleet import FleetError, FleetFile, load_fleet
from tests.emulator.helpers import read_announcements, spawn_emulate
from tests.servers import PROCESS_BOUND_S

FLEETS = Path(__file__).parents[2] / "loadtests" / "fleets"


def test_three_region_fleet_shape() -> None:
    fleet = load_fleet(FLEETS / "three-region.yaml")
    assert isinstance(fleet, FleetFile), fleet
    assert set(fleet.regions) == {"us-east", "eu-west", "ap-southeast"}
    assert (fleet.rtt("us-east", "eu-west"), fleet.rtt("ap-southeast", "us-east")) == (80, 215)
    assert fleet.rtt("eu-west", "ap-southeast") == 160 and fleet.rtt("eu-west", "eu-west") == 2
    configs = {c.name: c for c in fleet.backend_configs(from_region="eu-west")}
    for region in fleet.regions:
        assert configs[f"{region}-dedicated"].kind == "dedicated"
        serverless = configs[f"{region}-serverless"]
        assert serverless.kind == "serverless" and serverless.engine.idle_timeout_s is not None
    assert configs["ap-southeast-dedicated"].rtt_ms == 160
    assert configs["ap-southeast-dedicated"].engine.max_num_seqs == 64  # override
    assert configs["ap-southeast-dedicated"].engine.decode_per_seq_ms == 0.25  # default
    assert {c.seed for c in configs.values()} == set(range(6))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("regions: [a]\nbackends: [{name: x, region: a, engine: {max_num_seqs: 0}}]",
         "backends[0] (x).engine.max_num_seqs: Input should be greater than or equal to 1"),
        ("regions: [a]\nbackends: [{name: x, region: b}]", "backends[0].region: unknown region"),
        ("regions: [a, b]\nbackends: [{name: x, region: a}]", "no round trip between"),
        ("regions: [a]\nbackends: [{name: x, region: a, color: red}]",
         "backends[0] (x).color: Extra inputs are not permitted"),
        ("regions: [a]\nbackends: [{name: x, region: a}, {name: x, region: a}]", "duplicate"),
        ("regions: [a\n", "cannot read fleet file"),
    ],
)  # fmt: skip
def test_invalid_fleet_names_file_and_key(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(text)
    error = load_fleet(path)
    assert isinstance(error, FleetError)
    assert str(path) in error.message and expected in error.message


def test_fleet_process_from_a_region() -> None:
    process = spawn_emulate(str(FLEETS / "three-region.yaml"), "--from-region", "us-east")
    try:
        lines = read_announcements(process)
        assert len(lines) == 6 and len({line["url"] for line in lines}) == 6
        near = next(line for line in lines if line["name"] == "us-east-dedicated")
        assert near["region"] == "us-east" and near["models"] == ["llama-3.1-70b"]
        with urllib.request.urlopen(f"{near['url']}/v1/models", timeout=5) as resp:
            assert json.load(resp)["data"][0]["id"] == "llama-3.1-70b"
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=PROCESS_BOUND_S) == 0


def test_unknown_from_region_is_an_error() -> None:
    process = spawn_emulate(str(FLEETS / "three-region.yaml"), "--from-region", "mars")
    assert process.wait(timeout=PROCESS_BOUND_S) == 2
