"""Outlier ejection: properties over random traffic with a fake clock, plus worked examples."""

from __future__ import annotations

import itertools
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.signals.outlier import (
    FailureKind,
    OutlierConfig,
    OutlierDetector,
    OutlierEventKind,
)
from tests.signals.support import FakeClock


def detector(n: int, clock: FakeClock, **overrides: object) -> OutlierDetector:
    config = OutlierConfig.model_validate({"panic_threshold": 0.0, **overrides})
    return OutlierDetector([f"b{i}" for i in range(n)], config, clock)


def fail(det: OutlierDetector, backend: str, times: int) -> list[OutlierEventKind]:
    kinds = []
    for _ in range(times):
        kinds += [e.kind for e in det.record(backend, ok=False, failure=FailureKind.SERVER_ERROR)]
    return kinds


operation = st.one_of(
    st.tuples(st.just("ok"), st.integers(0, 9)),
    st.tuples(st.just("fail"), st.integers(0, 9)),
    st.tuples(st.just("advance"), st.floats(0.0, 120.0)),
    st.tuples(st.just("tick"), st.just(0)),
)


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(1, 10),
    percent=st.floats(0.0, 100.0),
    consecutive=st.integers(1, 4),
    ops=st.lists(operation, max_size=150),
)
def test_never_ejects_beyond_the_cap(n, percent, consecutive, ops):
    clock = FakeClock()
    det = detector(
        n,
        clock,
        max_ejection_percent=percent,
        consecutive_failures=consecutive,
        failure_rate_min_requests=3,
        interval_s=5.0,
    )
    cap = max(1, math.floor(n * percent / 100))
    for kind, arg in ops:
        if kind == "ok":
            det.record(f"b{arg % n}", ok=True)
        elif kind == "fail":
            det.record(f"b{arg % n}", ok=False, failure=FailureKind.CONNECT_ERROR)
        elif kind == "advance":
            clock.advance(float(arg))
        else:
            det.tick()
        assert len(det.health().ejected_until) <= cap


@settings(max_examples=100, deadline=None)
@given(
    base=st.floats(0.5, 60.0),
    max_factor=st.floats(1.0, 10.0),
    repeats=st.integers(1, 8),
    consecutive=st.integers(1, 6),
)
def test_ejection_time_grows_with_repeats_up_to_the_cap(base, max_factor, repeats, consecutive):
    clock = FakeClock()
    max_s = base * max_factor
    det = detector(
        1,
        clock,
        base_ejection_s=base,
        max_ejection_s=max_s,
        consecutive_failures=consecutive,
        failure_rate_min_requests=10_000,  # isolate the consecutive-failure detector
    )
    durations = []
    for k in range(1, repeats + 1):
        assert fail(det, "b0", consecutive - 1) == []
        events = det.record("b0", ok=False)
        assert [e.kind for e in events] == [OutlierEventKind.EJECTED]
        until = det.ejected_until("b0")
        assert until is not None
        durations.append(until - clock.now)
        assert math.isclose(durations[-1], min(base * k, max_s))
        clock.now = until  # readmitted exactly on schedule, then fails again at once
        assert det.ejected_until("b0") is None
        assert [e.kind for e in det.tick()] == [OutlierEventKind.READMITTED]
    assert all(later >= earlier - 1e-9 for earlier, later in itertools.pairwise(durations))


@settings(max_examples=100, deadline=None)
@given(base=st.floats(0.5, 100.0), before=st.floats(0.0, 0.999))
def test_readmits_on_schedule_not_before(base, before):
    clock = FakeClock()
    det = detector(4, clock, base_ejection_s=base, consecutive_failures=1, max_ejection_percent=50)
    det.record("b1", ok=False)
    until = det.ejected_until("b1")
    assert until is not None and not det.is_healthy("b1")
    clock.advance(base * before)
    assert not det.is_healthy("b1")
    assert det.tick() == []
    clock.now = until
    assert det.is_healthy("b1")
    assert [(e.kind, e.backend) for e in det.tick()] == [(OutlierEventKind.READMITTED, "b1")]


def test_successes_and_client_errors_reset_the_consecutive_count():
    clock = FakeClock()
    det = detector(2, clock, consecutive_failures=3, max_ejection_percent=50)
    assert fail(det, "b0", 2) == []
    det.record("b0", ok=True)
    assert fail(det, "b0", 2) == []
    det.record("b0", ok=False, failure=FailureKind.CLIENT_ERROR)  # the backend answered
    assert fail(det, "b0", 2) == []
    det.record("b0", ok=False, failure=FailureKind.CANCELLED)  # no evidence either way
    assert fail(det, "b0", 1) == [OutlierEventKind.EJECTED]


def test_failure_rate_ejects_at_the_end_of_the_interval():
    clock = FakeClock()
    det = detector(
        4,
        clock,
        consecutive_failures=100,
        failure_rate_threshold=0.5,
        failure_rate_min_requests=10,
        interval_s=10.0,
        max_ejection_percent=50,
    )
    for i in range(20):  # 60 % failures on b0, 10 % on b1, alternating so never consecutive
        det.record("b0", ok=i % 5 in (1, 3))
        det.record("b1", ok=i % 10 != 0)
    assert det.tick() == []  # the window is not over yet
    clock.advance(10.0)
    events = det.tick()
    assert [(e.kind, e.backend) for e in events] == [(OutlierEventKind.EJECTED, "b0")]
    assert "failure rate 60%" in events[0].reason


def test_failure_rate_needs_enough_requests():
    clock = FakeClock()
    det = detector(2, clock, consecutive_failures=100, failure_rate_min_requests=10)
    for _ in range(9):
        det.record("b0", ok=False)
    clock.advance(10.0)
    assert det.tick() == []


def test_multiplier_decays_after_a_healthy_interval():
    clock = FakeClock()
    det = detector(1, clock, consecutive_failures=1, base_ejection_s=10.0, interval_s=10.0)
    det.record("b0", ok=False)
    clock.advance(10.0)
    det.tick()  # readmitted
    assert det.ejection_count("b0") == 1
    clock.advance(10.0)
    det.tick()  # one full healthy interval
    assert det.ejection_count("b0") == 0
    det.record("b0", ok=False)
    until = det.ejected_until("b0")
    assert until is not None and math.isclose(until - clock.now, 10.0)


def test_panic_routes_to_everyone_when_too_few_are_healthy():
    clock = FakeClock()
    det = detector(4, clock, consecutive_failures=1, max_ejection_percent=100, panic_threshold=0.5)
    assert [e.kind for e in det.record("b0", ok=False)] == [OutlierEventKind.EJECTED]
    assert not det.health().panic
    events = [e.kind for e in det.record("b1", ok=False)]
    assert events == [OutlierEventKind.EJECTED]  # 2/4 usable is not below one half
    events = [e.kind for e in det.set_active_health("b2", False)]
    assert events == [OutlierEventKind.PANIC_ENTERED]  # 1/4 usable
    view = det.health()
    assert view.panic and view.healthy == {"b0", "b1", "b2", "b3"}
    assert view.usable == {"b3"} and set(view.ejected_until) == {"b0", "b1"}
    assert [e.kind for e in det.set_active_health("b2", True)] == [OutlierEventKind.PANIC_EXITED]
    assert det.health().healthy == {"b2", "b3"}


def test_cap_reached_is_an_event_not_an_ejection():
    clock = FakeClock()
    det = detector(10, clock, consecutive_failures=1, max_ejection_percent=10)
    assert fail(det, "b0", 1) == [OutlierEventKind.EJECTED]
    assert fail(det, "b1", 1) == [OutlierEventKind.EJECTION_SKIPPED]
    assert det.is_healthy("b1")


def test_unknown_backends_and_disabled_detection_are_ignored():
    clock = FakeClock()
    assert detector(1, clock).record("nope", ok=False) == []
    off = detector(1, clock, enabled=False, consecutive_failures=1)
    assert fail(off, "b0", 5) == []
