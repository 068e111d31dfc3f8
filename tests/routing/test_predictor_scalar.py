"""``predict_rows`` (the scalar path's predictor) gives ``predict``'s floats, row for row.

The decision-level differential test (test_fused_ttft.py) covers it inside whole decisions;
this drives the predictor alone over fleets hypothesis draws, with backends this router is
still waking (one of them no longer in the fleet), others' arrivals, long prompts, cached
prefixes, long-form requests and placement penalties.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from routing.fleet_view import FleetView
from routing.inflight import InFlightLedger
from routing.learned_columns import LearnedColumns
from routing.learner import LearnerParams, OnlineLearner
from routing.load import LoadColumns
from routing.predictor import PredictorParams, predict
from routing.predictor_rows import RowTerms
from routing.predictor_scalar import predict_rows
from routing.types import BackendKind, LatencyClass
from tests.routing.routing_fixtures import fleet, profile, state

NOW = 1_000.0
INF = float("inf")

backend = st.fixed_dictionaries(
    {
        "serverless": st.booleans(),
        "in_flight": st.integers(0, 12),
        "running": st.none() | st.integers(0, 12),
        "waiting": st.integers(0, 8),
        "idle_s": st.none() | st.floats(0.0, 60.0),
        "others": st.none() | st.floats(0.0, 5_000.0),
        "others_rps": st.none() | st.floats(0.0, 20.0),
        "region": st.sampled_from(["r1", "r2"]),
    }
)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    backends=st.lists(backend, min_size=1, max_size=6),
    prompt=st.integers(1, 20_000),
    cached=st.integers(0, 6),
    long_form=st.booleans(),
    penalty=st.booleans(),
    waking=st.sets(st.integers(0, 6)),
    weights=st.sampled_from(
        [
            (0.0, 0.0, INF, 0.0),
            (0.5, 0.25, INF, 0.0),
            (0.5, 0.25, 20.0, 0.0),
            (0.0, 0.3, 5.0, 0.0),
            (0.0, 0.0, INF, 0.5),
            (1.0, 1.0, 30.0, 1.0),
        ]
    ),
)
def test_predict_rows_gives_predicts_floats(
    backends: list[dict[str, object]],
    prompt: int,
    cached: int,
    long_form: bool,
    penalty: bool,
    waking: set[int],
    weights: tuple[float, float, float, float],
) -> None:
    states = []
    for i, b in enumerate(backends):
        serverless = bool(b["serverless"])
        running = b["running"]
        idle = b["idle_s"]
        states.append(
            state(
                f"b{i}",
                str(b["region"]),
                spec_kwargs={
                    "kind": BackendKind.SERVERLESS if serverless else BackendKind.DEDICATED,
                    "cold_start_ms": 4_000.0 if serverless else 0.0,
                    "idle_timeout_s": 30.0 if serverless else None,
                    "max_num_seqs": 4 + i,
                    "max_num_batched_tokens": 512 * (i + 1),
                },
                in_flight=b["in_flight"],
                running=running,
                waiting=b["waiting"] if running is not None else None,
                last_traffic_at=None if idle is None else NOW - float(idle),  # type: ignore[arg-type]
                others_uncached_per_s=b["others"],
                others_requests_per_s=b["others_rps"],
                as_of=NOW - 1.0,
            )
        )
    view = FleetView(fleet(*states, region_rtt_ms={"r1": 1.0, "r2": 40.0}))
    ledger = InFlightLedger()
    for i in waking:  # b6 and beyond are no longer in the fleet
        ledger.mark_warming(f"b{i}", NOW + 0.5 + i)
    load = LoadColumns(ledger)
    load.bind(view, NOW)
    learned = LearnedColumns(OnlineLearner(LearnerParams()), 256, 1000)
    own, others, slack, chunks = weights
    rt = RowTerms(PredictorParams(interactive_decode_weight=own, others_decode_weight=others,
                                  interactive_ttft_slack_ms=slack,
                                  others_prefill_weight=chunks))  # fmt: skip
    rt.sync(view, load, learned, learned.sync(view))
    request = profile(
        prompt_tokens=prompt,
        latency_class=LatencyClass.LONG_FORM if long_form else LatencyClass.INTERACTIVE,
        region_penalty_ms={"r2": 7.5} if penalty else {},
    )
    hits = {row: float(min(cached * 400, prompt + 100)) for row in range(0, len(view), 2)}
    rows = list(range(len(view)))
    vector = predict(view, np.array(rows), request, NOW, hits, load, learned, rt)
    scalar = predict_rows(view, rows, request, NOW, hits, load, learned, rt)
    for position, row in enumerate(rows):
        one = scalar[position]
        assert one.row == row
        assert one.score == vector.score.item(position)
        assert one.ttft_ms == vector.ttft_ms.item(row)
        assert one.e2e_ms == (None if vector.e2e_ms is None else vector.e2e_ms.item(row))
        assert one.terms == vector.terms_at(row)
        assert one.cold_prob == (0.0 if vector.cold_prob is None else vector.cold_prob.item(row))
        placed = 0.0 if vector.placement is None else vector.placement.item(row)
        assert one.placement_ms == placed
