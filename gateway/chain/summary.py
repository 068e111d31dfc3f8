"""``GET /v1/meridian/summary``: what this gateway can offer the gateways that forward to it.

Per model: the predicted TTFT of the backend this gateway would choose for a request with
nothing to prefill (the live router's ``explain`` on a synthetic profile and the live fleet
snapshot: nothing is reserved, no learned state moves), and the gateways that figure passes
through. A caller names itself (``?via=<id>``, or the ``X-Meridian-Via`` header): backends
leading back to a caller are left out, so two gateways that forward to each other never report
each other's figures in a circle. Answers are reused for ``chain.summary_cache_s``.

The report holds model names, predictions, gateway ids and the region: no backend names and
nothing about any request, so remote gateways may read it without the loopback restriction of
the explain endpoint.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from aiohttp import web

from gateway.chain.hop import VIA_HEADER, parse_via
from gateway.chain.report import SUMMARY_PATH, DownstreamReport, GatewaySummary, ModelSummary
from gateway.state_keys import RELAY
from routing.types import BackendKind, FleetSnapshot, PolicyRouter, RequestProfile

_MAX_CACHED = 64  # distinct caller sets remembered (there are as many as upstream gateways)


def build_summary(
    router: PolicyRouter,
    snapshot: FleetSnapshot,
    now: float,
    *,
    models: Iterable[str],
    gateway_id: str,
    downstream: Mapping[str, DownstreamReport],
    downstream_ids: Mapping[str, str],
    callers: frozenset[str] = frozenset(),
) -> GatewaySummary:
    """The summary as seen by ``callers`` (gateway ids the answer must not lead back to).
    ``downstream`` holds the current reports of gateway-kind backends, ``downstream_ids``
    every remote id ever learned (a stale report still says where a backend leads)."""
    avoid = callers | {gateway_id}
    exclude = frozenset(name for name, remote in downstream_ids.items() if remote in avoid)
    entries: dict[str, ModelSummary] = {}
    for model in models:
        decision = router.explain(RequestProfile(model=model, exclude=exclude), snapshot, now)
        chosen = decision.chosen
        if chosen is None:
            continue
        state = snapshot.backends.get(chosen.backend)
        report = downstream.get(chosen.backend)
        via: tuple[str, ...] = ()
        if state is not None and state.spec.kind is BackendKind.GATEWAY and report is not None:
            via = report.paths.get(model, (report.gateway_id,))
        entries[model] = ModelSummary(
            ttft_ms=_rounded(chosen.predicted_ttft_ms),
            ttft_p90_ms=_rounded(chosen.predicted_ttft_p90_ms),
            path=[gateway_id, *via],
        )
    return GatewaySummary(
        gateway=gateway_id,
        region=snapshot.gateway_region,
        models=entries,
        forwards_to=sorted(set(downstream_ids.values())),
    )


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


@dataclass
class SummaryCache:
    entries: dict[tuple[int, frozenset[str]], tuple[float, bytes]] = field(default_factory=dict)

    def get(self, key: tuple[int, frozenset[str]], now: float, max_age_s: float) -> bytes | None:
        hit = self.entries.get(key)
        return hit[1] if hit is not None and now - hit[0] < max_age_s else None

    def put(self, key: tuple[int, frozenset[str]], now: float, body: bytes) -> None:
        if len(self.entries) >= _MAX_CACHED:
            self.entries.clear()
        self.entries[key] = (now, body)


SUMMARY_CACHE = web.AppKey("meridian_summary_cache", SummaryCache)


def _callers(request: web.Request) -> frozenset[str]:
    named = parse_via(request.query.get("via")) + parse_via(request.headers.get(VIA_HEADER))
    return frozenset(named)


async def summary_endpoint(request: web.Request) -> web.Response:
    relay = request.app[RELAY]
    hub, config = relay.fleet, relay.config
    callers = _callers(request)
    now = time.monotonic()
    # The relay state is part of the key: a reload (new router, hub, config) starts afresh.
    key = (id(relay.state), callers)
    max_age_s = hub.chain.summary_cache_s
    body = request.app[SUMMARY_CACHE].get(key, now, max_age_s)
    if body is None:
        summary = build_summary(
            relay.router,
            hub.snapshot(),
            now,
            models=config.models(),
            gateway_id=hub.gateway_id,
            downstream=hub.downstream_reports(),
            downstream_ids=hub.downstream_ids(),
            callers=callers,
        )
        summary = summary.model_copy(update={"max_age_s": max_age_s})
        body = summary.model_dump_json().encode()
        request.app[SUMMARY_CACHE].put(key, now, body)
    return web.Response(body=body, content_type="application/json")


def add_chain_routes(app: web.Application) -> None:
    """Register the summary endpoint (call once, from ``gateway.app.build_app``)."""
    app[SUMMARY_CACHE] = SummaryCache()
    app.router.add_get(SUMMARY_PATH, summary_endpoint)
