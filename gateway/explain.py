"""Explain a routing decision: every candidate, each predicted-TTFT term, its signal's age, and
why it was chosen, ranked, filtered or ejected.

``GET /v1/meridian/route?model=M&prompt=TEXT[&origin=REGION|IP][&tenant=T][&max_tokens=N]``
explains a one-message chat request; ``POST /v1/meridian/route[?origin=...]`` explains a whole
OpenAI chat or completions body. ``&api=embeddings`` (or responses, messages, ...) explains a
request to that door instead (a POSTed body is then that API's body): backends without the API
are listed as filtered (``serves_api``), exactly those the relay would not try. The profile is built by the same code as a real request
(:func:`gateway.inbound.parse_inbound`) and the live router's ``explain`` is called on the live
fleet snapshot: nothing is reserved, no learned state and no random sequence moves.

Access (there is no auth yet): the endpoint answers only clients connected from a loopback
address *and* sending no proxy headers (``X-Forwarded-For``, ``Forwarded``, ``X-Real-IP``,
``True-Client-IP``, ``CF-Connecting-IP`` and the like: ``_PROXY_HEADERS``). A
reverse proxy on the same host forwards client requests from loopback too, but it adds those
headers, so outside callers never reach it through a proxy. Everyone else gets 403. The report
carries no prompt text.

:func:`explain_report` is shared with ``meridian explain`` (which builds its own router and
hub from a config file); :func:`render_text` is the human-readable form of a report.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Mapping
from typing import Any

import orjson
from aiohttp import web

from gateway.errors import ApiError, bad_request
from gateway.fleet import FleetView
from gateway.inbound import Endpoint, parse_inbound, tenant_from
from gateway.model_names import ModelNames
from gateway.objectives import OBJECTIVE_HEADER, with_objective
from gateway.signals.forwarded import parse_ip
from gateway.signals.geo import ClientGeo
from gateway.signals.rtt_policy import believed
from gateway.state_keys import RELAY
from gateway.step_feed import step_phase
from gateway.strict_json import loads_request
from routing.predictor import CONFIGURED
from routing.types import BackendState, Candidate, Decision, PolicyRouter, RequestProfile

EXPLAIN_PATH = "/v1/meridian/route"
# Every header a proxy or CDN uses to name the client it forwards for.
_PROXY_HEADERS = (
    "X-Forwarded-For",
    "Forwarded",
    "X-Real-IP",
    "True-Client-IP",
    "CF-Connecting-IP",
    "X-Client-IP",
    "X-Cluster-Client-IP",
    "Fastly-Client-IP",
    "X-Forwarded",
    "Forwarded-For",
)

Json = dict[str, Any]


def _age(now: float, at: float | None) -> float | None:
    return None if at is None else round(max(0.0, now - at), 3)


def _term_age(age: float) -> float | str:
    return "config" if age == CONFIGURED else round(age, 3)


def _signals(state: BackendState, now: float) -> Json:
    """The raw signals behind a backend's terms, with their ages (seconds; None = never)."""
    return {
        "probe_rtt_ms": None if state.rtt_ms is None else round(state.rtt_ms, 2),
        "probe_age_s": _age(now, state.rtt_as_of),
        "running": state.running,
        "waiting": state.waiting,
        "kv_cache_usage": state.kv_cache_usage,
        "metrics_age_s": _age(now, state.metrics_as_of),
        "in_flight": state.in_flight,
        "last_traffic_age_s": _age(now, state.last_traffic_at),
        "healthy": state.healthy,
        "ejected_for_s": None
        if state.ejected_until is None or state.ejected_until <= now
        else round(state.ejected_until - now, 2),
    }


def _terms(candidate: Candidate) -> Json:
    return {
        name: {
            "ms": round(ms, 3),
            "spread_ms": round(candidate.term_spread_ms.get(name, 0.0), 3),
            "age_s": _term_age(candidate.term_age_s.get(name, CONFIGURED)),
        }
        for name, ms in candidate.terms_ms.items()
    }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _candidate(rank: int, candidate: Candidate, state: BackendState | None, now: float) -> Json:
    spec = state.spec if state is not None else None
    return {
        "rank": rank,
        "backend": candidate.backend,
        "region": spec.region if spec is not None else None,
        "kind": spec.kind.value if spec is not None else None,
        "chosen": rank == 1,
        "score": _rounded(candidate.score),
        "predicted_ttft_ms": _rounded(candidate.predicted_ttft_ms),
        "predicted_ttft_p90_ms": _rounded(candidate.predicted_ttft_p90_ms),
        "predicted_e2e_ms": _rounded(candidate.predicted_e2e_ms),
        "cached_tokens": candidate.cached_tokens,
        "expected_cost": candidate.expected_cost,
        "terms": _terms(candidate),
        "signals": None if state is None else _signals(state, now),
        "rtt_believed": believed(candidate.terms_ms, state),
        "why": candidate.reason,
    }


def _origin(geo: ClientGeo | None, requested: str | None) -> Json:
    if geo is None:
        return {"region": requested, "source": "given"}
    return {
        "region": geo.origin,
        "source": geo.source.value,
        "country": geo.country,
        "continent": geo.continent,
        "region_rtt_ms": {k: round(v, 1) for k, v in sorted(geo.region_rtt_ms.items())},
        "reason": geo.reason,
    }


def explain_report(
    router: PolicyRouter,
    fleet: FleetView,
    profile: RequestProfile,
    geo: ClientGeo | None,
    now: float | None = None,
) -> Json:
    """A JSON-able explanation of how ``router`` would route ``profile`` right now."""
    now = time.monotonic() if now is None else now
    snapshot = fleet.snapshot()
    decision: Decision = router.explain(profile, snapshot, now)
    health = fleet.health()
    states = snapshot.backends
    filtered = []
    for rejection in decision.rejected:
        state = states.get(rejection.backend)
        entry: Json = {"backend": rejection.backend, "filter": rejection.filter}
        entry["why"] = rejection.reason
        entry["signals"] = None if state is None else _signals(state, now)
        filtered.append(entry)
    return {
        "policy": decision.policy,
        "model": profile.model,
        "tenant": profile.tenant,
        "gateway_region": snapshot.gateway_region,
        "origin": _origin(geo, profile.origin),
        "profile": {
            "api": profile.api,
            "prompt_tokens": profile.prompt_tokens,
            "prefix_blocks": len(profile.prefix_hashes),
            "max_tokens": profile.max_tokens,
            "latency_class": profile.latency_class.value,
            "ttft_objective_ms": profile.ttft_objective_ms,
            "objective_class": profile.objective_class,
            "allowed_regions": None
            if profile.allowed_regions is None
            else sorted(profile.allowed_regions),
        },
        "snapshot_age_s": _age(now, snapshot.taken_at),
        "panic": health.panic,
        "ejected": sorted(health.ejected_until),
        "chosen": decision.chosen.backend if decision.chosen else None,
        "candidates": [
            _candidate(rank, c, states.get(c.backend), now)
            | {"step_phase": step_phase(router, c.backend, now)}  # routing.step_clock's wait
            for rank, c in enumerate(decision.ranked, start=1)
        ],
        "filtered": filtered,
        "note": decision.note,
        "explored": decision.explored,  # the chosen one would be re-measuring old evidence
    }


# -- building the request to explain ---------------------------------------------------------


def known_regions(fleet: FleetView, configured: list[str]) -> set[str]:
    regions = set(configured)
    regions.update(s.spec.region for s in fleet.snapshot().backends.values())
    return regions


def resolve_origin(
    fleet: FleetView, origin: str | None, regions: set[str]
) -> tuple[str | None, ClientGeo | None]:
    """``origin`` as a region name, or an address to locate with GeoIP; None: unknown."""
    if origin is None:
        geo = fleet.locate(None, None)
        return geo.origin, geo
    if origin in regions:
        return origin, None
    address = parse_ip(origin)
    if address is None:
        known = ", ".join(sorted(regions))
        raise bad_request(f"'origin' must be a region ({known}) or an IP address", "origin")
    geo = fleet.locate(str(address), None)
    return geo.origin, geo


def endpoint_named(api: str | None) -> Endpoint | None:
    """The door an explanation is asked for (``api``: chat, completions, embeddings, ...)."""
    if api is None:
        return None
    try:
        return Endpoint(api)
    except ValueError:
        known = ", ".join(e.value for e in Endpoint)
        raise bad_request(f"'api' must be one of {known}", "api") from None


def body_from_prompt(
    model: str, prompt: str, max_tokens: int | None, endpoint: Endpoint | None = None
) -> bytes:
    """A one-message request for ``endpoint``'s API (chat when None)."""
    body: Json = {"model": model}
    if endpoint in (Endpoint.EMBEDDINGS, Endpoint.RESPONSES):
        body["input"] = prompt
    elif endpoint is Endpoint.COMPLETIONS:
        body["prompt"] = prompt
    else:
        body["messages"] = [{"role": "user", "content": prompt}]
    if endpoint is Endpoint.MESSAGES:
        body["max_tokens"] = max_tokens or 1  # required by the Messages API
    elif endpoint is Endpoint.RESPONSES and max_tokens is not None:
        body["max_output_tokens"] = max_tokens
    elif endpoint is not Endpoint.EMBEDDINGS and max_tokens is not None:
        body["max_tokens"] = max_tokens
    return orjson.dumps(body)


def endpoint_of(body: bytes) -> Endpoint:
    payload = loads_request(body)  # the same strict parse as a real request
    if isinstance(payload, Mapping) and "prompt" in payload and "messages" not in payload:
        return Endpoint.COMPLETIONS
    return Endpoint.CHAT


def build_profile(
    body: bytes,
    tenant: str,
    origin: str | None,
    known_models: ModelNames | frozenset[str],
    endpoint: Endpoint | None = None,
) -> RequestProfile:
    """The profile a real request with this body would get at ``endpoint``'s door (inferred
    as chat or completions when None); it carries the API, so the explanation filters out
    backends without it, as the relay does."""
    inbound = parse_inbound(
        endpoint or endpoint_of(body),
        body,
        request_id="explain",
        tenant=tenant,
        origin=origin,
        known_models=known_models,
        received_at=time.perf_counter(),
    )
    return inbound.profile


# -- HTTP ------------------------------------------------------------------------------------


def _is_local_admin(request: web.Request) -> bool:
    if any(name in request.headers for name in _PROXY_HEADERS):
        return False
    peer = parse_ip(request.remote)
    return isinstance(peer, ipaddress.IPv4Address | ipaddress.IPv6Address) and peer.is_loopback


def _query_int(request: web.Request, key: str) -> int | None:
    raw = request.query.get(key)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise bad_request(f"'{key}' must be an integer", key) from None
    if value < 1:
        raise bad_request(f"'{key}' must be a positive integer", key)
    return value


async def _request_body(request: web.Request, endpoint: Endpoint | None) -> bytes:
    if request.method == "POST":
        return await request.read()
    model, prompt = request.query.get("model"), request.query.get("prompt")
    if not model:
        raise bad_request("'model' query parameter is required", "model")
    if prompt is None:
        raise bad_request("'prompt' query parameter is required (or POST a request body)", "prompt")
    return body_from_prompt(model, prompt, _query_int(request, "max_tokens"), endpoint)


async def explain_route(request: web.Request) -> web.Response:
    if not _is_local_admin(request):
        raise ApiError(
            403,
            "route explanations are served only to loopback clients without proxy headers",
            "permission_error",
            "admin_only",
        )
    relay = request.app[RELAY]
    config = relay.config  # the current one: a reload swaps it
    router: PolicyRouter = relay.router
    regions = known_regions(relay.fleet, [r.name for r in config.regions])
    origin, geo = resolve_origin(relay.fleet, request.query.get("origin"), regions)
    tenant = tenant_from(request.query.get("tenant") or request.headers.get("X-Meridian-Tenant"))
    endpoint = endpoint_named(request.query.get("api"))
    body = await _request_body(request, endpoint)
    profile = relay.place(build_profile(body, tenant, origin, relay.known_models, endpoint))
    header = request.headers.get(OBJECTIVE_HEADER)
    profile = with_objective(profile, config.objectives, header)
    report = explain_report(router, relay.fleet, profile, geo)
    return web.Response(
        body=orjson.dumps(report, option=orjson.OPT_INDENT_2),
        content_type="application/json",
        headers={"Cache-Control": "no-store"},
    )


def add_explain_routes(app: web.Application) -> None:
    app.router.add_get(EXPLAIN_PATH, explain_route)
    app.router.add_post(EXPLAIN_PATH, explain_route)
