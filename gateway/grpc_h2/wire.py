"""gRPC over HTTP/2, the parts with no I/O: message framing, ``grpc-timeout``, status and
metadata as header blocks, as the protocol spells them
(https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md).

Everything here is a pure function or a small buffer object, so the engine's connection code
only moves bytes between h2 and these.
"""

from __future__ import annotations

import base64
import binascii
import re
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

import grpc
from hpack import NeverIndexedHeaderTuple

PREFIX = struct.Struct(">BI")  # compressed flag, message length
CONTENT_TYPE = b"application/grpc"
# Request messages may come compressed with these (responses are never compressed).
_ZLIB_WBITS = {b"gzip": 16 + zlib.MAX_WBITS, b"deflate": zlib.MAX_WBITS}
ACCEPT_ENCODING = b"identity,deflate,gzip"
RESPONSE_HEADERS = (
    (b":status", b"200"),
    (b"content-type", CONTENT_TYPE),
    (b"grpc-accept-encoding", ACCEPT_ENCODING),
)
# Request headers that are transport, not call metadata (never shown to the servicer).
_TRANSPORT_KEYS = frozenset(
    {b"te", b"content-type", b"grpc-timeout", b"grpc-encoding", b"grpc-accept-encoding"}
)
_TIMEOUT_UNITS = {
    ord("H"): 3600.0,
    ord("M"): 60.0,
    ord("S"): 1.0,
    ord("m"): 1e-3,
    ord("u"): 1e-6,
    ord("n"): 1e-9,
}
# grpc-message: percent-encode everything outside printable ASCII, and '%' itself.
_UNRESERVED = frozenset(range(0x20, 0x7F)) - {ord("%")}

# Values new with every call: never added to the HPACK table (each would only evict others).
_PER_CALL_KEYS = frozenset(
    {
        b"server-timing",
        b"x-request-id",
        b"x-meridian-timing",
        b"traceresponse",
        b"grpc-message",
        b"grpc-status-details-bin",
    }
)

Header = tuple[bytes, bytes]
_KEY = re.compile(rb"[0-9a-z_.\-]+")
_VALUE = re.compile(rb"[\x20-\x7e]*")
Metadata = tuple[tuple[str, str | bytes], ...]


class WireError(Exception):
    """A call that must end with this status (the client's bytes broke a protocol rule)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


def frame(message: bytes) -> bytes:
    """One length-prefixed, uncompressed message."""
    return PREFIX.pack(0, len(message)) + message


class MessageReader:
    """Splits a stream's DATA into length-prefixed messages. A message over ``max_bytes`` is
    refused as soon as its prefix arrives, before its body is held; a compressed one (the
    request's ``grpc-encoding``: gzip or deflate) is refused as soon as it inflates past it."""

    __slots__ = ("_buffer", "encoding", "max_bytes")

    def __init__(self, max_bytes: int, encoding: bytes | None = None) -> None:
        self.max_bytes = max_bytes
        self.encoding = encoding
        self._buffer = bytearray()  # grown in place: a large message in many frames is O(n)

    @property
    def partial(self) -> bool:
        """Bytes of a message not yet complete are held."""
        return bool(self._buffer)

    def feed(self, data: bytes) -> list[bytes]:
        buffer = self._buffer
        if not buffer and len(data) >= PREFIX.size:
            _, length = PREFIX.unpack_from(data)
            if len(data) == PREFIX.size + length and length <= self.max_bytes:
                return self._messages(data)  # the usual case: exactly one whole message
        buffer += data
        return self._messages(buffer)

    def _messages(self, buffer: bytes | bytearray) -> list[bytes]:
        messages: list[bytes] = []
        offset = 0
        while len(buffer) - offset >= PREFIX.size:
            compressed, length = PREFIX.unpack_from(buffer, offset)
            if length > self.max_bytes:
                raise WireError(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"Received message larger than max ({length} vs. {self.max_bytes})",
                )
            end = offset + PREFIX.size + length
            if end > len(buffer):
                break
            body = bytes(buffer[offset + PREFIX.size : end])
            messages.append(self._inflated(body) if compressed else body)
            offset = end
        if isinstance(buffer, bytearray):  # (bytes: the one whole message, nothing left)
            del buffer[:offset]
        return messages

    def _inflated(self, body: bytes) -> bytes:
        wbits = _ZLIB_WBITS.get(self.encoding or b"")
        if wbits is None:  # the protocol's answers: no encoding named, or one we do not take
            if not self.encoding or self.encoding == b"identity":
                raise WireError(
                    grpc.StatusCode.INTERNAL, "compressed message without grpc-encoding"
                )
            raise WireError(
                grpc.StatusCode.UNIMPLEMENTED,
                f"grpc-encoding {self.encoding.decode('latin-1')!r} is not accepted "
                f"(grpc-accept-encoding: {ACCEPT_ENCODING.decode()})",
            )
        inflater = zlib.decompressobj(wbits)
        try:
            raw = inflater.decompress(body, self.max_bytes + 1)
        except zlib.error:
            raise WireError(
                grpc.StatusCode.INTERNAL, "compressed message does not inflate"
            ) from None
        if len(raw) > self.max_bytes or inflater.unconsumed_tail:
            raise WireError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"Received message larger than max (inflated past {self.max_bytes})",
            )
        return raw


def parse_timeout(value: bytes) -> float:
    """``grpc-timeout`` (1-8 digits and a unit) in seconds; WireError if malformed."""
    digits = value[:-1]
    unit = _TIMEOUT_UNITS.get(value[-1]) if value else None
    if unit is None or not digits.isdigit() or len(digits) > 8:
        raise WireError(grpc.StatusCode.INVALID_ARGUMENT, "malformed grpc-timeout header")
    return int(digits) * unit


def percent_encoded(details: str) -> bytes:
    raw = details.encode()
    if all(byte in _UNRESERVED for byte in raw):
        return raw
    return b"".join(bytes((byte,)) if byte in _UNRESERVED else b"%%%02X" % byte for byte in raw)


def metadata_headers(metadata: Iterable[tuple[str, str | bytes]]) -> list[Header]:
    """Call metadata as header fields: ``-bin`` values base64 (unpadded, as gRPC sends them).
    ValueError for a key or a value gRPC does not allow (keys ``[0-9a-z_.-]``, other values
    printable ASCII), as grpc.aio refuses them: h2's own, slower, outbound checks are off."""
    headers: list[Header] = []
    for key, value in metadata:
        name = key.encode("ascii")
        if not _KEY.fullmatch(name):
            raise ValueError(f"gRPC metadata key {key!r} is not allowed")
        if name.endswith(b"-bin"):
            raw = value if isinstance(value, bytes) else value.encode()
            encoded = base64.b64encode(raw).rstrip(b"=")
        else:
            encoded = value if isinstance(value, bytes) else value.encode("ascii")
            if not _VALUE.fullmatch(encoded):
                raise ValueError(f"gRPC metadata {key!r} has a value that is not printable ASCII")
        if name in _PER_CALL_KEYS:
            headers.append(NeverIndexedHeaderTuple(name, encoded))
        else:
            headers.append((name, encoded))
    return headers


def status_headers(code: grpc.StatusCode, details: str, trailers: Iterable[Header]) -> list[Header]:
    """``grpc-status``, ``grpc-message`` and the (converted) trailing metadata."""
    headers = [(b"grpc-status", str(code.value[0]).encode())]
    if details:
        headers.append(NeverIndexedHeaderTuple(b"grpc-message", percent_encoded(details)))
    headers.extend(trailers)
    return headers


@dataclass(frozen=True, slots=True)
class CallHeaders:
    """What a request's HEADERS say: the method, the client's timeout and its metadata."""

    path: str
    timeout_s: float | None
    metadata: Metadata
    encoding: bytes | None = None  # grpc-encoding of the request's messages


def call_headers(headers: Iterable[Header]) -> CallHeaders:
    """Read a request's header block; WireError when it is not a gRPC call."""
    path = b""
    method = content_type = b""
    timeout_s: float | None = None
    encoding: bytes | None = None
    metadata: list[tuple[str, str | bytes]] = []
    for name, value in headers:
        if name.startswith(b":"):
            if name == b":path":
                path = value
            elif name == b":method":
                method = value
        elif name in _TRANSPORT_KEYS:
            if name == b"content-type":
                content_type = value
            elif name == b"grpc-timeout":
                timeout_s = parse_timeout(value)
            elif name == b"grpc-encoding":
                encoding = value
        elif name.endswith(b"-bin"):
            metadata.append((name.decode("ascii"), _unbase64(value)))
        else:
            metadata.append((name.decode("ascii"), value.decode("latin-1")))
    if method != b"POST" or not content_type.startswith(CONTENT_TYPE):
        raise WireError(grpc.StatusCode.UNIMPLEMENTED, "not a gRPC request (POST application/grpc)")
    return CallHeaders(path.decode("ascii", "replace"), timeout_s, tuple(metadata), encoding)


def _unbase64(value: bytes) -> bytes:
    try:
        return base64.b64decode(value + b"=" * (-len(value) % 4))
    except (binascii.Error, ValueError):
        raise WireError(grpc.StatusCode.INTERNAL, "malformed binary metadata value") from None
