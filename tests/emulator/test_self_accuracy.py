"""The emulator's self-accuracy benchmark, on a tiny level against a real emulator process."""

from __future__ import annotations

from loadtests.bench.accuracy import Settings
from loadtests.emulator.self_accuracy import _p99_bound, _samples, measure

METRICS = """\
meridian_emulator_emit_lag_max_seconds_bucket{le="0.001"} 90.0
meridian_emulator_emit_lag_max_seconds_bucket{le="0.002"} 99.0
meridian_emulator_emit_lag_max_seconds_bucket{le="0.005"} 100.0
meridian_emulator_emit_lag_max_seconds_bucket{le="+Inf"} 100.0
meridian_emulator_emit_lag_max_seconds_count 100.0
vllm:num_requests_running{model_name="m"} 0.0
"""


def test_p99_bound_reads_the_histogram() -> None:
    samples = _samples(METRICS)
    assert 'vllm:num_requests_running{model_name="m"}' not in samples
    assert _p99_bound(samples) == 0.002
    assert _p99_bound({}) == float("inf")


async def test_a_light_level_is_measured() -> None:
    settings = Settings(
        itl_ms=10.0, ttft_ms=5.0, output_tokens=8, prompt_tokens=16, rounds=2,
        min_requests=4, tolerance_pct=100.0, ramp_per_s=1000.0,
    )  # fmt: skip
    level = await measure(2, settings)
    assert level.requests == 4
    assert level.events >= 4 * (6 + 1)  # each: at least 6 tokens (8 -25%), then its finish
    # How late a busy machine's events leave is what the benchmark measures, not a test's
    # promise; the verdicts must follow the tolerance (100% of the 10 ms ITL).
    assert level.mean_lag_ms >= 0.0 and level.worst_lag_p99_ms > 0.0
    assert level.typical_ok is (level.mean_lag_ms <= 10.0)
    assert level.tail_ok is (level.worst_lag_p99_ms <= 10.0)
