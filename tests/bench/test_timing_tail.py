"""``loadtests.timing_tail`` on real processes (mock backend, one gateway worker, the lean
client): every answer through the gateway carries the entries it splits the TTFT by, and the
gateway's own part is a part of the TTFT the client measured."""

from __future__ import annotations

from loadtests.timing_tail import entry_durations, measure, report


async def test_the_slowest_first_tokens_are_split_by_the_gateways_entries() -> None:
    records, direct_ms = await measure(concurrency=4, requests=40)
    assert len(records) == 40 and len(direct_ms) == 40
    for record in records:
        assert record.ok, record.error_detail
        entries = entry_durations(record)
        assert {"gw", "route", "upstream_ttfb", "ttft"} <= set(entries), record.server_timing
        assert record.ttft_s is not None
        assert entries["route"] <= entries["gw"] <= record.ttft_s * 1000.0
    summary = report(records, direct_ms, slowest=3)
    assert summary["errors"] == 0
    slowest = [row["ttft_ms"] for row in summary["slowest"]]
    assert len(slowest) == 3 and slowest == sorted(slowest)
    assert slowest[-1] == max(r.ttft_s or 0.0 for r in records) * 1000.0
    assert summary["entries_ms"]["gw"]["p50"] <= summary["entries_ms"]["gw"]["max"]
