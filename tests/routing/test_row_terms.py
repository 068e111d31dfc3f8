"""``RowTerms`` recomputes many changed rows as arrays (``_rows_at_once``) with the same floats
as its row-by-row path (``_row``): every column, every row set and the prefill windows it hands
the load, bit for bit, over fleets with and without engine metrics, measured or unknown RTTs,
serverless rows, others' arrivals, our reservations and learned estimates."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from routing.policies import build_router
from routing.predictor_rows import RowTerms
from routing.types import BackendKind, FirstToken, Observation
from tests.routing.routing_fixtures import array_attributes, fleet, profile, state

NOW = 500.0

backend = st.tuples(
    st.sampled_from(["r1", "r2", "r3"]),  # r3: in no region table, so maybe an unknown RTT
    st.booleans(),  # serverless
    st.one_of(st.none(), st.integers(0, 300)),  # running (None: no engine metrics)
    st.integers(0, 60),  # waiting
    st.one_of(st.none(), st.floats(1.0, 200.0)),  # probed RTT
    st.integers(0, 50),  # in flight
    st.sampled_from([0.0, 0.0, 3_000.0, 40_000.0]),  # others' uncached tokens/s
    st.sampled_from([0.0, 2.0]),  # others' requests/s
    st.sampled_from([2, 16, 256]),  # max_num_seqs
)


def _state(i: int, drawn: tuple[Any, ...]) -> Any:
    region, serverless, running, waiting, rtt, in_flight, others, rps, seqs = drawn
    kind = BackendKind.SERVERLESS if serverless else BackendKind.DEDICATED
    return state(
        f"b{i:02d}", region,
        spec_kwargs={"kind": kind, "max_num_seqs": seqs, "max_num_batched_tokens": 512,
                     "cold_start_ms": 4000.0 if serverless else 0.0,
                     "idle_timeout_s": 60.0 if serverless else None},
        running=running, waiting=None if running is None else waiting, rtt_ms=rtt,
        in_flight=in_flight, others_uncached_per_s=others, others_requests_per_s=rps,
        last_traffic_at=NOW - 30.0 if serverless and i % 2 else None, as_of=NOW - 0.5,
    )  # fmt: skip


def _columns(rt: RowTerms, prefilling: Any) -> dict[str, Any]:
    out: dict[str, Any] = {name: value.copy() for name, value in array_attributes(rt)}
    out["sets"] = (set(rt._hedged_rows), set(rt._arriving_rows), rt.arriving, rt.hedging)
    out["windows"] = (list(prefilling.window_s), list(prefilling.typical_ms))
    return out


def _same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for name, value in a.items():
        if isinstance(value, np.ndarray):
            assert value.dtype == b[name].dtype and value.tobytes() == b[name].tobytes(), name
        else:
            assert value == b[name], name


@settings(max_examples=60, deadline=None)
@given(
    drawn=st.lists(backend, min_size=1, max_size=30),
    observed=st.lists(st.tuples(st.integers(0, 29), st.floats(5.0, 900.0)), max_size=12),
    decisions=st.integers(0, 6),
    seed=st.integers(0, 2**32 - 1),
)
def test_rows_at_once_are_the_rows_one_by_one(
    drawn: list[tuple[Any, ...]], observed: list[tuple[int, float]], decisions: int, seed: int
) -> None:
    snapshot = fleet(*(_state(i, d) for i, d in enumerate(drawn)),
                     region_rtt_ms={"r1": 2.0, "r2": 70.0})  # fmt: skip
    router: Any = build_router("predicted_ttft", {"max_ranked": 2, "peer_weight": 0.3}, 5)
    names = sorted(snapshot.backends)
    for k, (i, ttft) in enumerate(observed):  # learned estimates (and hedges: queue scale < 1)
        name, at = names[i % len(names)], NOW - 20.0 + k
        router.observe_first_token(FirstToken(name, at, ttft, {"queue": ttft / 2, "rtt": 2.0}))
        router.observe(Observation(name, at, ok=True, ttft_ms=ttft, itl_ms=12.0,
                                   output_tokens=40, first_token_observed=True))  # fmt: skip
    for k in range(decisions):  # our reservations and their prefill, ahead of later requests
        router.decide(profile(prompt_tokens=300 * (k + 1)), snapshot, NOW + 0.01 * k)
    scorer, load = router.scorer, router.load
    view = router._views.get(snapshot)
    load.bind(view, NOW)
    scorer._sync(view, load, NOW)
    learned = scorer.learned
    # Learned values off any round grid (so a reordered sum would show in the last bit),
    # queue scales below 1 included (our own reservations then hedge the score).
    rng = np.random.default_rng(seed)
    size = len(view)
    learned.queue_scale = rng.uniform(0.3, 1.5, size)
    learned.bias_ms = rng.normal(0.0, 7.0, size)
    learned.prefill_rate = rng.uniform(800.0, 9000.0, size)
    learned.step_itl_ms = rng.uniform(5.0, 40.0, size)
    learned.itl_ms = rng.uniform(5.0, 40.0, size)
    learned.prefill_ms = rng.uniform(10.0, 400.0, size)
    learned.service_ms = rng.uniform(100.0, 9000.0, size)
    arrays, by_row = RowTerms(scorer.predictor_params), RowTerms(scorer.predictor_params)
    arrays.vector_min, by_row.vector_min = 0, 10**9
    arrays.sync(view, load, learned, None)  # a new layout: every row
    after_arrays = _columns(arrays, load.prefilling)
    by_row.sync(view, load, learned, None)
    _same(after_arrays, _columns(by_row, load.prefilling))
    assert decisions == 0 or by_row.hedging or not by_row._hedged_rows
    # Some rows change (a reservation each): the arrays path redoes just those.
    changed = list(range(0, len(names), 2))
    for row in changed:
        load.reserve(names[row], NOW + 1.0)
    load.drain()
    arrays._rows_at_once(view, load, learned, np.array(changed, dtype=np.intp))
    after_arrays = _columns(arrays, load.prefilling)
    for row in changed:
        by_row._row(view, load, learned, row)
    _same(after_arrays, _columns(by_row, load.prefilling))
