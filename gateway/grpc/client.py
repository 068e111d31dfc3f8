"""Client-side helpers for the ``meridian.v1.Inference`` service (tests, benchmarks, tools)."""

from __future__ import annotations

from typing import Any

import grpc

from proto.meridian.v1 import inference_pb2_grpc as pb_grpc


def inference_stub(channel: grpc.aio.Channel) -> Any:
    """An ``InferenceStub`` on an aio channel. The generated stub is untyped (grpcio-tools writes
    no .pyi for it), so this is the one place that says so."""
    return pb_grpc.InferenceStub(channel)  # type: ignore[no-untyped-call]
