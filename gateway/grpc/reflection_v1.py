"""``grpc.reflection.v1.ServerReflection`` beside v1alpha: stock tools (grpcurl, grpcui,
Postman, newer gRPC clients) ask for v1 first.

grpcio-reflection ships only v1alpha. The v1 protocol is the same messages, field for field,
under another package, so the v1 service is the same servicer behind v1 message types built
from v1alpha's descriptor (renamed into ``grpc.reflection.v1``, registered in the default
pool, so a client can also describe the reflection service itself).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

V1_PACKAGE = "grpc.reflection.v1"
V1_SERVICE = f"{V1_PACKAGE}.ServerReflection"
_V1_FILE = "grpc/reflection/v1/reflection.proto"


def _v1_messages() -> tuple[Any, Any]:
    """The v1 request and response message classes (built once per process)."""
    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName(_V1_FILE)
    except KeyError:
        proto = descriptor_pb2.FileDescriptorProto()
        reflection_pb2.DESCRIPTOR.CopyToProto(proto)
        old = "." + reflection_pb2.DESCRIPTOR.package + "."
        proto.name, proto.package = _V1_FILE, V1_PACKAGE
        proto.options.Clear()
        for message in proto.message_type:
            for field in message.field:
                if field.type_name:  # message-typed fields only (setting it marks a scalar)
                    field.type_name = field.type_name.replace(old, f".{V1_PACKAGE}.")
        for method in proto.service[0].method:
            method.input_type = method.input_type.replace(old, f".{V1_PACKAGE}.")
            method.output_type = method.output_type.replace(old, f".{V1_PACKAGE}.")
        pool.Add(proto)
    request = pool.FindMessageTypeByName(f"{V1_PACKAGE}.ServerReflectionRequest")
    response = pool.FindMessageTypeByName(f"{V1_PACKAGE}.ServerReflectionResponse")
    return message_factory.GetMessageClass(request), message_factory.GetMessageClass(response)


def enable_reflection(service_names: Iterable[str], server: Any) -> None:
    """v1alpha and v1 reflection, each listing both."""
    names = (*service_names, reflection.SERVICE_NAME, V1_SERVICE)
    servicer = reflection.aio.ReflectionServicer(names)
    # Registered directly (enable_server_reflection picks the aio servicer only for a
    # grpc.aio.Server; the h2 engine takes the same registration).
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, server)
    v1_request, v1_response = _v1_messages()

    async def info(requests: Any, context: grpc.aio.ServicerContext) -> Any:
        async def as_v1alpha() -> Any:  # same wire bytes, v1alpha classes for the servicer
            async for request in requests:
                yield reflection_pb2.ServerReflectionRequest.FromString(request.SerializeToString())

        async for answer in servicer.ServerReflectionInfo(as_v1alpha(), context):
            yield v1_response.FromString(answer.SerializeToString())

    handler = grpc.method_handlers_generic_handler(
        V1_SERVICE,
        {
            "ServerReflectionInfo": grpc.stream_stream_rpc_method_handler(
                info,
                request_deserializer=v1_request.FromString,
                response_serializer=v1_response.SerializeToString,
            )
        },
    )
    server.add_generic_rpc_handlers((handler,))
