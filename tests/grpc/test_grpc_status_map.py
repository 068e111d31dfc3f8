"""HTTP / OpenAI errors become the gRPC status a stock client expects."""

from __future__ import annotations

from dataclasses import dataclass

import grpc
import pytest

from gateway.grpc.convert import (
    decode_status_details,
    failure_for_error,
    failure_for_http,
    failure_for_openai_body,
    retry_delay_s,
)


@pytest.mark.parametrize(
    ("status", "error_code", "expected"),
    [
        (400, None, grpc.StatusCode.INVALID_ARGUMENT),
        (404, "model_not_found", grpc.StatusCode.NOT_FOUND),
        (400, "model_not_found", grpc.StatusCode.NOT_FOUND),
        (429, "rate_limit_exceeded", grpc.StatusCode.RESOURCE_EXHAUSTED),
        (503, "no_backend_available", grpc.StatusCode.UNAVAILABLE),
        (504, None, grpc.StatusCode.DEADLINE_EXCEEDED),
        (401, None, grpc.StatusCode.UNAUTHENTICATED),
        (500, None, grpc.StatusCode.INTERNAL),
        (502, "upstream_error", grpc.StatusCode.INTERNAL),
        (418, None, grpc.StatusCode.INTERNAL),
    ],
)
def test_status_codes(status: int, error_code: str | None, expected: grpc.StatusCode) -> None:
    failure = failure_for_http(status, "boom", error_code)
    assert failure.code is expected
    assert failure.details == "boom"
    details = decode_status_details(failure.trailing_metadata)
    assert details is not None
    assert details.code == expected.value[0]
    assert details.message == "boom"


def test_overload_carries_retry_info_in_both_forms() -> None:
    failure = failure_for_http(429, "slow down", "rate_limit_exceeded", retry_after_s=1.5)
    metadata = dict(failure.trailing_metadata)
    assert metadata["retry-after"] == "2"  # whole seconds, rounded up, like HTTP Retry-After
    details = decode_status_details(failure.trailing_metadata)
    assert retry_delay_s(details) == pytest.approx(1.5)


def test_no_retry_info_where_retrying_cannot_help() -> None:
    failure = failure_for_http(400, "bad", None, retry_after_s=3.0)
    assert "retry-after" not in dict(failure.trailing_metadata)
    assert retry_delay_s(decode_status_details(failure.trailing_metadata)) is None


def test_unavailable_keeps_the_retry_delay() -> None:
    failure = failure_for_http(503, "no backend", "no_backend_available", retry_after_s=0.2)
    assert dict(failure.trailing_metadata)["retry-after"] == "1"
    assert retry_delay_s(decode_status_details(failure.trailing_metadata)) == pytest.approx(0.2)


@dataclass(frozen=True)
class _GatewayError:
    """Shaped like gateway.errors.ApiError: the HttpError protocol is structural."""

    status: int
    message: str
    code: str | None = None
    retry_after_s: float | None = None


def test_gateway_errors_map_structurally() -> None:
    failure = failure_for_error(_GatewayError(503, "all backends down", "no_backend_available", 4))
    assert failure.code is grpc.StatusCode.UNAVAILABLE
    assert dict(failure.trailing_metadata)["retry-after"] == "4"


@pytest.mark.parametrize(
    ("status", "body", "expected", "message"),
    [
        (
            404,
            {"error": {"message": "no such model", "code": "model_not_found"}},
            grpc.StatusCode.NOT_FOUND,
            "no such model",
        ),
        (  # vLLM's flat error object with a numeric code
            404,
            {"object": "error", "message": "The model `x` does not exist.", "code": 404},
            grpc.StatusCode.NOT_FOUND,
            "The model `x` does not exist.",
        ),
        (500, "not json at all", grpc.StatusCode.INTERNAL, "backend returned HTTP 500"),
    ],
)
def test_upstream_error_bodies(
    status: int, body: object, expected: grpc.StatusCode, message: str
) -> None:
    failure = failure_for_openai_body(status, body)
    assert failure.code is expected
    assert failure.details == message
