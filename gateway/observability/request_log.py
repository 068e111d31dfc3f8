"""The request log: one structured line per request, when it ends.

Every request that reached a door gets exactly one line on the ``meridian.request`` logger —
succeeded, failed before its first token, broke mid-stream, or was cancelled — unless the
operator turned the log off (``logging.requests: false``) or sampled it down
(``logging.sample_rate``: successes only; failures and cancellations are always written).
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from typing import Any

from gateway.errors import ApiError
from gateway.observability.config import LoggingConfig
from gateway.observability.log_format import FIELDS_ATTR
from gateway.observability.record import CLIENT_CLOSED_STATUS, Outcome
from routing.types import RequestProfile

_requests = logging.getLogger("meridian.request")
_SAMPLE_SPACE = 1 << 32


def classify_open_error(exc: BaseException) -> tuple[int, str, Outcome]:
    """Status, error kind and outcome of a request that ended before its first token."""
    if isinstance(exc, ApiError):
        return exc.status, exc.code or exc.type, Outcome.FAILED
    if isinstance(exc, asyncio.CancelledError):
        return CLIENT_CLOSED_STATUS, "client_cancelled", Outcome.CANCELLED
    return 500, "internal_error", Outcome.FAILED


class RequestLog:
    def __init__(self, config: LoggingConfig) -> None:
        self.configure(config)

    def configure(self, config: LoggingConfig) -> None:
        self.enabled = config.requests
        self.prefix_hashes = config.prefix_hashes
        self._threshold = int(config.sample_rate * _SAMPLE_SPACE)

    def wants(self, request_id: str, outcome: Outcome) -> bool:
        """Whether this request gets a line; cheap enough to ask before building it."""
        if not self.enabled or not _requests.isEnabledFor(logging.INFO):
            return False
        if outcome is not Outcome.OK or self._threshold >= _SAMPLE_SPACE:
            return True
        return zlib.crc32(request_id.encode()) < self._threshold

    def write(self, line: dict[str, Any]) -> None:
        _requests.info("request", extra={FIELDS_ATTR: line})

    def write_routed(self, line: dict[str, Any], profile: RequestProfile) -> None:
        """A routed request's line, with its prefix block hashes when configured (the trace
        format's ``prefix_hashes``: loadtests/sim/replay_import.py reads them)."""
        if self.prefix_hashes and profile.prefix_hashes:
            line["prefix_hashes"] = [f"{h:016x}" for h in profile.prefix_hashes]
            line["prefix_block_tokens"] = profile.block_tokens
        self.write(line)

    def rejected(
        self, door: str, endpoint: str, request_id: str, err: ApiError, received_at: float
    ) -> None:
        """A request refused before it was parsed far enough to have a model (bad JSON, an
        unknown model, a body too large)."""
        if not self.wants(request_id, Outcome.FAILED):
            return
        self.write(
            {
                "request_id": request_id,
                "door": door,
                "endpoint": endpoint,
                "e2e_ms": round((time.perf_counter() - received_at) * 1000.0, 3),
                "status": err.status,
                "outcome": Outcome.FAILED.value,
                "error": err.code or err.type,
            }
        )
