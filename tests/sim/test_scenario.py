from __future__ import annotations

from pathlib import Path

from loadtests.sim.scenario import ScenarioError, load_scenario, parse_scenario
from tests.sim.conftest import tiny

SHIPPED = sorted(Path("loadtests/scenarios").glob("*.yaml"))


def _error(raw: dict[str, object]) -> str:
    result = parse_scenario(raw, "bad.yaml")
    assert isinstance(result, ScenarioError)
    return result.message


def test_every_shipped_scenario_is_valid() -> None:
    assert len(SHIPPED) >= 4
    for path in SHIPPED:
        result = load_scenario(path)
        assert not isinstance(result, ScenarioError), result


def test_unknown_region_names_file_and_key() -> None:
    raw = tiny()
    raw["backends"] = [*raw["backends"], {"name": "moon", "region": "moon"}]
    message = _error(raw)
    assert message.startswith("bad.yaml: ")
    assert "backends[2].region: unknown region 'moon'" in message


def test_missing_round_trip_and_wrong_type_are_named() -> None:
    assert "rtt_ms: no round trip between" in _error(tiny(rtt_ms={}))
    raw = tiny()
    raw["backends"][0]["engine"] = {"max_num_seqs": "many"}
    message = _error(raw)
    assert "backends[0] (local).engine.max_num_seqs" in message


def test_unknown_keys_and_bad_events_are_rejected() -> None:
    assert "workloads.chat.tenant" in _error(tiny(workloads={"chat": {"tenant": 3}}))
    event = {"kind": "slowdown", "region": "near", "start_s": 5, "end_s": 2, "factor": 2}
    assert "events[0].end_s: must be after start_s" in _error(tiny(events=[event]))
    burst = {"kind": "bursts", "period_s": 10, "burst_s": 5, "burst_factor": 4}
    users = {"users": {"region": "near", "rate_rps": 1, "arrival": burst}}
    assert "clients.users.arrival" in _error(tiny(clients=users))


def test_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("regions: [a\n")
    result = load_scenario(path)
    assert isinstance(result, ScenarioError) and result.kind == "unreadable"
    assert str(path) in result.message
