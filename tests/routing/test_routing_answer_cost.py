"""The whole answer in the score: an interactive request's own decode and what it costs the
batch it joins, weighted by configuration (issue 14, finding 4)."""

from __future__ import annotations

import pytest

from routing.policies import build_router
from routing.types import Candidate, FleetSnapshot, LatencyClass, Observation
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


def _three() -> FleetSnapshot:
    # "busy" is nearest but decodes 200 sequences; "quiet" is 28 ms further with 10; "far" is
    # idle but 300 ms away: its emptier batch is worth more than its RTT over a long answer.
    return fleet(
        state("busy", rtt_ms=2.0, running=200, waiting=0, as_of=0.0),
        state("quiet", rtt_ms=30.0, running=10, waiting=0, as_of=0.0),
        state("far", rtt_ms=300.0, running=0, waiting=0, as_of=0.0),
    )


WEIGHTS = {"interactive_decode_weight": 1.0, "others_decode_weight": 1.0}


def _ranked(params: dict[str, float], **kwargs: object) -> dict[str, float]:
    router = build_router("predicted_ttft", params, 0)
    shown = router.explain(profile(max_tokens=500, **kwargs), _three(), 1.0)
    return {c.backend: c.score for c in shown.ranked}


def test_unbounded_the_decode_terms_send_an_interactive_request_across_the_ocean() -> None:
    scores = _ranked(WEIGHTS)
    assert min(scores, key=scores.__getitem__) == "far"


def test_a_ttft_slack_bounds_what_the_decode_terms_may_buy() -> None:
    router = build_router("predicted_ttft", {**WEIGHTS, "interactive_ttft_slack_ms": 50.0}, 0)
    shown = router.explain(profile(max_tokens=500), _three(), 1.0)
    ranked = {c.backend: c for c in shown.ranked}
    # quiet's TTFT is within 50 ms of busy's: its emptier batch wins; far is past the slack.
    assert shown.ranked[0].backend == "quiet"
    ttft = {name: c.predicted_ttft_ms or 0.0 for name, c in ranked.items()}
    assert ttft["quiet"] <= ttft["busy"] + 50.0 < ttft["far"]
    # Relative to the cheapest decode among the candidates, the score stays on TTFT's scale;
    # far, past the slack, forfeits its decode advantage: its TTFT plus the dearest decode
    # within the slack (busy's), behind both.
    assert ranked["quiet"].score == ttft["quiet"]
    decode_busy = ranked["busy"].score - ttft["busy"]
    assert ranked["far"].score == pytest.approx(ttft["far"] + decode_busy)
    assert ranked["quiet"].score < ranked["busy"].score < ranked["far"].score
    # A slack of 0: the decode terms only break (near) ties, the nearest wins.
    tight = _ranked({**WEIGHTS, "interactive_ttft_slack_ms": 0.0})
    assert min(tight, key=tight.__getitem__) == "busy"


def test_past_the_slack_a_candidate_keeps_its_decode_disadvantage() -> None:
    # "near" is the best TTFT; "spare" and "crowded" are both 200 ms further, past the slack:
    # spare's empty batch buys nothing there, but crowded's 200 sequences still cost what they
    # cost, so a score-only term that pushes near behind them never makes crowded look free.
    snapshot = fleet(
        state("near", rtt_ms=2.0, running=10, waiting=0, as_of=0.0),
        state("spare", rtt_ms=200.0, running=0, waiting=0, as_of=0.0),
        state("crowded", rtt_ms=200.0, running=200, waiting=0, as_of=0.0),
    )
    router = build_router("predicted_ttft", {**WEIGHTS, "interactive_ttft_slack_ms": 50.0}, 0)
    ranked = {c.backend: c for c in router.explain(profile(max_tokens=500), snapshot, 1.0).ranked}
    added = {name: c.score - (c.predicted_ttft_ms or 0.0) for name, c in ranked.items()}
    assert added["near"] == 0.0 and added["spare"] == pytest.approx(0.0)  # no advantage bought
    assert added["crowded"] > 500.0  # ...and its own decode cost over near's kept
    assert ranked["near"].score < ranked["spare"].score < ranked["crowded"].score


def test_a_long_form_request_is_scored_on_its_whole_answer_whatever_the_slack() -> None:
    long_form = {"latency_class": LatencyClass.LONG_FORM}
    bounded = _ranked({**WEIGHTS, "interactive_ttft_slack_ms": 0.0}, **long_form)
    assert bounded == _ranked(WEIGHTS, **long_form)


def test_a_cache_miss_on_a_busy_backend_costs_the_batch_that_waits_for_its_prefill() -> None:
    # "warm" holds the prompt (its answer was recorded) but queues six more: by TTFT alone
    # "cold" wins, whose 4000-token prefill the 60 sequences it decodes would each wait for.
    snapshot = fleet(
        state("warm", rtt_ms=2.0, running=60, waiting=6, as_of=0.0),
        state("cold", rtt_ms=2.0, running=60, waiting=0, as_of=0.0),
    )
    hashes = tuple(range(1, 251))  # 250 blocks of 16 tokens
    request = profile(max_tokens=100, prompt_tokens=4000, prefix_hashes=hashes)

    def ranked(params: dict[str, float]) -> dict[str, Candidate]:
        router = build_router("predicted_ttft", params, 0)
        router.observe(Observation("warm", 0.5, ok=True, prefix_hashes=hashes))
        return {c.backend: c for c in router.explain(request, snapshot, 1.0).ranked}

    plain, weighed = ranked({}), ranked({"others_prefill_weight": 1.0})
    batch = {"warm": 66, "cold": 60}  # running + waiting, under max_num_seqs
    for name, candidate in weighed.items():
        assert candidate.predicted_ttft_ms == plain[name].predicted_ttft_ms  # the TTFT is as was
        added = candidate.score - plain[name].score
        assert added == pytest.approx(batch[name] * candidate.terms_ms["prefill"])
    assert weighed["cold"].terms_ms["prefill"] > 10 * weighed["warm"].terms_ms["prefill"]
    assert min(plain, key=lambda name: plain[name].score) == "cold"
    assert min(weighed, key=lambda name: weighed[name].score) == "warm"
