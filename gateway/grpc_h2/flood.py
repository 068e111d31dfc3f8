"""Bounds on the work an HTTP/2 client can make the h2 engine do without asking for a response:
the floods grpc-core's transport also refuses (the grpcio engine's defaults). A connection over
a bound is closed with GOAWAY ENHANCE_YOUR_CALM, its calls cancelled and their upstreams with
them (:meth:`gateway.grpc_h2.connection.GrpcConnection.calm_down`).

- **PING** (gRPC's keepalive enforcement, proposal A8, with grpc-core's server defaults): a PING
  sooner than ``min_ping_interval_s`` after the last one, with no HEADERS or DATA sent to the
  client in between, is a strike; more than ``max_ping_strikes`` strikes close the connection
  ("too_many_pings"). The BDP pings a gRPC client sends as our DATA arrives, and keepalive pings
  at the interval gRPC allows, are never strikes.
- **SETTINGS**: each must be acknowledged. A client has ``settings_burst`` of them, and one more
  every ``settings_refill_s``.
- **Rapid reset** (CVE-2023-44487): a stream the client resets before its call ended still cost
  a task, the call's checks, perhaps an upstream request started for nobody, and it frees its
  concurrency slot at once. Once ``reset_check_streams`` streams were opened on a connection,
  one where the client reset more than half of them is closed (Envoy's premature-reset rule).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FloodLimits:
    min_ping_interval_s: float = 300.0  # grpc-core's min_recv_ping_interval_without_data_ms
    max_ping_strikes: int = 2  # grpc-core's grpc.http2.max_ping_strikes
    settings_burst: int = 16
    settings_refill_s: float = 1.0
    reset_check_streams: int = 500  # Envoy's premature_reset_total_stream_count


class FloodGuard:
    """One connection's counts. Each ``on_*`` returns why the connection must close, or None."""

    __slots__ = (
        "_last_ping_at",
        "_limits",
        "_opened",
        "_ping_strikes",
        "_resets",
        "_settings_at",
        "_settings_tokens",
    )

    def __init__(self, limits: FloodLimits, now: float) -> None:
        self._limits = limits
        self._ping_strikes = 0
        self._last_ping_at: float | None = None  # None: none since we last sent HEADERS/DATA
        self._settings_tokens = float(limits.settings_burst)
        self._settings_at = now
        self._opened = 0
        self._resets = 0

    def on_sent(self) -> None:
        """We sent HEADERS or DATA: the client's next PING is not a strike (grpc-core resets
        its ping clock the same way)."""
        self._ping_strikes = 0
        self._last_ping_at = None

    def on_ping(self, now: float) -> str | None:
        last, self._last_ping_at = self._last_ping_at, now
        if last is not None and now - last < self._limits.min_ping_interval_s:
            self._ping_strikes += 1
            if self._ping_strikes > self._limits.max_ping_strikes:
                return "too_many_pings"
        return None

    def on_settings(self, now: float) -> str | None:
        limits = self._limits
        refilled = (now - self._settings_at) / limits.settings_refill_s
        self._settings_tokens = min(float(limits.settings_burst), self._settings_tokens + refilled)
        self._settings_at = now
        if self._settings_tokens < 1.0:
            return "too_many_settings"
        self._settings_tokens -= 1.0
        return None

    def on_stream_opened(self) -> None:
        self._opened += 1

    def on_client_reset(self) -> str | None:
        """The client reset a stream whose call had not ended."""
        self._resets += 1
        if self._opened >= self._limits.reset_check_streams and 2 * self._resets > self._opened:
            return "too_many_resets"
        return None
