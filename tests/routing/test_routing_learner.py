"""The online learner converges on synthetic streams; the router uses what it learned."""

from __future__ import annotations

import random
from typing import Any

from routing.learner import LearnerParams, OnlineLearner
from routing.policies import build_router
from routing.types import BackendKind, Observation
from tests.routing.routing_fixtures import fleet, profile, spec, state


def _stream(
    router, snapshot, prof, truth, steps, rng, output_tokens=100, **obs_kwargs
) -> list[float]:
    """Decide, then observe the 'true' TTFT (noisy); returns |error| / actual per step."""
    errors = []
    for step in range(steps):
        now = float(step)
        chosen = router.decide(prof, snapshot, now).ranked[0]
        actual = truth(chosen) * rng.uniform(0.95, 1.05)
        errors.append(abs(chosen.predicted_ttft_ms - actual) / actual)
        router.observe(
            Observation(
                chosen.backend, now, ok=True, ttft_ms=actual, itl_ms=30.0, output_tokens=output_tokens,
                predicted_ttft_ms=chosen.predicted_ttft_ms, predicted_terms_ms=chosen.terms_ms,
                **obs_kwargs,
            )
        )  # fmt: skip
    return errors


def test_prefill_rate_converges_when_prefill_dominates() -> None:
    rng = random.Random(1)
    router = build_router("predicted_ttft", {}, 0)
    snapshot = fleet(state("a", rtt_ms=5.0, running=0, waiting=0, as_of=0.0))
    prof = profile(prompt_tokens=4000)
    truth = lambda c: 5.0 + 10.0 + 4000 / 2500 * 1000  # noqa: E731 - the backend is 4x slower than configured
    errors = _stream(router, snapshot, prof, truth, 150, rng)
    assert errors[0] > 0.5 and sum(errors[-20:]) / 20 < 0.08
    est = router.scorer.learner.estimate("a")  # type: ignore[attr-defined]
    # The ITL is learned as that of a half-full batch; these requests ran alone.
    alone = router.scorer.row_terms.batch_scale(1.0, 256.0)  # type: ignore[attr-defined]
    assert 2200 < est.prefill_rate < 2800 and abs(est.itl_ms * alone - 30.0) < 1e-6
    assert est.service_ms > 0
    late = router.explain(prof, snapshot, 200.0).ranked[0]
    assert (
        late.term_age_s["prefill"] > 0
        and late.term_spread_ms["prefill"] < 0.15 * late.terms_ms["prefill"]
    )


def test_queue_scale_converges_when_queue_dominates() -> None:
    rng = random.Random(2)
    router = build_router("predicted_ttft", {}, 0)
    snapshot = fleet(state("a", rtt_ms=1.0, running=256, waiting=20, as_of=0.0))
    # Requests of the default size: the queued ones ahead are taken to be like them.
    first = router.explain(profile(prompt_tokens=1000), snapshot, 0.0).ranked[0]
    queue = first.terms_ms["queue"]
    others = sum(first.terms_ms.values()) - queue
    truth = lambda c: 3 * queue + others  # noqa: E731 - the queue drains 3x slower than modelled
    # No output: the time a request holds a batch slot is not learned, the queue model is fixed.
    errors = _stream(
        router, snapshot, profile(prompt_tokens=1000), truth, 200, rng, output_tokens=0
    )
    assert errors[0] > 0.5 and sum(errors[-20:]) / 20 < 0.1
    late = router.explain(profile(prompt_tokens=1000), snapshot, 200.0).ranked[0]
    assert abs(late.terms_ms["queue"] - (3 * queue - 1.0)) < 0.1 * 3 * queue


def test_reported_queue_wait_teaches_queue_and_prefill_separately() -> None:
    learner = OnlineLearner()
    for i in range(150):
        est = learner.estimate("a")
        scale, rate = (
            (1.0, 10_000.0) if est is None else (est.queue_scale, est.prefill_rate or 10_000.0)
        )
        terms = {
            "rtt": 5.0,
            "first_token_overhead": 5.0,
            "queue": 25.0 * scale,
            "prefill": 1000 * 1000 / rate,
        }
        learner.observe(
            Observation(
                "a",
                float(i),
                ok=True,
                ttft_ms=10 + 50 + 400,
                queue_wait_ms=50.0,
                predicted_terms_ms=terms,
            ),
            spec("a"),
        )
    est = learner.estimate("a")
    assert est is not None and 1.9 < est.queue_scale < 2.1 and 2400 < (est.prefill_rate or 0) < 2600


def test_bias_learns_a_fixed_offset() -> None:
    rng = random.Random(3)
    router = build_router("predicted_ttft", {"bias_learning_rate": 0.2}, 0)
    snapshot = fleet(state("a", rtt_ms=2.0, running=0, waiting=0, as_of=0.0))
    errors = _stream(
        router, snapshot, profile(prompt_tokens=0), lambda c: 2.0 + 10.0 + 40.0, 150, rng
    )
    assert sum(errors[-20:]) / 20 < 0.08
    est = router.scorer.learner.estimate("a")  # type: ignore[attr-defined]
    late = router.explain(profile(prompt_tokens=0), snapshot, 150.0).ranked[0]
    assert 35 < late.terms_ms["bias"] < 45 and est.bias_dev_ms > 0


def test_cold_start_is_learned_from_requests_that_hit_one() -> None:
    learner = OnlineLearner()
    terms = {
        "rtt": 1.0,
        "first_token_overhead": 10.0,
        "queue": 0.0,
        "prefill": 5.0,
        "cold_start": 1000.0,
    }
    for i in range(40):
        learner.observe(
            Observation(
                "s", float(i), ok=True, ttft_ms=3016.0, cold_start=True, predicted_terms_ms=terms
            ),
            None,
        )
    est = learner.estimate("s")
    assert est is not None and 2900 < (est.cold_start_ms or 0) < 3100
    assert est.prefill_rate is None  # no spec and no prefill blame: nothing to learn from


def test_calibration_tracks_the_p90_ratio_and_failures_teach_nothing() -> None:
    learner = OnlineLearner(LearnerParams(quantile_step=0.02))
    rng = random.Random(4)
    for i in range(3000):
        learner.observe(
            Observation(
                "a",
                float(i),
                ok=True,
                ttft_ms=100.0 * rng.uniform(0.8, 1.6),
                predicted_ttft_ms=100.0,
            ),
            None,
        )
    est = learner.estimate("a")
    assert est is not None and 1.4 < est.ratio_p90 < 1.6 and est.abs_rel_error is not None
    learner.observe(Observation("a", 1.0, ok=False, error_kind="reset"), None)
    learner.observe(Observation("a", 1.0, ok=True), None)  # no TTFT: counted, nothing learned
    learner.observe(
        Observation("a", 1.0, ok=True, ttft_ms=50.0, predicted_terms_ms={"rtt": 10.0}), None
    )
    assert est.failures == 1 and est.observations == 3003 and learner.estimates()["a"] is est


def test_small_terms_carry_no_rate_signal() -> None:
    learner = OnlineLearner()
    tiny = {"rtt": 0.0, "first_token_overhead": 0.0, "queue": 1.0, "prefill": 1.0}
    learner.observe(
        Observation("a", 0.0, ok=True, ttft_ms=9.0, queue_wait_ms=5.0, predicted_terms_ms=tiny),
        spec("a"),
    )
    est = learner.estimate("a")
    assert est is not None and est.prefill_rate is None and est.queue_scale == 1.0


def test_observations_for_unknown_backends_do_not_break_decisions() -> None:
    router = build_router("predicted_ttft", {}, 0)
    router.observe(Observation("ghost", 0.0, ok=True, ttft_ms=10.0, prefix_hashes=(1, 2)))
    decision = router.decide(
        profile(prefix_hashes=(1, 2), prompt_tokens=32), fleet(state("a")), 1.0
    )
    assert decision.ranked[0].backend == "a" and decision.ranked[0].cached_tokens == 0


def test_prefill_blame_without_a_spec_or_rate_learns_nothing() -> None:
    learner = OnlineLearner()
    terms = {"rtt": 1.0, "queue": 0.0, "prefill": 100.0}
    learner.observe(Observation("x", 0.0, ok=True, ttft_ms=300.0, predicted_terms_ms=terms), None)
    est = learner.estimate("x")
    assert est is not None and est.prefill_rate is None and est.prefill_ms == 100.0


def test_an_rtt_jump_is_learned_as_bias_not_as_a_slower_prefill() -> None:
    """Finding from the issue-5 acceptance run: 2 -> 400 ms RTT used to cut the prefill rate."""
    learner = OnlineLearner(LearnerParams(bias_alpha=0.5))
    config = spec("a")
    terms = {"rtt": 2.0, "queue": 0.0, "prefill": 30.0, "first_token_overhead": 10.0}
    for at in range(3):
        known = learner.estimate("a")
        predicted = terms | {"bias": 0.0 if known is None else known.offset_ms}
        learner.observe(Observation("a", float(at), ok=True, ttft_ms=42.0 + 398.0,
            predicted_terms_ms=predicted), config)  # fmt: skip
    est = learner.estimate("a")
    # The jump is a level shift of the offset; the prefill, predicted right since, keeps its rate.
    assert est is not None and (est.prefill_rate or 10_000.0) == 10_000.0
    assert 340.0 < est.offset_ms <= 398.0
    # A GPU 4x slower than configured still teaches the rate.
    learner.observe(Observation("b", 0.0, ok=True, ttft_ms=12.0 + 120.0,
        predicted_terms_ms=terms), config)  # fmt: skip
    slow = learner.estimate("b")
    assert slow is not None and slow.prefill_rate is not None and slow.prefill_rate < 10_000.0


def _feed(
    learner: OnlineLearner, terms: dict[str, float], ttft: float, times: int, **kw: Any
) -> None:
    for i in range(times):
        known = learner.estimate("a")
        bias = {"bias": known.offset_ms} if known is not None else {}
        learner.observe(Observation("a", float(i), ok=True, ttft_ms=ttft,
            predicted_terms_ms=terms | bias, **kw), spec("a"))  # fmt: skip


def test_rates_and_scales_stay_within_reach_of_configuration() -> None:
    """Sim finding A: estimates multiplied themselves to 1e10 tok/s and queue scale 2e18."""
    fast, slow = OnlineLearner(), OnlineLearner()
    prefill = {"rtt": 1.0, "prefill": 100.0, "first_token_overhead": 10.0}
    _feed(fast, prefill, 13.0, 500)  # took 2 ms: would be a 50x faster GPU
    _feed(slow, prefill, 11.0 + 5000.0, 500)  # implausibly slow: an offset, not the rate
    est, late = fast.estimate("a"), slow.estimate("a")
    assert est is not None and late is not None
    assert est.prefill_rate == 4 * 10_000.0 and late.prefill_rate is None
    assert 0 < late.offset_ms <= 1000.0  # bounded: beyond it is an outage
    queue = {"rtt": 1.0, "queue": 100.0, "prefill": 1.0}
    busy, idle = OnlineLearner(), OnlineLearner()
    _feed(busy, queue, 1e9, 300)  # implausible for a queue: an offset, bounded
    assert busy.estimate("a").queue_scale == 1.0  # type: ignore[union-attr]
    assert busy.estimate("a").offset_ms == 1000.0  # type: ignore[union-attr]
    busy = OnlineLearner()
    for i in range(300):  # the queue drains 4x slower than modelled (and is predicted so)
        scale = est.queue_scale if (est := busy.estimate("a")) is not None else 1.0
        busy.observe(Observation("a", float(i), ok=True, ttft_ms=1.0 + 1.0 + 400.0,
            predicted_terms_ms=queue | {"queue": 100.0 * scale}), spec("a"))  # fmt: skip
    _feed(idle, queue, 3.0, 300)
    assert abs(busy.estimate("a").queue_scale - 4.0) < 1e-9  # type: ignore[union-attr]
    assert idle.estimate("a").queue_scale == 0.25  # type: ignore[union-attr]
    stepped = OnlineLearner()
    for i in range(300):  # the engine step takes twice what is modelled
        scale = est.step_scale if (est := stepped.estimate("a")) is not None else 1.0
        stepped.observe(Observation("a", float(i), ok=True, ttft_ms=1.0 + 1.0 + 120.0,
            predicted_terms_ms={"rtt": 1.0, "step": 60.0 * scale, "prefill": 1.0}), spec("a"))  # fmt: skip
    assert 1.9 < stepped.estimate("a").step_scale < 2.1  # type: ignore[union-attr]
    # A negative queue time makes no physical sense: nothing is learned from it.
    _feed(idle, queue | {"rtt": 500.0}, 2.0, 1)
    assert idle.estimate("a").queue_scale == 0.25  # type: ignore[union-attr]


def test_a_negative_bias_cancels_at_most_the_offsets() -> None:
    learner = OnlineLearner(LearnerParams(bias_alpha=0.5))
    _feed(learner, {"rtt": 30.0, "first_token_overhead": 10.0, "prefill": 1.0}, 0.0, 50)
    est = learner.estimate("a")
    assert est is not None and est.offset_ms == -40.0


def test_a_wrong_cold_start_guess_is_not_learned_as_bias() -> None:
    """Sim finding D: predicted cold starts on warm backends taught a -7 s bias."""
    serverless = spec("s", kind=BackendKind.SERVERLESS, cold_start_ms=6000.0, idle_timeout_s=30.0)
    learner = OnlineLearner()
    warm = {"rtt": 2.0, "prefill": 50.0, "cold_start": 5400.0, "first_token_overhead": 10.0}
    for i in range(50):  # predicted (mostly) cold, evidently warm: prefill took what it should
        learner.observe(Observation("s", float(i), ok=True, ttft_ms=62.0,
            predicted_terms_ms=warm), serverless)  # fmt: skip
    est = learner.estimate("s")
    assert est is not None and est.offset_ms == 0.0 and abs((est.prefill_rate or 0) - 10_000) < 1
    cold = {"rtt": 2.0, "prefill": 50.0, "first_token_overhead": 10.0}
    for i in range(50):  # predicted warm, evidently cold (no word from the backend): skipped
        learner.observe(Observation("s", float(i), ok=True, ttft_ms=6062.0,
            predicted_terms_ms=cold), serverless)  # fmt: skip
    assert est.offset_ms == 0.0 and est.cold_start_ms is None
    learner.observe(Observation("s", 99.0, ok=True, ttft_ms=62.0, cold_start=True,
        predicted_terms_ms=cold), serverless)  # fmt: skip
    assert est.cold_start_ms == 0.0  # the backend's word is taken: a cold start of 0 ms
    for _ in range(3):  # a step of the offset is believed when it repeats
        learner.observe(Observation("s", 99.0, ok=True, ttft_ms=5062.0, cold_start=False,
            predicted_terms_ms=cold | {"bias": est.offset_ms}), serverless)  # fmt: skip
    assert est.offset_ms > 0  # said warm: the surplus is an offset
