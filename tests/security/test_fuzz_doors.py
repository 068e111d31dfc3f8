"""A bounded hypothesis fuzz of the doors against one running gateway: raw HTTP requests over
sockets, request bodies, gRPC messages — and the checked-in corpus of inputs that once broke
something. Derandomized, so the suite never flakes; ``python -m loadtests.fuzz_doors`` runs the
same with many more examples."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from hypothesis import HealthCheck, given, settings

from tests.security.fuzz_inputs import (
    GRPC_OK_CODES,
    bodies,
    check_http_answer,
    load_corpus,
    raw_requests,
)
from tests.security.fuzz_rig import FuzzTarget, raw_exchange, threaded_gateway

BOUNDED = settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def target() -> Iterator[FuzzTarget]:
    with threaded_gateway() as running:
        yield running


def post(port: int, path: str, body: bytes) -> bytes:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: fuzz\r\nContent-Type: application/json\r\n"
        f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    return raw_exchange(port, head + body)


def grpc_code(target: str, method: str, message: bytes) -> grpc.StatusCode:
    with grpc.insecure_channel(target) as channel:
        call = channel.unary_stream(f"/meridian.v1.Inference/{method}")
        try:
            for _ in call(message, timeout=10):
                pass
        except grpc.RpcError as error:
            return error.code()
    return grpc.StatusCode.OK


def still_healthy(target: FuzzTarget) -> None:
    answer = raw_exchange(
        target.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    assert answer.startswith(b"HTTP/1.1 200 ")


@BOUNDED
@given(request=raw_requests)
def test_raw_http_requests(target: FuzzTarget, request: bytes) -> None:
    check_http_answer(raw_exchange(target.port, request))


@BOUNDED
@given(body=bodies)
def test_request_bodies(target: FuzzTarget, body: bytes) -> None:
    for path in ("/v1/chat/completions", "/v1/completions"):
        check_http_answer(post(target.port, path, body))


@settings(BOUNDED, max_examples=60)
@given(message=bodies)
def test_grpc_messages(target: FuzzTarget, message: bytes) -> None:
    for method in ("ChatCompletion", "Completion"):
        assert grpc_code(target.grpc_target, method, message) in GRPC_OK_CODES


@pytest.mark.parametrize("entry", load_corpus(), ids=lambda e: e["why"][:40])
def test_corpus_of_inputs_that_once_broke_something(
    target: FuzzTarget, entry: dict[str, str]
) -> None:
    if entry["door"] == "grpc":
        code = grpc_code(target.grpc_target, "ChatCompletion", bytes.fromhex(entry["hex"]))
        assert code == grpc.StatusCode.INVALID_ARGUMENT
    elif entry["door"] == "http-raw":
        check_http_answer(raw_exchange(target.port, entry["text"].encode()))
    else:
        answer = post(target.port, "/v1/completions", entry["text"].encode())
        check_http_answer(answer)
        assert answer.startswith(b"HTTP/1.1 400 ")
    still_healthy(target)
