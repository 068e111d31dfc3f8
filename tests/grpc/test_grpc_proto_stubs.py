"""The committed stubs are what proto/generate.py makes from the committed .proto."""

from __future__ import annotations

import re
from pathlib import Path

from proto import generate

# Stamps of the grpcio-tools / protobuf versions that generated a file. A developer on a newer
# grpcio-tools produces the same code with different stamps; that is not staleness.
_VERSION_STAMPS = re.compile(
    r"^# Protobuf Python Version: .*$"
    r"|^GRPC_GENERATED_VERSION = .*$"
    r"|_runtime_version\.ValidateProtobufRuntimeVersion\([^)]*\)",
    re.MULTILINE,
)


def _normalized(path: Path) -> str:
    return _VERSION_STAMPS.sub("<version stamp>", path.read_text())


def test_committed_stubs_match_a_fresh_generation(tmp_path: Path) -> None:
    written = generate.generate(tmp_path)
    assert written, "generator wrote nothing"
    for fresh in written:
        relative = fresh.relative_to(tmp_path)
        committed = generate.PROTO_ROOT / relative
        assert committed.is_file(), f"{relative} is not committed; run `python -m proto.generate`"
        assert _normalized(committed) == _normalized(fresh), (
            f"proto/{relative} is stale: run `python -m proto.generate` and commit the result"
        )


def test_stubs_import_as_repository_package() -> None:
    from proto.meridian.v1 import inference_pb2, inference_pb2_grpc

    assert inference_pb2.DESCRIPTOR.name == "meridian/v1/inference.proto"
    service = inference_pb2.DESCRIPTOR.services_by_name["Inference"]
    assert [m.name for m in service.methods] == [
        "ChatCompletion",
        "Completion",
        "ListModels",
        "Embeddings",
        "Messages",
    ]
    assert hasattr(inference_pb2_grpc, "InferenceStub")
