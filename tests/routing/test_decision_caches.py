"""Issue 16: what the decision path caches or skips gives the answers it gave without.

- The exploration check that found nothing waits ``explore_recheck_s`` before it runs again
  (counted by ``Explorer.checks``); ``explain`` neither moves that wait nor spends credit.
- The per-row evidence a candidate's breakdown reads (``RowTerms.evidence``) is what the
  columns say at every decision, over random sequences of snapshots, observations and
  decisions (the differential test in test_fused_ttft drives the same sequences).
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from routing.policies import build_router
from routing.policies.predicted_ttft import PredictedTTFTScorer
from routing.predictor_rows import _evidence
from routing.types import BackendKind, Observation
from tests.routing.routing_fixtures import fleet, profile, state

STEP_S = 0.0625  # exact in binary: four decisions are exactly one quarter second


def _router(recheck_s: float) -> Any:
    # 1/32 of a credit a decision: exactly one credit after 32 decisions.
    params = {"explore_share": 0.03125, "explore_recheck_s": recheck_s}
    return build_router("predicted_ttft", params, 0)


def _snapshot() -> Any:
    return fleet(state("a", rtt_ms=5.0, as_of=0.0), state("b", region="r2", rtt_ms=40.0))


def _checks(router: Any, decisions: int) -> int:
    scorer = router.scorer
    assert isinstance(scorer, PredictedTTFTScorer)
    for i in range(decisions):
        decision = router.decide(profile(), _snapshot(), i * STEP_S)
        assert not decision.explored  # nothing was ever observed: nothing to re-measure
        router.release(decision.chosen.backend)
    return scorer.explorer.checks


def test_a_check_that_found_nothing_waits_recheck_s() -> None:
    # Credit reaches 1 at decision 32; then one check every four decisions (0.25 s), 32..196.
    assert _checks(_router(0.25), 200) == 42
    assert _checks(_router(0.0), 200) == 200 - 32  # 0: every decision once credit is there


def test_explain_leaves_the_wait_alone() -> None:
    router = _router(0.25)
    _checks(router, 33)  # the check at decision 32 found nothing: quiet until 2.25 s
    explorer = router.scorer.explorer
    quiet, checks, credit = explorer.quiet_until, explorer.checks, explorer.credit
    assert quiet == 32 * STEP_S + 0.25
    router.explain(profile(), _snapshot(), quiet - 0.01)  # quiet: no check at all
    assert explorer.checks == checks
    router.explain(profile(), _snapshot(), quiet)  # due: it looks, and moves nothing
    assert explorer.checks == checks + 1
    assert (explorer.quiet_until, explorer.credit) == (quiet, credit)
    router.decide(profile(), _snapshot(), quiet)  # a committed look that finds nothing waits
    assert explorer.checks == checks + 2 and explorer.quiet_until == quiet + 0.25


def _same(one: tuple[Any, ...], other: tuple[Any, ...]) -> bool:
    return all(
        a == b
        or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))
        for a, b in zip(one, other, strict=True)
    )


NAMES = ("a", "b", "c", "s")


def _state(name: str, seed: int, now: float) -> Any:
    serverless = name == "s"
    kind = {"kind": BackendKind.SERVERLESS, "cold_start_ms": 2000.0, "idle_timeout_s": 8.0}
    return state(
        name,
        region="r2" if name == "b" else "r1",
        spec_kwargs=kind if serverless else None,
        rtt_ms=float(seed % 40) if seed % 2 else None,
        running=seed % 5 if seed % 3 else None,
        waiting=seed % 3 if seed % 3 else None,
        last_traffic_at=now - seed % 10 if seed % 4 else None,
        as_of=now - seed % 3,
    )


ops = st.lists(
    st.tuples(
        st.sampled_from(["snapshot", "observe", "decide"]),
        st.sampled_from(NAMES),
        st.integers(0, 1_000),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(ops)
# the serverless "s" idle 5.5 s at 53.5 s (a keep-warm credit), then a snapshot: busy since 53 s
@example([("observe", "a", 1)] * 6 + [("decide", "a", 100), ("snapshot", "s", 1)] * 2)
def test_cached_evidence_is_what_the_columns_say_at_every_decision(
    steps: list[tuple[str, str, int]],
) -> None:
    router = build_router("predicted_ttft", {}, 1)
    scorer = router.scorer
    assert isinstance(scorer, PredictedTTFTScorer)
    now = 50.0
    states = {name: _state(name, 7 * i + 1, now) for i, name in enumerate(NAMES)}
    for kind, name, value in steps:
        now += 0.5
        if kind == "snapshot":
            states[name] = _state(name, value, now)
        elif kind == "observe":
            router.observe(Observation(name, now, ok=True, ttft_ms=float(value % 300 + 1),
                                       itl_ms=5.0, output_tokens=3))  # fmt: skip
        else:
            decision = router.decide(profile(prompt_tokens=value), fleet(*states.values()), now)
            assert decision.chosen is not None
            router.release(decision.chosen.backend)
            view, rt = scorer._view, scorer.row_terms
            assert view is not None
            for row in range(len(view)):
                cached = rt.evidence(view, scorer.learned, row)
                assert _same(cached, _evidence(view, scorer.learned, row))
