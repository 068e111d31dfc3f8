"""A request's bookkeeping once an attempt produced its first token: where it went
(:class:`RouteInfo`), its timing entries, what routing predicted and learned, what it holds,
and its end-of-stream summary; the upstream bytes and events are its
:class:`~gateway.stream.UpstreamExchange`'s."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gateway.chain.hop_timing import TIMING_HEADER, hops_from_header, merge_summary
from gateway.stream import UpstreamExchange
from gateway.timing import TimingEntry, label_hop
from routing.types import BackendSpec

if TYPE_CHECKING:
    from gateway.chain.hop import HopContext
    from gateway.lifecycle.handles import RequestHold, UpstreamHold
    from gateway.observability.record import RequestRecord
    from gateway.relay_state import RelayState


@dataclass(frozen=True, slots=True)
class RouteInfo:
    backend: str
    region: str
    kind: str
    attempts: int
    predicted_ttft_ms: float | None = None
    hedges: int = 0  # of the attempts, how many were hedges (started while another ran)

    def header(self) -> str:
        text = (
            f"region={self.region}; backend={self.backend}; kind={self.kind}; "
            f"attempts={self.attempts}"
        )
        if self.hedges:
            text += f"; hedges={self.hedges}"
        if self.predicted_ttft_ms is not None:
            text += f"; predicted_ttft_ms={self.predicted_ttft_ms:.1f}"
        return text


@dataclass(slots=True)
class OpenedStream:
    """A request's bookkeeping once an attempt produced its first token: where it went, its
    timing entries up to then, what routing predicted and learned, what it holds; the
    upstream :class:`UpstreamExchange` it relays is ``exchange``."""

    spec: BackendSpec
    route: RouteInfo
    exchange: UpstreamExchange
    entries: list[TimingEntry]  # this hop's timing up to the first token, hop entries included
    upstream_ttfb_ms: float | None = None  # request sent -> first token: the backend's share
    upstream_read_lag_ms: float = 0.0  # the token's wait unread for a busy loop: the gateway's
    first_token_observed: bool = False  # routing already learned this request's TTFT
    predicted_terms_ms: Mapping[str, float] = field(default_factory=dict)
    state: RelayState | None = None  # the relay state the request started on
    held: RequestHold | None = None  # active count, drain membership, admission: Relay.finish
    upstream_hold: UpstreamHold | None = None  # the winning attempt's counts: Relay.finish
    hop: HopContext | None = None  # this gateway's place in a chain (gateway/chain)
    record: RequestRecord | None = None  # what the request log, metrics and span report
    # Bookkeeping that need not delay the first byte out (first-token learning, TTFT metrics):
    # Relay.open schedules it for the loop's next turn, Relay.finish runs whatever is left.
    after_first_byte: list[Callable[[], None]] = field(default_factory=list)

    def catch_up(self) -> None:
        """Run the bookkeeping deferred past the first byte: each item once, in order."""
        work, self.after_first_byte = self.after_first_byte, []
        for item in work:
            item()

    def summary(self, now: float) -> dict[str, Any]:
        """End-of-stream timing, the JSON carried by the final SSE comment line."""
        x = self.exchange
        p50, p99, worst = x.stats.itl_percentiles()
        ttft = (
            (x.stats.first_token_at - x.stats.started_at) * 1000.0
            if x.stats.first_token_at is not None
            else None
        )
        own = {
            "backend": self.route.backend,
            "region": self.route.region,
            "attempts": self.route.attempts,
            "ttft_ms": _round(ttft),
            "itl_p50_ms": _round(p50),
            "itl_p99_ms": _round(p99),
            "itl_max_ms": _round(worst),
            "output_tokens": x.output_tokens(),
            "e2e_ms": _round((now - x.stats.started_at) * 1000.0),
        }
        if x.backend_timing:  # what the backend says its time went to, labelled as its hop
            own["upstream_timing"] = {
                entry.name: entry.dur_ms
                for entry in label_hop(x.backend_timing, self.route.backend)
                if entry.dur_ms is not None
            }
        downstream = x.downstream_hops
        if x.body is not None:  # non-streaming: the next gateway's summary is a header
            downstream = hops_from_header(x.response.headers.get(TIMING_HEADER))
        return merge_summary(own, self.hop, downstream)

    def close(self) -> None:
        self.exchange.close()


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
