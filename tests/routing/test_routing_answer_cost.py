"""The whole answer in the score: an interactive request's own decode and what it costs the
batch it joins, weighted by configuration (issue 14, finding 4)."""

from __future__ import annotations

from routing.policies import build_router
from routing.types import FleetSnapshot, LatencyClass
from tests.routing.routing_fixtures import fleet, profile, state


def _snapshot() -> FleetSnapshot:
    # Equal TTFT terms but for the batch: "busy" decodes 200 sequences, "quiet" 10.
    return fleet(
        state("busy", rtt_ms=2.0, running=200, waiting=0, as_of=0.0),
        state("quiet", rtt_ms=30.0, running=10, waiting=0, as_of=0.0),
    )


def test_by_default_an_interactive_request_is_scored_on_its_first_token() -> None:
    router = build_router("predicted_ttft", {}, 0)
    shown = router.explain(profile(max_tokens=500), _snapshot(), 1.0)
    assert shown.ranked[0].backend == "busy"
    assert shown.ranked[0].score == shown.ranked[0].predicted_ttft_ms


def test_weighted_the_answer_and_the_batch_it_slows_move_it_to_the_quiet_backend() -> None:
    params = {"interactive_decode_weight": 0.25, "others_decode_weight": 0.5}
    router = build_router("predicted_ttft", params, 0)
    shown = router.explain(profile(max_tokens=500), _snapshot(), 1.0)
    best = shown.ranked[0]
    assert best.backend == "quiet" and best.score > (best.predicted_ttft_ms or 0.0)
    busy = next(c for c in shown.ranked if c.backend == "busy")
    assert (busy.predicted_ttft_ms or 0.0) < (best.predicted_ttft_ms or 0.0)  # TTFT alone: busy
    # Long-form requests are scored on their end-to-end time already; the batch they slow
    # still counts.
    long_form = profile(max_tokens=500, latency_class=LatencyClass.LONG_FORM)
    only_others = build_router("predicted_ttft", {"others_decode_weight": 0.5}, 0)
    scored = only_others.explain(long_form, _snapshot(), 1.0).ranked[0]
    assert scored.score > (scored.predicted_e2e_ms or 0.0)
