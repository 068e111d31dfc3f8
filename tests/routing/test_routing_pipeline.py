"""Unit tests of the pipeline plugins: filters, pickers, in-flight accounting."""

from __future__ import annotations

import random

import numpy as np
import pytest

from routing.fleet_view import build_view
from routing.inflight import InFlightLedger
from routing.load import LoadColumns
from routing.pipeline.filters import (
    CapacityLeft,
    CircuitClosed,
    FilterContext,
    Healthy,
    NotExcluded,
    RegionAllowed,
    ServesModel,
    apply_filters,
    default_filters,
)
from routing.pipeline.pickers import BestPicker, MarginPicker
from routing.pipeline.router import PipelineRouter
from routing.policies import build_router
from routing.policies.least_loaded import InFlightScorer
from routing.types import Observation
from tests.routing.routing_fixtures import fleet, profile, state


def ctx_for(snapshot, prof=None, now=10.0, ledger=None) -> FilterContext:
    view = build_view(snapshot)
    load = LoadColumns(ledger or InFlightLedger())
    load.bind(view, now)
    return FilterContext(view, prof or profile(), now, load)


SNAPSHOT = fleet(
    state("ok", region="eu", running=1, waiting=0),
    state("other-model", spec_kwargs={"models": frozenset({"x"})}),
    state("sick", healthy=False),
    state("ejected", ejected_until=20.0),
    state("readmitted", ejected_until=5.0),
    state("open", circuit_open=True),
    state("full", spec_kwargs={"max_num_seqs": 2}, running=2, waiting=8),
    state("busy-local", spec_kwargs={"max_num_seqs": 1}, in_flight=5),
)


@pytest.mark.parametrize(
    ("filt", "rejects", "reason"),
    [
        (ServesModel(), {"other-model"}, "does not serve model 'm'"),
        (Healthy(), {"sick", "ejected"}, None),
        (CircuitClosed(), {"open"}, "circuit breaker open"),
        (
            CapacityLeft(4.0),
            {"full", "busy-local"},
            "no capacity left: 10 requests running or queued, limit 10",
        ),
        (NotExcluded(), set(), None),
        (RegionAllowed(), set(), None),
    ],
)
def test_each_filter(filt, rejects, reason) -> None:
    ctx = ctx_for(SNAPSHOT)
    keep = filt.keep(ctx)
    if keep is None:  # this filter rejects nobody for this request
        keep = np.ones(len(ctx.view), np.bool_)
    assert {ctx.view.names[i] for i in np.flatnonzero(~keep)} == rejects
    if reason is not None:
        row = ctx.view.index[sorted(rejects)[-1]]
        assert filt.reason(ctx, row) == reason


def test_health_reasons_distinguish_ejection() -> None:
    ctx = ctx_for(SNAPSHOT)
    assert (
        Healthy().reason(ctx, ctx.view.index["ejected"])
        == "ejected as an outlier for another 10.0 s"
    )
    assert Healthy().reason(ctx, ctx.view.index["sick"]) == "failing health checks"


def test_exclusion_and_residency() -> None:
    prof = profile(exclude=frozenset({"ok", "not-in-fleet"}), allowed_regions=frozenset({"eu"}))
    ctx = ctx_for(SNAPSHOT, prof)
    keep = NotExcluded().keep(ctx)
    assert keep is not None and not keep[ctx.view.index["ok"]] and keep.sum() == len(keep) - 1
    assert NotExcluded().reason(ctx, ctx.view.index["ok"]) == (
        "'ok' is in this request's exclude list: the request already passed through it "
        "(a loop between gateways) or it already failed this request"
    )
    region = RegionAllowed().keep(ctx)
    assert region.sum() == 1 and region[ctx.view.index["ok"]]
    assert (
        RegionAllowed().reason(ctx, ctx.view.index["sick"])
        == "region 'r1' not allowed for this request (eu)"
    )


def test_static_filter_results_are_reused_per_snapshot_and_key() -> None:
    ctx = ctx_for(SNAPSHOT)
    rows, rejected = apply_filters(default_filters(), ctx)
    assert [ctx.view.names[r] for r in rows] == ["ok", "readmitted"]
    static = [k for k in ctx.view.memo if isinstance(k, tuple) and k[0] == "static-filters"]
    assert len(rejected) == 6 and len(static) == 1
    apply_filters(default_filters(), ctx)
    apply_filters(default_filters(), ctx_for(SNAPSHOT, profile(model="x")))
    assert [k for k in ctx.view.memo if isinstance(k, tuple) and k[0] == "static-filters"] == static


def test_pickers() -> None:
    rng = random.Random(0)
    assert BestPicker().pick(np.array([3.0, 1.0, 2.0]), rng) == (1, 1)
    picks = {BestPicker().pick(np.array([1.0, 1.0, 2.0]), rng)[0] for _ in range(30)}
    assert picks == {0, 1}
    margin = MarginPicker(abs_margin=1.0, rel_margin=0.1)
    assert margin.pick(np.array([10.0, 30.0]), rng) == (0, 1)
    drawn = {margin.pick(np.array([10.0, 11.9, 12.1]), rng) for _ in range(40)}
    assert drawn == {(0, 2), (1, 2)}


def test_ledger_reserve_release_expire_and_warming() -> None:
    ledger = InFlightLedger(ttl_s=10.0)
    ledger.reserve("a", 5.0)
    ledger.reserve("a", 3.0)  # out of order: kept sorted
    ledger.reserve("a", 7.0)
    assert ledger.open_count("a", 7.0) == 3 and ledger.opened_after("a", 4.0, 7.0) == 2
    assert ledger.oldest("a") == 3.0 and ledger.last_reserved_at("a") == 7.0
    ledger.release("a")
    assert ledger.oldest("a") == 5.0
    assert ledger.open_count("a", 16.0) == 1  # the 5.0 one expired
    ledger.release("a")
    ledger.release("a")  # more releases than reservations: harmless
    assert ledger.open_count("a", 16.0) == 0 and ledger.opened_after("a", 0.0, 16.0) == 0
    assert ledger.oldest("a") is None and ledger.last_reserved_at("a") is None
    ledger.reserve("b", 0.0)
    assert list(ledger.busy(100.0)) == []
    ledger.mark_warming("s", 20.0)
    ledger.mark_warming("s", 15.0)  # never shortens a start already under way
    assert ledger.warming(10.0) == {"s": 10_000.0} and ledger.warming(25.0) == {}
    with pytest.raises(ValueError):
        InFlightLedger(ttl_s=0)


def test_load_columns_follow_reservations_across_snapshots() -> None:
    ledger = InFlightLedger()
    load = LoadColumns(ledger)
    old = build_view(fleet(state("a", running=3, as_of=5.0), state("b")))
    load.bind(old, 0.0)
    load.reserve("a", 4.0)  # before the metrics' as_of: already visible in `running`
    load.reserve("a", 6.0)
    load.reserve("gone", 6.0)
    assert load.open.tolist() == [2.0, 0.0] and load.after_metrics.tolist() == [1.0, 0.0]
    load.release("a")
    load.release("gone")
    assert load.open.tolist() == [1.0, 0.0] and load.after_metrics.tolist() == [1.0, 0.0]
    new = build_view(fleet(state("a", running=4, as_of=7.0), state("c")))
    load.bind(new, 8.0)
    load.bind(new, 8.0)
    assert load.open.tolist() == [1.0, 0.0] and load.after_metrics.tolist() == [0.0, 0.0]
    load.release("a")
    assert load.open.tolist() == [0.0, 0.0] and np.isnan(load.last_reserved_at[0])
    ledger.mark_warming("gone", 100.0)
    ledger.mark_warming("c", 100.0)
    warming = load.warming_ms(new, 99.0)
    assert warming is not None and warming.tolist() == [0.0, 1000.0]


def test_in_flight_accounting_spreads_a_burst_and_observe_releases() -> None:
    router = build_router("predicted_ttft", {"margin_ms": 0, "margin_rel": 0}, 0)
    snapshot = fleet(
        *(
            state(f"b{i}", spec_kwargs={"max_num_seqs": 2}, running=0, waiting=0, as_of=0.0)
            for i in range(3)
        )
    )
    picks = [
        router.decide(profile(prompt_tokens=100), snapshot, 1.0).ranked[0].backend for _ in range(6)
    ]
    assert sorted(picks) == ["b0", "b0", "b1", "b1", "b2", "b2"]
    for backend in picks:
        router.observe(Observation(backend, 2.0, ok=True))
    assert router.load.open.tolist() == [0.0, 0.0, 0.0]


def test_pipeline_router_rejects_bad_max_ranked() -> None:
    with pytest.raises(ValueError):
        PipelineRouter("x", default_filters(), InFlightScorer(), BestPicker(), 0, max_ranked=0)


def test_dynamic_filters_have_no_static_key_and_release_is_explicit() -> None:
    assert Healthy().static_key(profile()) is None and ServesModel().static_key(profile()) == "m"
    router = build_router("llm_d", {}, 0)
    snapshot = fleet(state("a"))
    router.decide(profile(), snapshot, 0.0)
    assert router.load.open.tolist() == [1.0]
    router.release("a")
    router.observe(Observation("a", 1.0, ok=True))
    assert router.load.open.tolist() == [0.0]
    cache = build_router("cache_aware", {}, 0)
    cache.decide(profile(), snapshot, 0.0)
    cache.observe(Observation("a", 1.0, ok=True))


def test_a_reservation_older_than_the_routers_latest_time_still_counts() -> None:
    """Clocks of concurrent requests interleave: a reserve() stamped before the latest time the
    router was told must still open a reservation (and not move that time back). Covered here
    explicitly: only a random hypothesis example reached this branch before."""
    router = build_router("least_loaded")
    router.reserve("a", 5.0)
    router.reserve("a", 1.0)
    assert router.ledger.open_count("a", 5.0) == 2
    router.release("a")
    router.release("a")
    assert router.ledger.open_count("a", 5.0) == 0
