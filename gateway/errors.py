"""Errors as values, rendered in each protocol's own format.

An :class:`ApiError` carries an HTTP status and the OpenAI error triple (message, type, code).
HTTP renders it as ``{"error": {...}}``; the gRPC door maps the status to a gRPC code.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson
from aiohttp import web


@dataclass(frozen=True, slots=True)
class ApiError(Exception):
    status: int
    message: str
    type: str = "invalid_request_error"
    code: str | None = None
    param: str | None = None
    retry_after_s: float | None = None
    # Extra response headers (e.g. x-ratelimit-* on a quota's 429); HTTP only.
    headers: tuple[tuple[str, str], ...] = ()

    def body(self) -> dict[str, object]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def to_response(self, headers: dict[str, str] | None = None) -> web.Response:
        all_headers = dict(headers or {})
        all_headers.update(self.headers)
        if self.retry_after_s is not None:
            all_headers["Retry-After"] = str(max(1, round(self.retry_after_s)))
        return web.Response(
            status=self.status,
            body=orjson.dumps(self.body()),
            content_type="application/json",
            headers=all_headers,
        )

    def sse_event(self) -> bytes:
        """The error as an SSE data event, for failures after the stream has started."""
        return b"data: " + orjson.dumps(self.body()) + b"\n\n"


def bad_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, "invalid_request_error", code, param)


def model_not_found(model: str) -> ApiError:
    return ApiError(
        404,
        f"The model '{model}' does not exist or is not served by this gateway.",
        "invalid_request_error",
        "model_not_found",
        "model",
    )


def api_not_served(model: str, path: str) -> ApiError:
    return ApiError(
        404,
        f"No backend serving the model '{model}' offers {path}.",
        "invalid_request_error",
        "endpoint_not_served",
        "model",
    )


def no_backend(message: str, retry_after_s: float | None = None) -> ApiError:
    return ApiError(
        503, message, "service_unavailable", "no_backend_available", None, retry_after_s
    )


def upstream_failed(
    message: str, status: int = 502, retry_after_s: float | None = None
) -> ApiError:
    kind = "rate_limit_exceeded" if status == 429 else "upstream_error"
    return ApiError(
        status,
        message,
        "server_error" if status != 429 else "rate_limit_error",
        kind,
        None,
        retry_after_s,
    )
