"""The three calls the relay makes into the chain logic, so its own code stays unchanged.

1. :func:`enter` before routing: the loop and hop-limit check (an :class:`ApiError` 508 when
   refused), routing's exclusions, and the headers to send upstream.
2. :func:`refusal` when routing found no candidate: a 508 that says "loop" when the only
   backends left out were ones leading back along the request's path, else None.
3. :func:`stamp` once the first token is in: this hop's ``net`` and ``hop`` timing entries.

The end-of-stream merge lives with the stream (``OpenedStream.summary``), see hop_timing.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.chain.hop import ChainError, ChainErrorKind, HopContext, enter_hop
from gateway.chain.hop_timing import annotate_entries
from gateway.chain.report import DownstreamReport
from gateway.errors import ApiError
from gateway.inbound import InboundRequest
from gateway.signals.hub import SignalHub
from gateway.timing import TimingEntry
from routing.types import Decision


def enter(
    hub: SignalHub, max_hops: int, inbound: InboundRequest, headers: Mapping[str, str]
) -> tuple[HopContext, InboundRequest, dict[str, str]]:
    """This hop's context, the request with its exclusions, the headers to forward."""
    hop = enter_hop(hub.gateway_id, max_hops, headers, hub.downstream_ids())
    if isinstance(hop, ChainError):
        raise hop.api_error()
    return hop, hop.apply(inbound), hop.forward_headers(headers)


def refusal(
    decision: Decision, hop: HopContext, reports: Mapping[str, DownstreamReport], model: str
) -> ApiError | None:
    """A loop error when every backend was ruled out and some only because of the path."""
    if decision.ranked:
        return None
    path = {*hop.via, hop.gateway_id}
    looping = []
    for rejection in decision.rejected:
        report = reports.get(rejection.backend)
        if rejection.backend in hop.exclude:
            looping.append(f"{rejection.backend} leads back to a gateway on the path")
        elif (
            rejection.filter == "downstream_serves"
            and report is not None
            and path & report.forwards_to
        ):
            looping.append(
                f"{rejection.backend} (gateway {report.gateway_id}) has no way to serve it "
                "except back through a gateway on the path"
            )
    if not looping:
        return None
    route = " -> ".join((*hop.via, hop.gateway_id))
    message = (
        f"loop detected: no backend can serve model {model!r} from gateway {hop.gateway_id!r} "
        f"(path {route}) without going back along the path: {'; '.join(looping)}. "
        "Check the gateway-kind backends of these gateways for a cycle"
    )
    return ChainError(ChainErrorKind.LOOP, message).api_error()


def stamp(entries: list[TimingEntry], hop: HopContext, backend: str) -> None:
    annotate_entries(entries, hop, backend)
