"""bench_event_cpu's split of CPU per request at two stream lengths into per event and per request."""

from __future__ import annotations

import pytest

from loadtests.bench_event_cpu import EventCpu, format_table, split


def test_the_slope_is_per_event_and_the_intercept_per_request() -> None:
    # 3,000 us a request plus 150 us an event, at 8 and at 64 events
    assert split(8, 64, 3000 + 8 * 150, 3000 + 64 * 150) == pytest.approx((150.0, 3000.0))


def test_the_table_gives_each_side_its_ratio_to_nginx_and_to_the_first_src() -> None:
    rows = [
        EventCpu("meridian", 1, 4200, 12600, 150.0, 3000, 5.0, 3.5),
        EventCpu("meridian@base", 1, 4600, 15800, 200.0, 3000, 5.0, 8.5),
        EventCpu("nginx", 1, 400, 3200, 50.0, 0, 0.0, 0.0),
    ]
    lines = format_table(rows, 8, 64).splitlines()
    assert [line.split()[7] for line in lines[2:5]] == ["3.5", "8.5", "0.0"]  # idle wake-ups/s
    assert lines[2].split()[-2:] == ["3.00x", "0.75x"]
    assert lines[3].split()[-2:] == ["4.00x", "1.00x"]
    assert lines[4].split()[-2:] == ["1.00x", "0.25x"]
