"""``python -m loadtests.bench_routing`` on a small fleet: its rows, the host floor among them,
and the JSON it writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadtests import bench_routing


def test_the_table_has_each_case_and_a_host_floor_sized_to_the_decisions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--backends", "5", "--block-tokens", "16", "--policies", "round_robin"]
    assert bench_routing.main([*argv, "--iterations", "300", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "bench_routing.json").read_text())["rows"]
    cases = [(row["case"], row["snapshots"]) for row in rows]
    assert cases == [
        ("hashing only", "-"),
        ("round_robin", "same"),
        ("round_robin", "churn"),
        ("host floor (fixed work)", "-"),
    ]
    for row in rows:
        assert 0 < row["cpu_p50_us"] <= row["cpu_p99_us"]
    floor, decisions = rows[-1], rows[1:3]
    # Sized to the decisions' CPU p50 (their median): same order of magnitude, not equal.
    target = sorted(row["cpu_p50_us"] for row in decisions)[0]
    assert target / 10 < floor["cpu_p50_us"] < target * 10
    assert "host floor (fixed work)" in capsys.readouterr().out
