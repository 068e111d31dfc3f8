"""The h2 engine's sans-IO parts (gateway/grpc_h2/wire.py): framing, grpc-timeout, status and
metadata as header fields."""

from __future__ import annotations

import base64
import zlib

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.grpc_h2.wire import (
    MessageReader,
    WireError,
    call_headers,
    frame,
    metadata_headers,
    parse_timeout,
    percent_encoded,
    status_headers,
)


@given(st.lists(st.binary(max_size=300), max_size=8), st.integers(1, 40))
def test_messages_come_out_whole_however_the_bytes_are_split(
    messages: list[bytes], step: int
) -> None:
    wire = b"".join(frame(m) for m in messages)
    reader = MessageReader(max_bytes=300)
    out: list[bytes] = []
    for start in range(0, len(wire), step):
        out.extend(reader.feed(wire[start : start + step]))
    assert out == messages
    assert not reader.partial


def test_an_oversized_message_is_refused_at_its_prefix() -> None:
    reader = MessageReader(max_bytes=10)
    with pytest.raises(WireError) as caught:
        reader.feed(frame(b"x" * 11)[:5])  # the prefix alone: the body is never held
    assert caught.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "larger than max (11 vs. 10)" in caught.value.details


def _compressed(body: bytes, wbits: int) -> bytes:
    deflater = zlib.compressobj(wbits=wbits)
    packed = deflater.compress(body) + deflater.flush()
    return b"\x01" + len(packed).to_bytes(4, "big") + packed


@pytest.mark.parametrize(("encoding", "wbits"), [(b"gzip", 31), (b"deflate", 15)])
def test_compressed_messages_inflate_within_the_limit(encoding: bytes, wbits: int) -> None:
    reader = MessageReader(1000, encoding)
    assert reader.feed(_compressed(b"a" * 1000, wbits)) == [b"a" * 1000]
    with pytest.raises(WireError) as caught:  # a small frame that inflates past the limit
        reader.feed(_compressed(b"a" * 1001, wbits))
    assert caught.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED


@pytest.mark.parametrize(
    ("encoding", "code"),
    [(None, grpc.StatusCode.INTERNAL), (b"snappy", grpc.StatusCode.UNIMPLEMENTED)],
)
def test_a_compressed_message_needs_an_encoding_we_take(
    encoding: bytes | None, code: grpc.StatusCode
) -> None:
    with pytest.raises(WireError) as caught:
        MessageReader(100, encoding).feed(_compressed(b"x", 31))
    assert caught.value.code is code


def test_a_corrupt_compressed_message_is_internal() -> None:
    with pytest.raises(WireError) as caught:
        MessageReader(100, b"gzip").feed(b"\x01\x00\x00\x00\x03abc")
    assert caught.value.code is grpc.StatusCode.INTERNAL


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(b"1H", 3600.0), (b"2M", 120.0), (b"3S", 3.0), (b"250m", 0.25), (b"7u", 7e-6), (b"9n", 9e-9)],
)
def test_grpc_timeout_units(value: bytes, seconds: float) -> None:
    assert parse_timeout(value) == pytest.approx(seconds)


@pytest.mark.parametrize("value", [b"", b"S", b"10", b"123456789S", b"1x", b"-1S", b"1.5S"])
def test_malformed_grpc_timeout_is_refused(value: bytes) -> None:
    with pytest.raises(WireError):
        parse_timeout(value)


def test_grpc_message_is_percent_encoded_outside_printable_ascii() -> None:
    assert percent_encoded("plain text") == b"plain text"
    assert percent_encoded("100% é\n") == b"100%25 %C3%A9%0A"


def test_binary_metadata_is_unpadded_base64_and_reads_back() -> None:
    headers = metadata_headers((("x-trace-bin", b"\x00\x01\x02\x03"), ("x-name", "v")))
    assert headers == [
        (b"x-trace-bin", base64.b64encode(b"\x00\x01\x02\x03").rstrip(b"=")),
        (b"x-name", b"v"),
    ]
    request = [
        (b":method", b"POST"),
        (b":path", b"/meridian.v1.Inference/ChatCompletion"),
        (b"content-type", b"application/grpc+proto"),
        (b"te", b"trailers"),
        (b"grpc-timeout", b"500m"),
        *headers,
    ]
    parsed = call_headers(request)
    assert parsed.path == "/meridian.v1.Inference/ChatCompletion"
    assert parsed.timeout_s == pytest.approx(0.5)
    assert parsed.metadata == (("x-trace-bin", b"\x00\x01\x02\x03"), ("x-name", "v"))


@pytest.mark.parametrize(
    "request_headers",
    [
        [(b":method", b"GET"), (b":path", b"/x/y"), (b"content-type", b"application/grpc")],
        [(b":method", b"POST"), (b":path", b"/x/y"), (b"content-type", b"application/json")],
    ],
)
def test_a_request_that_is_not_grpc_is_refused(request_headers: list[tuple[bytes, bytes]]) -> None:
    with pytest.raises(WireError):
        call_headers(request_headers)


def test_status_headers_carry_code_message_and_trailers() -> None:
    trailers = metadata_headers((("x-request-id", "r1"),))
    headers = status_headers(grpc.StatusCode.NOT_FOUND, "no such model", trailers)
    assert headers == [
        (b"grpc-status", b"5"),
        (b"grpc-message", b"no such model"),
        (b"x-request-id", b"r1"),
    ]


@pytest.mark.parametrize(
    "metadata",
    [
        (("Upper", "v"),),
        (("x-ok", "line\nbreak"),),
        (("x-ok", "caf\u00e9"),),
        ((":status", "500"),),
    ],
)
def test_metadata_grpc_does_not_allow_is_refused(metadata: tuple[tuple[str, str], ...]) -> None:
    with pytest.raises(ValueError):
        metadata_headers(metadata)
