"""``RowTerms`` skips a touched row whose view and load inputs all came back to what its last
computation read (``routing.row_inputs``): the chosen row of every decision once its request is
released, a row whose in-flight count alone moved while its depth comes from the scrape. A
router doing that decides bit for bit as one recomputing every touched row, and its columns are
the same bytes, over reservations, releases, observations, in-flight-only snapshots, scrapes
and warm-ups, one decision after each."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from routing.policies import build_router
from routing.types import BackendKind, FleetSnapshot, Observation, built_from
from tests.routing.routing_fixtures import array_attributes, fleet, profile, state

NOW = 100.0

backend = st.tuples(
    st.booleans(),  # serverless
    st.one_of(st.none(), st.integers(0, 12)),  # running (None: no engine metrics)
    st.integers(0, 5),  # waiting
    st.integers(0, 9),  # in flight
    st.sampled_from([None, 3.0, 41.0]),  # probed RTT (None: the region table's)
    st.sampled_from([0.0, 0.0, 2_000.0]),  # others' uncached tokens/s
)
operation = st.one_of(
    st.tuples(st.just("in_flight"), st.integers(0, 5), st.integers(0, 9)),
    st.tuples(st.just("scrape"), st.integers(0, 5), st.integers(0, 12)),
    st.tuples(st.just("shift"), st.integers(0, 5), st.integers(0, 1)),  # depth kept, not waiting
    st.tuples(st.just("others"), st.integers(0, 5), st.integers(0, 3)),
    st.tuples(st.just("release"), st.integers(0, 5), st.integers(0, 1)),
    st.tuples(st.just("observe"), st.integers(0, 5), st.integers(5, 900)),
    st.tuples(st.just("warm_up"), st.integers(0, 5), st.integers(0, 1)),
    st.tuples(st.just("wait"), st.integers(0, 5), st.integers(1, 400)),  # 10 ms to 4 s
)


def _state(i: int, drawn: tuple[Any, ...], now: float) -> Any:
    serverless, running, waiting, in_flight, rtt, others = drawn
    kind = BackendKind.SERVERLESS if serverless else BackendKind.DEDICATED
    return state(
        f"b{i}", ("r1", "r2")[i % 2],
        spec_kwargs={"kind": kind, "max_num_seqs": 4 + i, "max_num_batched_tokens": 256,
                     "cold_start_ms": 3_000.0 if serverless else 0.0,
                     "idle_timeout_s": 30.0 if serverless else None},
        running=running, waiting=None if running is None else waiting, in_flight=in_flight,
        rtt_ms=rtt, others_uncached_per_s=others,
        last_traffic_at=now - 20.0 if serverless and i % 2 else None, as_of=now - 0.5,
    )  # fmt: skip


def _changed(old: Any, kind: str, value: int, now: float) -> Any:
    """``old`` with one signal moved: its in-flight count, a new scrape, one request moved
    from the queue to the batch (same depth), or other clients' arrivals."""
    if kind == "in_flight":
        return dataclasses.replace(old, in_flight=value)
    if kind == "others":
        return dataclasses.replace(old, others_uncached_per_s=500.0 * value)
    if old.running is None:
        return old
    if kind == "shift":
        moved = min(old.waiting, 1)
        return dataclasses.replace(old, running=old.running + moved, waiting=old.waiting - moved)
    return dataclasses.replace(old, running=value, as_of=now)


def _decision(router: Any, snapshot: FleetSnapshot, now: float, k: int) -> str:
    prof = profile(prompt_tokens=40 + 90 * (k % 4), prefix_hashes=tuple(range(k % 3)))
    decision = router.decide(prof, snapshot, now)
    seen = [
        (c.backend, c.score, c.predicted_ttft_ms, c.predicted_ttft_p90_ms, dict(c.terms_ms),
         dict(c.term_age_s), dict(c.term_spread_ms), c.reason)
        for c in decision.ranked
    ]  # fmt: skip
    return repr([seen, decision.rejected, decision.omitted, decision.explored])


def _columns(router: Any) -> dict[str, bytes]:
    rt = router.scorer.row_terms
    out = {name: v.tobytes() for name, v in array_attributes(rt)}
    prefilling = router.load.prefilling
    out["windows"] = repr((prefilling.window_s, prefilling.typical_ms)).encode()
    out["sets"] = repr((sorted(rt._hedged_rows), sorted(rt._arriving_rows))).encode()
    return out


@settings(max_examples=60, deadline=None)
@given(
    drawn=st.lists(backend, min_size=2, max_size=6),
    ops=st.lists(operation, min_size=1, max_size=30),
)
def test_skipping_unmoved_rows_decides_bit_for_bit_as_recomputing_them(
    drawn: list[tuple[Any, ...]], ops: list[tuple[str, int, int]]
) -> None:
    params = {"max_ranked": 3, "peer_weight": 0.3, "prewarm_share": 0.5}
    reusing, every_row = (build_router("predicted_ttft", params, 11) for _ in range(2))
    every_row.scorer.row_terms.reuse_unmoved = False  # type: ignore[attr-defined]
    now = NOW
    states = {f"b{i}": _state(i, d, now) for i, d in enumerate(drawn)}
    names = sorted(states)
    snapshot = fleet(*states.values(), region_rtt_ms={"r1": 1.0, "r2": 60.0})
    for k, (kind, i, value) in enumerate(ops):
        now += 0.05
        name = names[i % len(names)]
        if kind in {"in_flight", "scrape", "shift", "others"}:
            states[name] = _changed(states[name], kind, value, now)
            previous = snapshot
            snapshot = dataclasses.replace(previous, backends=dict(states))
            built_from(snapshot, previous, [name])
        if kind == "wait":
            now += value / 100.0
        for router in (reusing, every_row):
            if kind == "release":
                router.release(name)
            elif kind == "observe":
                router.observe(Observation(name, now, ok=True, ttft_ms=float(value), itl_ms=9.0,
                                           output_tokens=8))  # fmt: skip
            elif kind == "warm_up":
                router.warm_up(snapshot, now)
        assert _decision(reusing, snapshot, now, k) == _decision(every_row, snapshot, now, k)
        assert _columns(reusing) == _columns(every_row)


def test_a_released_choice_and_an_in_flight_count_alone_are_not_recomputed() -> None:
    router: Any = build_router("predicted_ttft", {}, 0)
    a = state("a", running=2, waiting=1, in_flight=3, as_of=NOW - 1.0)
    b = state("b", in_flight=1)  # no engine metrics: its in-flight count is its depth
    snapshot = fleet(a, b)
    rt = router.scorer.row_terms
    for reused in (0, 0, 1):  # a new layout: no row's inputs known until it is recomputed
        router.release(router.decide(profile(prompt_tokens=100), snapshot, NOW).chosen.backend)
        assert rt.reused == reused  # the choice's row: reserved, released, nothing else moved
    for name, in_flight, reused in (("a", 7, 1), ("b", 4, 0)):
        router.release(router.decide(profile(prompt_tokens=100), snapshot, NOW).chosen.backend)
        rt.reused = 0
        moved = dataclasses.replace(snapshot.backends[name], in_flight=in_flight)
        following = built_from(
            dataclasses.replace(snapshot, backends={**snapshot.backends, name: moved}),
            snapshot, [name],
        )  # fmt: skip
        snapshot = following
        router.scorer._sync(router._views.get(snapshot), router.load, NOW)
        assert rt.reused >= reused
