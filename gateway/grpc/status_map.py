"""OpenAI/HTTP errors → gRPC status, details and trailing metadata.

The HTTP door answers with a status and an OpenAI error object; the gRPC door must say the same
thing in gRPC terms so stock clients react correctly (retry on UNAVAILABLE / RESOURCE_EXHAUSTED
after the advertised delay, give up on INVALID_ARGUMENT). The rich status
(``grpc-status-details-bin``: google.rpc.Status with ErrorInfo and, for overload, RetryInfo) lets
clients that decode it see the OpenAI error code and the exact retry delay; ``retry-after``
carries the delay in whole seconds for clients that only read plain metadata.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.protobuf.message import Message
from google.rpc import (  # type: ignore[import-untyped]  # ships .pyi but no py.typed
    error_details_pb2,
    status_pb2,
)

ERROR_DOMAIN = "meridian.v1"
RETRY_AFTER_KEY = "retry-after"
STATUS_DETAILS_KEY = "grpc-status-details-bin"

_BY_HTTP_STATUS: dict[int, grpc.StatusCode] = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
    408: grpc.StatusCode.DEADLINE_EXCEEDED,
    413: grpc.StatusCode.INVALID_ARGUMENT,  # the request itself is too big: retrying cannot help
    422: grpc.StatusCode.INVALID_ARGUMENT,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    499: grpc.StatusCode.CANCELLED,
    501: grpc.StatusCode.UNIMPLEMENTED,
    503: grpc.StatusCode.UNAVAILABLE,
    504: grpc.StatusCode.DEADLINE_EXCEEDED,
}
_BY_ERROR_CODE: dict[str, grpc.StatusCode] = {
    "model_not_found": grpc.StatusCode.NOT_FOUND,
    "loop_detected": grpc.StatusCode.FAILED_PRECONDITION,  # gateway/chain: a routing cycle
    "too_many_hops": grpc.StatusCode.FAILED_PRECONDITION,
    "no_backend_available": grpc.StatusCode.UNAVAILABLE,
    "rate_limit_exceeded": grpc.StatusCode.RESOURCE_EXHAUSTED,
}
_RETRYABLE = frozenset({grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE})

Metadata = tuple[tuple[str, str | bytes], ...]


class HttpError(Protocol):
    """What the gateway knows about a failed request (``gateway.errors.ApiError`` fits)."""

    @property
    def status(self) -> int: ...
    @property
    def message(self) -> str: ...
    @property
    def code(self) -> str | None: ...
    @property
    def retry_after_s(self) -> float | None: ...


@dataclass(frozen=True, slots=True)
class GrpcFailure:
    """How to end an RPC: ``await context.abort(f.code, f.details, f.trailing_metadata)``."""

    code: grpc.StatusCode
    details: str
    trailing_metadata: Metadata = ()


def grpc_code_for(http_status: int, error_code: str | None = None) -> grpc.StatusCode:
    if error_code is not None and error_code in _BY_ERROR_CODE:
        return _BY_ERROR_CODE[error_code]
    return _BY_HTTP_STATUS.get(http_status, grpc.StatusCode.INTERNAL)


def _status_details(
    code: grpc.StatusCode, message: str, reason: str, http_status: int, retry_after_s: float | None
) -> bytes:
    info = error_details_pb2.ErrorInfo(
        reason=reason, domain=ERROR_DOMAIN, metadata={"http_status": str(http_status)}
    )
    details = [_packed(info)]
    if retry_after_s is not None:
        delay = duration_pb2.Duration()
        delay.FromNanoseconds(round(retry_after_s * 1e9))
        details.append(_packed(error_details_pb2.RetryInfo(retry_delay=delay)))
    status = status_pb2.Status(code=code.value[0], message=message, details=details)
    serialized: bytes = status.SerializeToString()
    return serialized


def _packed(message: Message) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def failure_for_http(
    http_status: int,
    message: str,
    error_code: str | None = None,
    retry_after_s: float | None = None,
) -> GrpcFailure:
    """Map one HTTP-level failure. Retry info is attached only where a retry can succeed."""
    code = grpc_code_for(http_status, error_code)
    retry = retry_after_s if code in _RETRYABLE and retry_after_s is not None else None
    if retry is not None and (not math.isfinite(retry) or retry < 0):
        retry = None
    reason = (error_code or f"http_{http_status}").upper()
    metadata: list[tuple[str, str | bytes]] = []
    if retry is not None:
        metadata.append((RETRY_AFTER_KEY, str(max(1, math.ceil(retry)))))
    metadata.append(
        (STATUS_DETAILS_KEY, _status_details(code, message, reason, http_status, retry))
    )
    return GrpcFailure(code, message, tuple(metadata))


def failure_for_error(error: HttpError) -> GrpcFailure:
    return failure_for_http(error.status, error.message, error.code, error.retry_after_s)


def failure_for_openai_body(
    http_status: int, body: object, retry_after_s: float | None = None
) -> GrpcFailure:
    """From an upstream error response: ``{"error": {"message": ..., "code": ...}}`` or vLLM's
    flat ``{"message": ..., "code": 404}``; anything else keeps only the status."""
    error = body.get("error", body) if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return failure_for_http(
            http_status, f"backend returned HTTP {http_status}", None, retry_after_s
        )
    message = str(error.get("message") or f"backend returned HTTP {http_status}")
    code = error.get("code")
    return failure_for_http(
        http_status, message, code if isinstance(code, str) else None, retry_after_s
    )


def decode_status_details(trailing_metadata: Metadata) -> Any:
    """For clients and tests: the rich status carried in trailing metadata, if any."""
    for key, value in trailing_metadata:
        if key == STATUS_DETAILS_KEY and isinstance(value, bytes):
            return status_pb2.Status.FromString(value)  # google.rpc.Status
    return None


def retry_delay_s(status: Any) -> float | None:
    """The RetryInfo delay inside a decoded google.rpc.Status, if any."""
    for detail in status.details:
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            detail.Unpack(info)
            return float(info.retry_delay.ToNanoseconds()) / 1e9
    return None
