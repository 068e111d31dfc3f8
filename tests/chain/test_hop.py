"""Entering a gateway: via list, hop limit, exclusions and the headers sent on."""

from __future__ import annotations

from gateway.chain.hop import ChainError, ChainErrorKind, HopContext, enter_hop
from gateway.inbound import Endpoint, parse_inbound

IDS = {"to-eu": "eu-gw", "to-ap": "ap-gw", "local-b1": "nobody"}


def _enter(headers: dict[str, str], max_hops: int = 3) -> HopContext | ChainError:
    return enter_hop("us-gw", max_hops, headers, IDS)


def test_first_hop_starts_the_via_list_and_a_trace() -> None:
    hop = _enter({"X-Request-Id": "r1"})
    assert isinstance(hop, HopContext)
    assert hop.via == () and hop.hop_number == 1 and hop.exclude == frozenset()
    out = hop.forward_headers({"X-Request-Id": "r1"})
    assert out["X-Meridian-Via"] == "us-gw" and out["X-Meridian-Hops"] == "1"
    assert out["X-Request-Id"] == "r1"
    assert out["traceparent"] == hop.trace.traceparent() and hop.trace.parent_id is None


def test_next_hop_appends_itself_and_excludes_backends_back_along_the_path() -> None:
    incoming = {
        "x-meridian-via": "eu-gw, ap-gw",
        "X-MERIDIAN-HOPS": "2",
        "Traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    }
    hop = _enter(incoming, max_hops=3)
    assert isinstance(hop, HopContext)
    assert hop.exclude == frozenset({"to-eu", "to-ap"})
    out = hop.forward_headers(incoming)
    lowered = [k.lower() for k in out]
    assert len(lowered) == len(set(lowered)), "incoming hop headers must be replaced, not kept"
    assert out["X-Meridian-Via"] == "eu-gw, ap-gw, us-gw" and out["X-Meridian-Hops"] == "3"
    assert out["traceparent"].split("-")[1] == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert hop.trace.parent_id == "00f067aa0ba902b7"


def test_a_gateway_refuses_a_request_that_already_passed_through_it() -> None:
    error = _enter({"X-Meridian-Via": "us-gw, eu-gw"})
    assert isinstance(error, ChainError) and error.kind is ChainErrorKind.LOOP
    api = error.api_error()
    assert api.status == 508 and api.code == "loop_detected"
    assert "us-gw -> eu-gw -> us-gw" in api.message


def test_max_hops_counts_this_gateway_and_trusts_the_larger_count() -> None:
    assert isinstance(_enter({"X-Meridian-Via": "a, b"}, max_hops=3), HopContext)
    error = _enter({"X-Meridian-Via": "a, b, c"}, max_hops=3)
    assert isinstance(error, ChainError) and error.kind is ChainErrorKind.TOO_MANY_HOPS
    # A proxy that dropped the via list cannot hide the count.
    assert isinstance(_enter({"X-Meridian-Hops": "3"}, max_hops=3), ChainError)
    assert isinstance(_enter({"X-Meridian-Hops": "junk"}, max_hops=1), HopContext)


def test_a_backend_leading_to_this_gateway_itself_is_excluded() -> None:
    hop = enter_hop("eu-gw", 3, {}, IDS)
    assert isinstance(hop, HopContext) and hop.exclude == frozenset({"to-eu"})


def test_apply_adds_the_exclusions_to_the_routing_profile() -> None:
    inbound = parse_inbound(
        Endpoint.CHAT,
        b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}',
        request_id="r",
        tenant="default",
        origin=None,
        known_models=frozenset({"m"}),
        received_at=0.0,
    )
    hop = _enter({"X-Meridian-Via": "eu-gw"})
    assert isinstance(hop, HopContext)
    assert hop.apply(inbound).profile.exclude == frozenset({"to-eu"})
    assert hop.apply(inbound).body == inbound.body
