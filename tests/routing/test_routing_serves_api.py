"""``serves_api``: a request names the API (door) it came in by and only backends that answer
that API are candidates; a request that names none, or a backend that lists none, is not
filtered. Explain and decide share the filter, so they agree."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from routing.fleet_view import build_view
from routing.inflight import InFlightLedger
from routing.load import LoadColumns
from routing.pipeline.filters import FilterContext, ServesApi
from routing.policies import build_router
from routing.types import RequestProfile
from tests.routing.routing_fixtures import fleet, profile, state

APIS = ("chat", "completions", "embeddings", "responses", "messages")
SNAPSHOT = fleet(
    state("any"),  # lists no APIs: every one
    state("chat-only", spec_kwargs={"apis": frozenset({"chat", "messages"})}),
    state("embedder", spec_kwargs={"apis": frozenset({"embeddings"})}),
)


def _ctx(prof: RequestProfile) -> FilterContext:
    view = build_view(SNAPSHOT)
    load = LoadColumns(InFlightLedger())
    load.bind(view, 10.0)
    return FilterContext(view, prof, 10.0, load)


def test_no_api_named_filters_nobody() -> None:
    assert ServesApi().keep(_ctx(profile())) is None


def test_backends_without_the_api_are_rejected_with_a_reason() -> None:
    ctx = _ctx(profile(api="embeddings"))
    keep = ServesApi().keep(ctx)
    assert keep is not None
    assert {ctx.view.names[i] for i in np.flatnonzero(keep)} == {"any", "embedder"}
    row = ctx.view.index["chat-only"]
    assert ServesApi().reason(ctx, row) == "does not serve the 'embeddings' API"


@given(st.sampled_from(APIS))
def test_decide_and_explain_name_the_same_backends(api: str) -> None:
    router = build_router("predicted_ttft", {}, 0)
    prof = profile(api=api)
    served = {n for n, s in SNAPSHOT.backends.items() if s.spec.apis is None or api in s.spec.apis}
    explained = router.explain(prof, SNAPSHOT, 10.0)
    assert {c.backend for c in explained.ranked} == served
    assert {r.backend for r in explained.rejected if r.filter == "serves_api"} == (
        set(SNAPSHOT.backends) - served
    )
    decided = router.decide(prof, SNAPSHOT, 10.0)
    assert {c.backend for c in decided.ranked} <= served and decided.chosen is not None
