"""``loadtests.timing_tail`` on real processes (mock backend, one gateway worker, the lean
client): every answer through the gateway carries the entries it splits the TTFT by, and the
gateway's own part is a part of the TTFT the client measured."""

from __future__ import annotations

from loadtests.bench.overhead_setup import overhead_workload
from loadtests.bench.workload import ChatComponent, parse_workload
from loadtests.timing_tail import (
    OUTSIDE,
    entry_durations,
    measure,
    outside_ms,
    report,
)


async def test_the_slowest_first_tokens_are_split_by_the_gateways_entries() -> None:
    records, direct_ms, run = await measure(concurrency=4, requests=40)
    assert len(records) == 40 and len(direct_ms) == 40
    for record in records:
        assert record.ok, record.error_detail
        entries = entry_durations(record)
        assert {"gw", "route", "upstream_ttfb", "ttft"} <= set(entries), record.server_timing
        assert record.ttft_s is not None
        assert entries["route"] <= entries["gw"] <= record.ttft_s * 1000.0
        # The gateway's clock (its head read -> its first byte) runs inside the client's.
        outside = outside_ms(record)
        assert outside is not None and 0.0 < outside < record.ttft_s * 1000.0
        assert outside == record.ttft_s * 1000.0 - entries["ttft"]
    # The gateway's counters over its run: it worked, and it slept between reads.
    spent = run.spent
    assert spent.cpu_s > 0.0 and spent.voluntary > 0 and run.wall_s > 0.0 and spent.wait_s >= 0.0
    summary = report(records, direct_ms, slowest=3, run=run)
    assert summary["gateway_process"]["busy_share"] == spent.cpu_s / run.wall_s
    assert summary["errors"] == 0
    slowest = [row["ttft_ms"] for row in summary["slowest"]]
    assert len(slowest) == 3 and slowest == sorted(slowest)
    assert slowest[-1] == max(r.ttft_s or 0.0 for r in records) * 1000.0
    assert summary["entries_ms"]["gw"]["p50"] <= summary["entries_ms"]["gw"]["max"]
    assert summary["entries_ms"][OUTSIDE]["max"] == max(filter(None, map(outside_ms, records)))
    assert all(row["entries_ms"][OUTSIDE] is not None for row in summary["slowest"])


def test_answer_lengths_are_drawn_from_the_range_and_by_default_are_one_length() -> None:
    drawn = parse_workload(overhead_workload(4, 40, (8, 24))).mix[0]
    assert isinstance(drawn, ChatComponent)
    assert (drawn.max_tokens.min, drawn.max_tokens.max) == (8, 24)
    one = parse_workload(overhead_workload(4, 40)).mix[0]
    assert isinstance(one, ChatComponent)
    assert (one.max_tokens.min, one.max_tokens.max) == (16, 16)
