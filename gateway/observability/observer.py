"""The one place a request's end is reported: its log line (and, as they land, its metrics and
span). The relay core calls it at two seams — a request that never got a first token
(:meth:`RequestObserver.open_failed`) and a request whose response is over
(:meth:`RequestObserver.finished`) — and the doors only for requests refused before they
reached the core (:meth:`RequestObserver.rejected`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.errors import ApiError
from gateway.observability.config import LoggingConfig
from gateway.observability.record import Outcome, RequestRecord, opened_line
from gateway.observability.request_log import RequestLog
from gateway.signals.outlier import FailureKind

if TYPE_CHECKING:
    from gateway.inbound import InboundRequest
    from gateway.stream import OpenedStream


def classify_finish(failure: FailureKind | None, error: str | None) -> tuple[Outcome, str | None]:
    """A finished response's outcome: a cancellation with a reason of the gateway's own (the
    deadline, a drain, a client too slow to keep up) is a failure, not the client leaving."""
    if failure is None:
        return Outcome.OK, None
    if failure is FailureKind.CANCELLED:
        return (Outcome.FAILED, error) if error else (Outcome.CANCELLED, "client_cancelled")
    return Outcome.FAILED, error or failure.value


class RequestObserver:
    def __init__(self, logging_config: LoggingConfig) -> None:
        self.log = RequestLog(logging_config)

    def configure(self, logging_config: LoggingConfig) -> None:
        """A reload's new settings, for requests that end from now on."""
        self.log.configure(logging_config)

    def start(self, inbound: InboundRequest, door: str) -> RequestRecord:
        return RequestRecord(inbound, door)

    def open_failed(self, record: RequestRecord, exc: BaseException) -> None:
        self.log.open_failed(record, exc)

    def finished(
        self,
        record: RequestRecord,
        opened: OpenedStream,
        now: float,
        failure: FailureKind | None,
        error: str | None,
    ) -> None:
        outcome, error = classify_finish(failure, error)
        if self.log.wants(record.inbound.request_id, outcome):
            self.log.write(opened_line(record, opened, now, outcome, error))

    def rejected(
        self, door: str, endpoint: str, request_id: str, err: ApiError, received_at: float
    ) -> None:
        self.log.rejected(door, endpoint, request_id, err, received_at)
