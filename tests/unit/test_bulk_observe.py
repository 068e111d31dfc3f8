"""observe_all leaves a histogram exactly as observing each value would (gateway/observability)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram

from gateway.observability.bulk_observe import observe_all

_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 1.0)
_VALUES = st.lists(
    st.one_of(
        st.floats(min_value=0.0, max_value=5.0, allow_nan=False),
        st.sampled_from(_BUCKETS),  # on a bound: observe() counts it in that bucket
    ),
    max_size=40,
)


def _samples(histogram: Histogram) -> dict[tuple[str, str], float]:
    return {
        (sample.name, sample.labels.get("le", "")): sample.value
        for metric in histogram.collect()
        for sample in metric.samples
        if not sample.name.endswith("_created")
    }


@given(_VALUES)
def test_observe_all_equals_observe_value_by_value(values: list[float]) -> None:
    one, bulk = (
        Histogram("itl", "gaps", ["backend"], buckets=_BUCKETS, registry=CollectorRegistry())
        for _ in range(2)
    )
    child = one.labels("b1")
    for value in values:
        child.observe(value)
    observe_all(bulk.labels("b1"), values)
    expected, got = _samples(one), _samples(bulk)
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert abs(got[key] - value) <= 1e-9 * max(1.0, abs(value)), key
