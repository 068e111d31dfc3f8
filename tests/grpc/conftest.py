"""Every gRPC rig runs against both engines: grpc.aio and the h2 engine (gateway/grpc_h2)."""

from __future__ import annotations

import pytest

from gateway.grpc.server import GrpcEngine

ENGINES: tuple[GrpcEngine, ...] = ("grpcio", "h2")


@pytest.fixture(params=ENGINES)
def grpc_engine(request: pytest.FixtureRequest) -> GrpcEngine:
    engine: GrpcEngine = request.param
    return engine
