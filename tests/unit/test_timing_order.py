"""Timing entries are placed by name, not by position."""

from __future__ import annotations

from gateway.timing import TimingEntry, insert_after


def _names(entries: list[TimingEntry]) -> list[str]:
    return [entry.name for entry in entries]


def test_insert_after_places_by_name_wherever_that_entry_is() -> None:
    entries = [TimingEntry(n, 1.0) for n in ("gw", "route", "upstream_connect", "upstream_ttfb")]
    entries.insert(0, TimingEntry("hop_in", 1.0))  # another entry first moves every position
    insert_after(entries, "upstream_ttfb", TimingEntry("ttft", 2.0))
    assert _names(entries) == ["hop_in", "gw", "route", "upstream_connect", "upstream_ttfb", "ttft"]


def test_insert_after_a_missing_name_appends() -> None:
    entries = [TimingEntry("gw", 1.0)]
    insert_after(entries, "upstream_ttfb", TimingEntry("ttft", 2.0))
    assert _names(entries) == ["gw", "ttft"]
