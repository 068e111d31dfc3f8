"""The one place a request's life is reported: its log line, its metric updates and its span
tree. The relay core calls it at its seams — the first token
(:meth:`RequestObserver.opened`), a request that never got one
(:meth:`RequestObserver.open_failed`), and a request whose response is over
(:meth:`RequestObserver.finished`) — and the doors only for requests refused before they
reached the core (:meth:`RequestObserver.rejected`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from gateway.errors import ApiError
from gateway.metrics import GatewayMetrics
from gateway.observability.labels import OTHER
from gateway.observability.metrics_update import MetricsUpdate
from gateway.observability.record import Outcome, RequestRecord, failed_line, opened_line
from gateway.observability.request_log import RequestLog, classify_open_error
from gateway.observability.spans import SpanTree
from gateway.observability.tracing import Tracing
from gateway.signals.outlier import FailureKind

if TYPE_CHECKING:
    from gateway.chain.hop import HopContext
    from gateway.config import GatewayConfig
    from gateway.inbound import InboundRequest
    from gateway.opened_stream import OpenedStream


def classify_finish(failure: FailureKind | None, error: str | None) -> tuple[Outcome, str | None]:
    """A finished response's outcome: a cancellation with a reason of the gateway's own (the
    deadline, a drain, a client too slow to keep up) is a failure, not the client leaving."""
    if failure is None:
        return Outcome.OK, None
    if failure is FailureKind.CANCELLED:
        return (Outcome.FAILED, error) if error else (Outcome.CANCELLED, "client_cancelled")
    return Outcome.FAILED, error or failure.value


class RequestObserver:
    def __init__(self, config: GatewayConfig, metrics: GatewayMetrics) -> None:
        self.log = RequestLog(config.logging)
        self.metrics = MetricsUpdate(config, metrics)
        self.tracing = Tracing(config.tracing, config.chain.id)
        self.spans = SpanTree(self.tracing)

    def configure(self, config: GatewayConfig) -> None:
        """A reload's new settings, for requests that end from now on (tracing keeps the
        exporter it started with: changing it needs a restart)."""
        self.log.configure(config.logging)
        self.metrics.configure(config)

    def start(self, inbound: InboundRequest, door: str) -> RequestRecord:
        return RequestRecord(inbound, door)

    def enter(self, hop: HopContext, forward: dict[str, str]) -> HopContext:
        """This hop's trace context, sampled by this gateway when it starts the trace."""
        return self.tracing.enter(hop, forward)

    def opened(self, record: RequestRecord, opened: OpenedStream) -> None:
        self.metrics.first_token(record, opened)

    def open_failed(self, record: RequestRecord, exc: BaseException) -> None:
        status, error, outcome = classify_open_error(exc)
        self.metrics.ended(record, None, time.perf_counter(), outcome)
        if self.log.wants(record.inbound.request_id, outcome):
            self.log.write(failed_line(record, status, error, outcome))
        if self.tracing.processor is not None:
            self.spans.failed(record, status, error, outcome)

    def finished(
        self,
        record: RequestRecord,
        opened: OpenedStream,
        now: float,
        failure: FailureKind | None,
        error: str | None,
    ) -> None:
        outcome, error = classify_finish(failure, error)
        self.metrics.ended(record, opened, now, outcome)
        if self.log.wants(record.inbound.request_id, outcome):
            self.log.write_routed(
                opened_line(record, opened, now, outcome, error), record.inbound.profile
            )
        if self.tracing.processor is not None:
            self.spans.opened(record, opened, now, outcome, error)

    def rejected(
        self, door: str, endpoint: str, request_id: str, err: ApiError, received_at: float
    ) -> None:
        self.metrics.rejected(OTHER, door)
        self.log.rejected(door, endpoint, request_id, err, received_at)
