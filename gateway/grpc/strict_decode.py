"""Register the Inference servicer so that a message that does not decode is the client's error.

With the generated registration, grpc deserializes before the handler runs; a message that
fails to parse ends the call ``UNKNOWN`` with a traceback in the log, once per bad call. Here
the request arrives as bytes and is parsed inside the handler: a ``DecodeError`` ends the call
``INVALID_ARGUMENT`` with one log line and no traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
from google.protobuf.message import DecodeError, Message

from proto.meridian.v1 import inference_pb2 as pb
from proto.meridian.v1 import inference_pb2_grpc as pb_grpc

log = logging.getLogger("meridian.grpc")

SERVICE = "meridian.v1.Inference"
Request = TypeVar("Request", bound=Message)


async def _decoded(kind: type[Request], raw: bytes, context: grpc.aio.ServicerContext) -> Request:
    try:
        return kind.FromString(raw)
    except (DecodeError, ValueError, RecursionError):
        log.info("refused a gRPC message that does not decode as %s", kind.DESCRIPTOR.full_name)
        await context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"request message does not decode as {kind.DESCRIPTOR.full_name}",
        )
        raise AssertionError("abort raises") from None


def _decoding(kind: type[Request], method: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
    """A coroutine handler (grpc.aio runs a streaming one in its reader/writer form: the
    method writes each message itself) that parses the request first."""

    async def handler(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
        return await method(await _decoded(kind, raw, context), context)

    return handler


def _raw(data: bytes) -> bytes:
    return data


def add_inference_servicer(servicer: pb_grpc.InferenceServicer, server: grpc.aio.Server) -> None:
    """Like ``add_InferenceServicer_to_server``, parsing requests inside the handlers."""
    handlers = {
        "ChatCompletion": grpc.unary_stream_rpc_method_handler(
            _decoding(pb.ChatCompletionRequest, servicer.ChatCompletion),
            request_deserializer=_raw,
            response_serializer=pb.ChatCompletionChunk.SerializeToString,
        ),
        "Completion": grpc.unary_stream_rpc_method_handler(
            _decoding(pb.CompletionRequest, servicer.Completion),
            request_deserializer=_raw,
            response_serializer=pb.CompletionChunk.SerializeToString,
        ),
        "Embeddings": grpc.unary_unary_rpc_method_handler(
            _decoding(pb.EmbeddingsRequest, servicer.Embeddings),
            request_deserializer=_raw,
            response_serializer=pb.EmbeddingsResponse.SerializeToString,
        ),
        "Messages": grpc.unary_stream_rpc_method_handler(
            _decoding(pb.MessagesRequest, servicer.Messages),
            request_deserializer=_raw,
            response_serializer=pb.MessagesEvent.SerializeToString,
        ),
        "ListModels": grpc.unary_unary_rpc_method_handler(
            _decoding(pb.ListModelsRequest, servicer.ListModels),
            request_deserializer=_raw,
            response_serializer=pb.ListModelsResponse.SerializeToString,
        ),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    server.add_registered_method_handlers(SERVICE, handlers)
