"""The h2 library as the engine uses it: its configuration, a connection that refuses a
stream over the concurrency limit instead of failing the whole connection, an HPACK encoder
without Huffman coding, and grpc's peer strings."""

from __future__ import annotations

import logging
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.exceptions
import hpack

# hpack logs every header it decodes at DEBUG, values and all: a client's authorization
# metadata would reach a DEBUG gateway log. Held at INFO, whatever the root level.
logging.getLogger("hpack").setLevel(logging.INFO)

# Outbound header blocks are built only by gateway/grpc_h2/wire.py, which checks keys and values
# as gRPC defines them: h2's generic outbound validation and normalisation (a tenth of a call's
# CPU in a profile) are off. Inbound headers are still validated by h2.
H2_CONFIG = h2.config.H2Configuration(
    client_side=False,
    header_encoding=None,
    validate_outbound_headers=False,
    normalize_outbound_headers=False,
)


class RefusingH2Connection(h2.connection.H2Connection):
    """h2 answers a stream beyond SETTINGS_MAX_CONCURRENT_STREAMS with TooManyStreamsError, a
    ProtocolError: ``receive_data`` then queues GOAWAY, drops the events of the frames before it
    in the read and never decodes the block (HPACK's table would be out of step with the
    client's). RFC 9113 5.1.2 allows a stream error instead: the stream is taken in as usual (the
    block decoded, the stream id used), reset REFUSED_STREAM (which a gRPC client retries), and
    the rest of the read and the connection go on."""

    _admitting = False  # the one over-limit HEADERS frame being taken in to be refused

    @property
    def open_inbound_streams(self) -> int:
        return 0 if self._admitting else super().open_inbound_streams

    def _receive_headers_frame(self, frame: Any) -> tuple[list[Any], list[Any]]:
        # A private h2 method (4.1 to 4.4), the one place the limit is checked; h2's frame
        # dispatch table holds the bound method, so this override is what receive_data calls.
        try:
            return super()._receive_headers_frame(frame)
        except h2.exceptions.TooManyStreamsError:
            pass
        self._admitting = True
        try:
            frames, _ = super()._receive_headers_frame(frame)
        finally:
            self._admitting = False
        # The stream's events are dropped: the engine never sees a call it did not accept.
        self.reset_stream(frame.stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)
        return frames, []


class PlainEncoder(hpack.Encoder):
    """Header values without Huffman coding: a few more bytes per header block, and none of
    pure-Python Huffman's CPU (most of HPACK's time per call in a profile)."""

    def encode(self, headers: Any, huffman: bool = True) -> bytes:
        return super().encode(headers, huffman=False)


def peer_string(peername: Any) -> str:
    """grpc's peer format: ``ipv4:1.2.3.4:5678``, ``ipv6:[::1]:5678``."""
    if isinstance(peername, tuple) and len(peername) >= 2:
        host, port = peername[0], peername[1]
        return f"ipv6:[{host}]:{port}" if ":" in str(host) else f"ipv4:{host}:{port}"
    return f"unix:{peername}" if peername else ""
