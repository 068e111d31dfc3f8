"""The h2 engine's bounds: message sizes (as grpc.aio's channel options), and how long a client
may keep a call waiting on its own bytes (every read of the client and every wait for its
flow-control window has a timeout, so a silent client cannot hold a task or an upstream)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from gateway.grpc_h2.flood import FloodLimits

MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class LifetimeLimits:
    """A connection's age and idleness (gateway/grpc_h2/lifetime.py; grpc.aio's
    ``grpc.max_connection_*`` options)."""

    # Close gracefully this long (+-10%) after the connection opened; None: never.
    max_age_s: float | None = None
    # Calls still running this long after the last stream was named end UNAVAILABLE and the
    # connection closes; None: they run to their end.
    age_grace_s: float | None = None
    # Close gracefully once no call has been open for this long; None: never.
    max_idle_s: float | None = None


@dataclass(frozen=True, slots=True)
class H2Limits:
    max_receive_message_bytes: int = 4 * MiB
    max_send_message_bytes: int = 16 * MiB
    # The client's next request bytes (a unary request's message, a streaming request's next
    # message) must come within this; else the call ends CANCELLED.
    read_timeout_s: float = 30.0
    # A response blocked by the client's flow-control window or a full socket buffer for
    # this long is reset (RST_STREAM CANCEL): the client stopped reading. (For both, time the
    # gateway's own loop was too busy to look is given back first: gateway/lag_timeout.py.)
    write_stall_timeout_s: float = 60.0
    # A connection must send the HTTP/2 preface and its SETTINGS within this.
    handshake_timeout_s: float = 10.0
    max_concurrent_streams: int = 1000
    # Keepalive (as grpc.aio's keepalive_time_ms): a PING after this long without a byte from
    # the client; no answer within keepalive_timeout_s and the connection is closed (its calls
    # cancelled, their upstreams with them): a peer that vanished without a FIN.
    keepalive_time_s: float = 30.0
    keepalive_timeout_s: float = 20.0
    # What a client may make us do without asking for a response (PINGs, SETTINGS, resets).
    flood: FloodLimits = field(default_factory=FloodLimits)
    # How long a connection lives and idles before a graceful GOAWAY (gRPC A9).
    lifetime: LifetimeLimits = field(default_factory=LifetimeLimits)


# Why the server closed a connection itself (``H2GrpcServer.closed``, a metric's label): the
# flood bounds (gateway/grpc_h2/flood.py), its lifetime (gateway/grpc_h2/lifetime.py), a peer
# that broke the protocol, sent no preface in time or stopped answering keepalive PINGs.
CLOSE_REASONS = (
    "too_many_pings",
    "too_many_settings",
    "too_many_resets",
    "max_age",
    "max_idle",
    "protocol_error",
    "no_handshake",
    "keepalive_timeout",
)


class ConnectionCaps(Protocol):
    """The HTTP door's connection caps (``gateway.http_socket.policy.DoorPolicy``): the gRPC
    listener's connections count against the same total and per-client limits, so a client
    cannot spend the process's file descriptors through the port that has none. grpc.aio takes
    only the total, as its own count (``grpc.max_allowed_incoming_connections``)."""

    max_connections: int

    def admit(self, client: str, local_port: int | str | None) -> bool: ...

    def release(self, client: str) -> None: ...
