"""OpenTelemetry spans, captured with the SDK's in-memory exporter, across a chain of two real
gateways: the caller's traceparent continued, the next hop a child of this one, the GenAI
attributes, a span per attempt, traceresponse; and no span at all with tracing off."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode, format_span_id, format_trace_id

from gateway.app import RunningGateway
from gateway.state_keys import RELAY
from loadtests.emulator.config import FaultConfig
from tests.gateway.support import MODEL, config_for
from tests.observability.support import until

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"


def _traced(running: RunningGateway) -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    running.app[RELAY].observer.tracing.use_exporter(exporter)
    return exporter


def _by_name(spans: tuple[ReadableSpan, ...]) -> dict[str, ReadableSpan]:
    return {span.name: span for span in spans}


def _parent_id(span: ReadableSpan) -> str | None:
    return format_span_id(span.parent.span_id) if span.parent is not None else None


def _span_id(span: ReadableSpan) -> str:
    assert span.context is not None
    return format_span_id(span.context.span_id)


def _times(span: ReadableSpan) -> tuple[int, int]:
    assert span.start_time is not None and span.end_time is not None
    return span.start_time, span.end_time


async def _stream(url: str, headers: dict[str, str]) -> tuple[int, dict[str, str]]:
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "max_tokens": 4,
        "stream_options": {"include_usage": True},
    }
    async with aiohttp.ClientSession() as session:
        async with session.post(url + "/v1/chat/completions", json=body, headers=headers) as r:
            await r.read()
            return r.status, dict(r.headers)


async def test_a_two_gateway_chain_is_one_trace_with_the_next_hop_a_child(
    emulator, gateway
) -> None:
    backend = await emulator("b1")
    regions = [{"name": "us", "rtt_ms": 1.0}, {"name": "eu", "rtt_ms": 20.0}]
    eu = await gateway(
        config_for(
            {},
            region="eu",
            regions=regions,
            chain={"id": "eu-gw"},
            backends=[
                {"name": "eu-1", "region": "eu", "url": backend.url + "/v1", "models": [MODEL]}
            ],
        )
    )
    us = await gateway(
        config_for(
            {},
            region="us",
            regions=regions,
            chain={"id": "us-gw"},
            backends=[
                {
                    "name": "to-eu",
                    "region": "eu",
                    "kind": "gateway",
                    "engine": "meridian",
                    "url": eu.url + "/v1",
                    "models": [MODEL],
                }
            ],
        )
    )
    us_spans, eu_spans = _traced(us), _traced(eu)
    status, headers = await _stream(us.url, {"traceparent": TRACEPARENT})
    assert status == 200
    await until(lambda: len(us_spans.get_finished_spans()) >= 4)
    await until(lambda: len(eu_spans.get_finished_spans()) >= 4)

    us_tree, eu_tree = (
        _by_name(us_spans.get_finished_spans()),
        _by_name(eu_spans.get_finished_spans()),
    )
    assert set(us_tree) == {f"chat {MODEL}", "route", "upstream to-eu", "stream"}
    assert set(eu_tree) == {f"chat {MODEL}", "route", "upstream eu-1", "stream"}
    us_server, eu_server = us_tree[f"chat {MODEL}"], eu_tree[f"chat {MODEL}"]
    # One trace: the client's.
    for span in (*us_tree.values(), *eu_tree.values()):
        assert span.context is not None
        assert format_trace_id(span.context.trace_id) == CLIENT_TRACE
    # The caller's span is the first hop's parent; the second hop is the first hop's child.
    assert us_server.kind is SpanKind.SERVER and _parent_id(us_server) == CLIENT_SPAN
    assert us_server.parent is not None and us_server.parent.is_remote
    assert _parent_id(eu_server) == _span_id(us_server)
    for tree, server in ((us_tree, us_server), (eu_tree, eu_server)):
        for name in tree:
            if tree[name] is not server:
                assert _parent_id(tree[name]) == _span_id(server), name
    # The response names this hop's span (W3C traceresponse).
    assert headers["traceresponse"] == f"00-{CLIENT_TRACE}-{_span_id(us_server)}-01"
    # GenAI semantic conventions, and Meridian's own.
    attrs: dict[str, Any] = dict(eu_server.attributes or {})
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.request.model"] == MODEL
    assert attrs["gen_ai.request.max_tokens"] == 4
    assert attrs["gen_ai.usage.output_tokens"] == 4
    assert attrs["gen_ai.usage.input_tokens"] > 0
    assert 0 < attrs["gen_ai.server.time_to_first_token"] < 10
    assert attrs["meridian.route.backend"] == "eu-1" and attrs["meridian.route.region"] == "eu"
    assert attrs["meridian.predicted_ttft_ms"] > 0
    assert any(key.startswith("meridian.predicted_ttft.") for key in attrs)
    assert attrs["meridian.hop"] == 2
    assert eu_server.resource.attributes["service.instance.id"] == "eu-gw"
    assert attrs["http.response.status_code"] == 200 and attrs["meridian.outcome"] == "ok"
    attempt = eu_tree["upstream eu-1"]
    assert attempt.kind is SpanKind.CLIENT
    assert [event.name for event in attempt.events] == ["connected", "first_token"]
    assert dict(us_tree["stream"].attributes or {})["gen_ai.usage.output_tokens"] == 4
    # Timestamps nest: the server span covers its children.
    for tree, server in ((us_tree, us_server), (eu_tree, eu_server)):
        outer = _times(server)
        for span in tree.values():
            start, end = _times(span)
            assert outer[0] <= start <= end <= outer[1], span.name


async def test_a_retry_is_two_attempt_spans_and_a_failure_an_error_span(emulator, gateway) -> None:
    failing = await emulator("b1", faults=FaultConfig(error_rate=1.0))
    healthy = await emulator("b2")
    running = await gateway(
        config_for({"b1": failing.url, "b2": healthy.url}, routing={"policy": "round_robin"})
    )
    spans = _traced(running)
    status, headers = await _stream(running.url, {})
    assert status == 200
    await until(lambda: len(spans.get_finished_spans()) >= 5)
    tree = _by_name(spans.get_finished_spans())
    first, second = tree["upstream b1"], tree["upstream b2"]
    assert first.status.status_code is StatusCode.ERROR
    assert dict(first.attributes or {})["error.type"] == "500"
    assert second.status.status_code is StatusCode.UNSET
    assert _times(first)[1] <= _times(second)[0]  # the retry followed the failure
    server = tree[f"chat {MODEL}"]
    assert dict(server.attributes or {})["meridian.attempts"] == 2
    # A new trace (no traceparent came in): this gateway is its root, sampled.
    assert server.parent is None
    assert headers["traceresponse"].endswith(f"-{_span_id(server)}-01")

    spans.clear()
    failing.set_faults(FaultConfig(error_rate=1.0))
    healthy.set_faults(FaultConfig(error_rate=1.0))
    status, _ = await _stream(running.url, {"traceparent": TRACEPARENT})
    assert status == 502
    await until(lambda: any(s.kind is SpanKind.SERVER for s in spans.get_finished_spans()))
    server = _by_name(spans.get_finished_spans())[f"chat {MODEL}"]
    assert server.status.status_code is StatusCode.ERROR
    assert dict(server.attributes or {})["error.type"] == "upstream_error"
    assert dict(server.attributes or {})["http.response.status_code"] == 502


async def test_tracing_off_builds_no_span_but_still_continues_the_trace(emulator, gateway) -> None:
    backend = await emulator("b1")
    running = await gateway(config_for({"b1": backend.url}))
    tracing = running.app[RELAY].observer.tracing
    assert not tracing.enabled and tracing.processor is None
    status, headers = await _stream(running.url, {"traceparent": TRACEPARENT})
    assert status == 200
    trace_id, span_id, flags = headers["traceresponse"].split("-")[1:]
    assert (trace_id, flags) == (CLIENT_TRACE, "01") and span_id != CLIENT_SPAN


def test_otlp_without_the_extra_is_a_clear_error() -> None:
    from gateway.observability.config import TracingConfig
    from gateway.observability.tracing import Tracing, TracingUnavailable

    try:
        import opentelemetry.exporter.otlp.proto.http  # noqa: F401  (the 'otlp' extra)
    except ImportError:
        with pytest.raises(TracingUnavailable, match=r"pip install 'meridian-gateway\[otlp\]'"):
            Tracing(TracingConfig(exporter="otlp"))
        return
    tracing = Tracing(TracingConfig(exporter="otlp", endpoint="http://127.0.0.1:9/v1/traces"))
    assert tracing.enabled
    tracing.shutdown()
