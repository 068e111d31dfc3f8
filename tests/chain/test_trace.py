"""W3C traceparent: keep the trace, new span per hop, restart on anything unparsable."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.chain.trace import child_span, parse_traceparent

VALID = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
hex_ids = st.text(alphabet="0123456789abcdef", min_size=1, max_size=1)


def test_child_keeps_trace_and_makes_the_caller_its_parent() -> None:
    child = child_span(VALID, "vendor=x")
    assert child.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert child.parent_id == "00f067aa0ba902b7"
    assert child.span_id != child.parent_id and len(child.span_id) == 16
    assert child.flags == "01" and child.tracestate == "vendor=x"
    assert child.traceparent() == f"00-{child.trace_id}-{child.span_id}-01"
    assert parse_traceparent(child.traceparent()) is not None


def test_absent_or_invalid_starts_a_new_trace_without_tracestate() -> None:
    invalid = [
        None,
        "",
        "garbage",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # zero parent id
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # forbidden version
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  # upper case
        VALID + "-extra",  # version 00 has exactly four fields
    ]
    for value in invalid:
        child = child_span(value, "vendor=x")
        assert child.parent_id is None and child.tracestate is None, value
        assert parse_traceparent(child.traceparent()) is not None
    assert parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x")


@given(st.binary(min_size=16, max_size=16), st.binary(min_size=8, max_size=8), st.booleans())
def test_every_valid_parent_round_trips(trace: bytes, span: bytes, sampled: bool) -> None:
    header = f"00-{trace.hex()}-{span.hex()}-{'01' if sampled else '00'}"
    parent = parse_traceparent(header)
    if not trace.strip(b"\0") or not span.strip(b"\0"):
        assert parent is None
        return
    assert parent is not None and parent.trace_id == trace.hex() and parent.span_id == span.hex()
    hops = [child_span(header)]
    for _ in range(3):
        hops.append(child_span(hops[-1].traceparent()))
    assert {h.trace_id for h in hops} == {trace.hex()}
    assert [h.parent_id for h in hops[1:]] == [h.span_id for h in hops[:-1]]
