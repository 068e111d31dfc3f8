"""The gRPC overhead benchmark's ratios (loadtests/bench/grpc_overhead_table.py)."""

from __future__ import annotations

import pytest

from loadtests.bench.grpc_overhead_table import Side, door_ratios, format_table


def _side(p50: float, p99: float, cpu: float | None, rounds: tuple[float, ...]) -> Side:
    return Side(100, 0, p50, p99, gateway_cpu_us=cpu, round_ttft_p50_ms=rounds)


LEVEL = {
    "direct_http": _side(30.0, 40.0, None, (30.0, 31.0)),
    "direct_grpc": _side(32.0, 43.0, 1500.0, (32.0, 33.0)),
    "gateway_http": _side(35.0, 50.0, 2000.0, (35.0, 33.0)),
    "gateway_grpc": _side(40.0, 60.0, 3000.0, (36.0, 35.0)),
}


def test_grpc_over_http_in_added_ttft_cpu_and_by_round() -> None:
    ratios, by_round = door_ratios(LEVEL)
    assert set(ratios) == {"gateway"}  # the bare door is a baseline, not a gateway
    gateway = ratios["gateway"]
    assert gateway["added_ttft_p50"] == pytest.approx(10.0 / 5.0)
    assert gateway["added_ttft_p99"] == pytest.approx(20.0 / 10.0)
    assert gateway["added_ttft_p50_same_protocol"] == pytest.approx(8.0 / 5.0)
    assert gateway["gateway_cpu"] == pytest.approx(1.5)
    # Round 1: (36 - 30) / (35 - 30); round 2: (35 - 31) / (33 - 31).
    assert by_round["gateway"] == [pytest.approx(1.2), pytest.approx(2.0)]
    assert gateway["added_ttft_p50_round_median"] == pytest.approx(1.6)


def test_a_round_with_no_added_http_ttft_has_no_ratio() -> None:
    level = {**LEVEL, "gateway_http": _side(35.0, 50.0, 2000.0, (30.0, 33.0))}
    ratios, by_round = door_ratios(level)
    assert by_round["gateway"] == [None, pytest.approx(2.0)]
    assert ratios["gateway"]["added_ttft_p50_round_median"] == pytest.approx(2.0)
    table = format_table({16: level})
    assert "gateway grpc/http" in table and "by round: -, 2.00 (median 2.00x)" in table


def test_the_h2_gateway_is_compared_with_the_h2_bare_door() -> None:
    level = {
        **LEVEL,
        "direct_grpc_h2": _side(31.0, 41.0, 1000.0, (31.0, 32.0)),
        "gateway_h2_http": _side(35.0, 50.0, 2000.0, (35.0, 33.0)),
        "gateway_h2_grpc": _side(37.0, 52.0, 2400.0, (36.0, 34.0)),
    }
    ratios, _ = door_ratios(level)
    assert set(ratios) == {"gateway", "gateway_h2"}  # both bare doors are baselines
    h2 = ratios["gateway_h2"]
    assert h2["added_ttft_p50"] == pytest.approx(7.0 / 5.0)
    assert h2["added_ttft_p50_same_protocol"] == pytest.approx(6.0 / 5.0)  # over direct_grpc_h2
    assert ratios["gateway"]["added_ttft_p50_same_protocol"] == pytest.approx(8.0 / 5.0)
    assert h2["gateway_cpu"] == pytest.approx(1.2)
