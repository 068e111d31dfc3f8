"""``grpc.reflection.v1`` as a v1 client calls it (its own message types on the v1 method),
and ``x-request-id`` in the trailers of failed calls."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import descriptor_pb2

from gateway.grpc.client import inference_stub
from gateway.grpc.reflection_v1 import V1_SERVICE, _v1_messages
from gateway.grpc.server import GrpcEngine
from loadtests.emulator.config import FaultConfig
from tests.grpc.grpc_support import chat, grpc_rig


async def test_v1_reflection_lists_and_describes(grpc_engine: GrpcEngine) -> None:
    request_type, response_type = _v1_messages()
    assert request_type.DESCRIPTOR.full_name == "grpc.reflection.v1.ServerReflectionRequest"
    async with grpc_rig(engine=grpc_engine) as rig:
        call = rig.channel.stream_stream(
            f"/{V1_SERVICE}/ServerReflectionInfo",
            request_serializer=request_type.SerializeToString,
            response_deserializer=response_type.FromString,
        )
        requests = [
            request_type(list_services=""),
            request_type(file_containing_symbol="meridian.v1.Inference"),
            request_type(file_containing_symbol=V1_SERVICE),
        ]
        replies = [reply async for reply in call(iter(requests))]
    services = {s.name for s in replies[0].list_services_response.service}
    assert {
        "meridian.v1.Inference",
        V1_SERVICE,
        "grpc.reflection.v1alpha.ServerReflection",
    } <= services
    for reply, package in ((replies[1], "meridian.v1"), (replies[2], "grpc.reflection.v1")):
        files = [
            descriptor_pb2.FileDescriptorProto.FromString(raw)
            for raw in reply.file_descriptor_response.file_descriptor_proto
        ]
        assert package in {f.package for f in files}


@pytest.mark.parametrize(
    ("faults", "request_message"),
    [
        (FaultConfig(unavailable_rate=1.0), chat()),  # the backend fails
        (FaultConfig(), chat(max_tokens=0)),  # the request is refused before any backend
    ],
    ids=["backend-failure", "invalid-request"],
)
async def test_failed_calls_name_the_request_in_their_trailers(
    faults: FaultConfig, request_message: object, grpc_engine: GrpcEngine
) -> None:
    async with grpc_rig(faults, engine=grpc_engine) as rig:
        call = inference_stub(rig.channel).ChatCompletion(
            request_message, metadata=(("x-request-id", "req-42"),)
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in call:
                pass
    trailers = dict(caught.value.trailing_metadata() or ())
    assert trailers.get("x-request-id") == "req-42", trailers


def test_the_proto_names_its_packages_for_other_languages() -> None:
    from proto.meridian.v1 import inference_pb2

    options = inference_pb2.DESCRIPTOR.GetOptions()
    assert options.go_package.endswith(";meridianv1")
    assert (options.java_package, options.java_multiple_files) == ("dev.meridian.v1", True)
