"""The gRPC door's conversion layer, in one import.

- requests: proto message → the exact OpenAI JSON body the HTTP door would receive
  (:mod:`gateway.grpc.request_convert`),
- stream chunks: OpenAI SSE chunk JSON → proto chunk (:mod:`gateway.grpc.chunk_convert`),
- errors: HTTP status / OpenAI error → gRPC status + trailing metadata
  (:mod:`gateway.grpc.status_map`).
"""

from __future__ import annotations

from gateway.grpc.chunk_convert import (
    MalformedChunk,
    chat_chunk_from_json,
    chat_chunk_to_json,
    completion_chunk_from_json,
    completion_chunk_to_json,
)
from gateway.grpc.request_convert import (
    ConvertedRequest,
    InvalidRequest,
    body_to_chat_request,
    body_to_completion_request,
    chat_request_to_body,
    completion_request_to_body,
)
from gateway.grpc.status_map import (
    GrpcFailure,
    HttpError,
    decode_status_details,
    failure_for_error,
    failure_for_http,
    failure_for_openai_body,
    grpc_code_for,
    retry_delay_s,
)

__all__ = [
    "ConvertedRequest",
    "GrpcFailure",
    "HttpError",
    "InvalidRequest",
    "MalformedChunk",
    "body_to_chat_request",
    "body_to_completion_request",
    "chat_chunk_from_json",
    "chat_chunk_to_json",
    "chat_request_to_body",
    "completion_chunk_from_json",
    "completion_chunk_to_json",
    "completion_request_to_body",
    "decode_status_details",
    "failure_for_error",
    "failure_for_http",
    "failure_for_openai_body",
    "grpc_code_for",
    "retry_delay_s",
]
