"""``bench_peers``' table from known runs: added TTFT pooled over the rounds, and each round's
added p99 against direct's in the same round."""

from __future__ import annotations

from loadtests.bench.records import BenchResult, RequestRecord
from loadtests.bench_peers import _level, format_table


def _run(ttfts_ms: list[float]) -> BenchResult:
    records = tuple(
        RequestRecord(
            index=i,
            session=i,
            turn=0,
            component="chat",
            origin="local",
            tenant="t",
            scheduled_s=float(i),
            sent_s=float(i),
            ttft_s=ttft / 1000.0,
            e2e_s=ttft / 1000.0 + 0.01,
            token_times_s=(ttft / 1000.0, ttft / 1000.0 + 0.005, ttft / 1000.0 + 0.01),
            completion_tokens=3,
        )
        for i, ttft in enumerate(ttfts_ms)
    )
    return BenchResult("http://x", "w", "closed", 0, 0.0, duration_s=1.0, records=records)


def test_each_round_is_read_against_direct_in_the_same_round() -> None:
    flat = [20.0] * 99
    direct = [_run([*flat, 21.0]), _run([*flat, 40.0])]  # round 2's direct had a slow one
    relay = [_run([*flat, 25.0]), _run([*flat, 41.0])]
    rows = _level(1, {"direct": direct, "relay": relay}, {"direct": 0.0, "relay": 0.6})
    by_peer = {row.peer: row for row in rows}
    relay_row = by_peer["relay"]
    assert relay_row.added_ttft_p50_ms == 0.0
    low, high = sorted(v for v in relay_row.added_ttft_p99_by_round_ms if v is not None)
    assert 0.0 < low < high  # round 2 adds less than round 1 against its own direct
    assert by_peer["direct"].added_ttft_p99_by_round_ms == (0.0, 0.0)
    assert relay_row.cpu_us_per_event == 0.6 / 600 * 1e6  # 200 requests x 3 token events
    table = format_table(rows)
    assert f"{low:.1f}..{high:.1f}" in table.splitlines()[3]
    assert "p99 by round" in table.splitlines()[0]
