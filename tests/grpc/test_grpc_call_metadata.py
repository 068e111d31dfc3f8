"""The keys the gRPC door reads from invocation metadata, in one pass."""

from __future__ import annotations

from gateway.grpc.call_metadata import CallMetadata, read_call_metadata


def test_the_keys_the_door_uses_and_nothing_else() -> None:
    pairs: list[tuple[str, str | bytes]] = [
        ("x-request-id", "r1"),
        ("x-meridian-tenant", "acme"),
        ("authorization", "Bearer k"),
        ("x-forwarded-for", "10.0.0.1"),
        ("traceparent", "00-a-b-01"),
        ("x-forwarded-for", "10.0.0.2"),
        ("trace-bin", b"\x00\x01"),
        ("user-agent", "grpc-python"),
        ("tracestate", "k=v"),
    ]
    assert read_call_metadata(pairs) == CallMetadata(
        request_id="r1",
        tenant="acme",
        authorization="Bearer k",
        forward=(("traceparent", "00-a-b-01"), ("tracestate", "k=v")),
        forwarded_for=("10.0.0.1", "10.0.0.2"),
    )


def test_a_repeated_key_keeps_its_last_value_and_binary_values_are_ignored() -> None:
    pairs: list[tuple[str, str | bytes]] = [
        ("x-request-id", "first"),
        ("traceparent", "00-old-01"),
        ("x-request-id", "second"),
        ("traceparent", "00-new-01"),
        ("x-meridian-tenant", b"binary"),
    ]
    metadata = read_call_metadata(pairs)
    assert metadata.request_id == "second"
    assert metadata.forward == (("traceparent", "00-new-01"),)
    assert metadata.tenant is None
    assert read_call_metadata(None) == CallMetadata()
