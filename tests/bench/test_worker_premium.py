"""The premium benchmark's sides and its report, on made-up counters."""

from __future__ import annotations

from loadtests.bench_worker_premium import SideResult, format_table, sides
from loadtests.proc_counters import MAIN, Counters


def _side(name: str, rate: float, requests: int, by_process: dict[str, Counters]) -> SideResult:
    return SideResult(name, rate, requests, 0, rate, 20.0, 30.0, by_process)


def test_two_workers_get_twice_one_workers_rate() -> None:
    specs = {s.name: s for s in sides(50.0, {"before": "/tmp/b"})}
    assert (specs["x1 @R"].workers, specs["x1 @R"].rate) == (1, 50.0)
    assert (specs["x2 @2R"].workers, specs["x2 @2R"].rate) == (2, 100.0)
    assert (specs["before x2 @2R"].src, specs["before x2 @2R"].workers) == ("/tmp/b", 2)
    assert specs["direct"].workers == 0


def test_the_premium_is_per_request_and_against_one_worker_at_r() -> None:
    one = Counters(cpu_s=0.2, wait_s=0.01, voluntary=1000, involuntary=0, reads=1600, writes=1600)
    results = [
        _side("direct", 200, 200, {}),
        _side("x1 @R", 100, 100, {MAIN: one}),
        _side("x2 @2R", 200, 200, {MAIN: Counters(), "worker 0": one, "worker 1": one.plus(one)}),
    ]
    assert abs(results[2].total().cpu_s - 0.6) < 1e-9
    table = format_table(results)
    assert "x2 @2R / x1 @R: cpu 1.500x" in table  # 3,000 us/request against 2,000
    assert "reads 1.500x" in table
    assert "  worker 1" in table and "  main" not in table  # an idle supervisor is left out
