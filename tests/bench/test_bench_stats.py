"""Statistics against inputs whose answers are known by hand."""

import math
from collections.abc import Sequence

import pytest

from loadtests.bench.records import BenchResult, ErrorKind, RequestRecord, backend_from_route
from loadtests.bench.report import NO_ROUTE, summarize
from loadtests.bench.stats import Distribution, Slo, inter_token_gaps, percentile


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([1, 2, 3, 4], 50, 2.5),  # even count: mean of the two middle values
        ([3, 1, 2], 50, 2.0),  # order of input does not matter
        (list(range(1, 11)), 90, 9.1),  # h = 9 * 0.9 = 8.1 -> 9 + 0.1 * (10 - 9)
        (list(range(1, 101)), 99, 99.01),  # h = 99 * 0.99 = 98.01
        ([5, 7], 0, 5.0),
        ([5, 7], 100, 7.0),
        ([42], 99, 42.0),
        ([10, 20, 30, 40, 50], 25, 20.0),
    ],
)
def test_percentile_is_linear_interpolation_between_ranks(values, q, expected):
    assert percentile(values, q) == pytest.approx(expected)


def test_percentile_of_nothing_is_none_and_q_is_checked():
    assert percentile([], 50) is None
    with pytest.raises(ValueError, match="within"):
        percentile([1.0], 101)


def test_distribution_summary_and_unit_scaling():
    dist = Distribution.of([0.010, 0.020, 0.030, 0.040]).scaled(1000)
    assert dist.count == 4
    assert dist.mean == pytest.approx(25.0)
    assert dist.p50 == pytest.approx(25.0)
    assert dist.p90 == pytest.approx(37.0)  # h = 3 * 0.9 = 2.7 -> 30 + 0.7 * 10
    assert dist.p99 == pytest.approx(39.7)
    assert dist.max == pytest.approx(40.0)
    assert Distribution.of([]) == Distribution(0, None, None, None, None, None)


def test_inter_token_gaps_from_fixed_timestamps():
    assert inter_token_gaps([0.100, 0.150, 0.250, 0.255]) == pytest.approx((0.05, 0.10, 0.005))
    assert inter_token_gaps([0.3]) == ()
    assert inter_token_gaps([]) == ()


def test_slo_needs_a_first_token_and_bounds_ttft_and_own_itl_p99():
    slo = Slo(ttft_ms=200, itl_p99_ms=50)
    assert slo.is_met(0.150, [0.020] * 99 + [0.040])
    assert not slo.is_met(0.250, [0.020])  # TTFT over
    assert not slo.is_met(0.150, [0.020] * 10 + [0.500] * 2)  # ITL p99 over
    assert slo.is_met(0.150, [])  # one token: no gaps to judge
    assert not slo.is_met(None, [])
    assert Slo().is_met(99.0, [5.0])  # no bounds: any success counts


def _record(
    index: int,
    ttft: float | None,
    gaps: Sequence[float] = (),
    error: ErrorKind | None = None,
    status: int = 200,
    route: str | None = None,
    origin: str = "us",
) -> RequestRecord:
    times = [ttft] if ttft is not None else []
    for gap in gaps:
        times.append(times[-1] + gap)
    return RequestRecord(
        index=index,
        session=index,
        turn=0,
        component="chat",
        origin=origin,
        tenant="t",
        scheduled_s=float(index),
        sent_s=float(index) + 0.001,
        ttft_s=ttft,
        e2e_s=(times[-1] if times else 0.5),
        token_times_s=tuple(times),
        prompt_tokens=100,
        completion_tokens=len(times),
        status=status,
        error=error,
        route=route,
    )


def test_summary_throughput_goodput_errors_and_breakdowns():
    records = (
        _record(0, 0.100, [0.02] * 9, route="backend=a1; region=us-east", origin="us"),
        _record(1, 0.300, [0.02] * 9, route="backend=a1; region=us-east", origin="us"),
        _record(2, 0.100, [0.02] * 4 + [0.2], route="eu-west/b1", origin="eu"),
        _record(3, 0.120, [0.02] * 9, route="eu-west/b1", origin="eu"),
        _record(4, None, error=ErrorKind.HTTP_STATUS, status=429, origin="eu"),
        _record(5, None, error=ErrorKind.STREAM_BROKEN, origin="us"),
    )
    result = BenchResult("http://x", "w", "closed", 0, 0.0, duration_s=2.0, records=records)
    report = summarize(result, Slo(ttft_ms=200, itl_p99_ms=100))
    assert (report.requests, report.ok) == (6, 4)
    assert report.errors == {"http_429": 1, "stream_broken": 1}
    assert report.request_per_s == pytest.approx(2.0)  # 4 successes in 2 s
    assert report.output_tokens_per_s == pytest.approx((10 + 10 + 6 + 10) / 2.0)
    assert report.goodput.good == 2  # #1 misses TTFT, #2 misses ITL p99, #4 #5 failed
    assert report.goodput.fraction == pytest.approx(2 / 6)
    assert report.goodput.per_s == pytest.approx(1.0)
    assert report.ttft_ms.count == 4 and report.ttft_ms.max == pytest.approx(300.0)
    assert report.itl_ms.count == 9 + 9 + 5 + 9
    assert report.itl_ms.max == pytest.approx(200.0)
    assert report.tpot_ms.p50 == pytest.approx(20.0)
    assert set(report.by_backend) == {"a1", "b1", NO_ROUTE}
    assert report.by_backend["a1"].requests == 2
    assert report.by_origin["eu"].errors == 1
    assert report.by_origin["us"].goodput_fraction == pytest.approx(1 / 3)
    assert math.isclose(report.send_lag_ms.max or 0, 1.0)


def test_backend_is_parsed_from_several_route_header_shapes():
    assert backend_from_route("backend=a1; region=us-east") == "a1"
    assert backend_from_route('region=us-east,b="c2"') == "c2"
    assert backend_from_route("us-east/a2") == "a2"
    assert backend_from_route("gw-eu > b1") == "b1"
    assert backend_from_route("a3") == "a3"
    assert backend_from_route("region=us-east") is None
    assert backend_from_route(None) is None


def test_accuracy_limit_is_the_last_level_before_the_first_miss():
    from loadtests.bench.accuracy import LevelResult, accurate_limit

    def level(concurrency: int, ok: bool) -> LevelResult:
        unmeasured = dict.fromkeys(
            [
                "ttft_p50_ms",
                "ttft_p99_ms",
                "ttft_mean_ms",
                "server_ttft_mean_ms",
                "itl_p50_ms",
                "itl_p99_ms",
                "itl_mean_ms",
                "server_itl_mean_ms",
                "ttft_mean_err_pct",
                "itl_p50_err_pct",
                "itl_p99_err_pct",
                "loop_lag_p99_ms",
            ]
        )
        return LevelResult(
            server="pacer",
            concurrency=concurrency,
            requests=1,
            errors=0,
            duration_s=1.0,
            bench_cpu_pct=0.0,
            server_cpu_pct=0.0,
            other_cpu_pct=0.0,
            typical_ok=ok,
            tail_ok=ok,
            **unmeasured,
        )

    levels = [level(1, True), level(100, True), level(300, False), level(1000, True)]
    assert accurate_limit(levels, "typical_ok") == 100
    assert accurate_limit(levels[2:], "tail_ok") is None
