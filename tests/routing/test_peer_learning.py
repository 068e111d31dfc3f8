"""First tokens another gateway of the region saw teach this router (routing.peer_learning): a
host's gateways learn as one, each sample re-expressed in the receiver's own learned frame."""

from __future__ import annotations

from routing.learned_columns import LearnedFrame
from routing.peer_learning import reexpressed
from routing.pipeline.router import PipelineRouter
from routing.policies import build_router
from routing.types import FirstToken, RequestProfile
from tests.routing.routing_fixtures import fleet, profile, state

SNAPSHOT = fleet(
    state("a", rtt_ms=2.0, running=0, waiting=0, as_of=0.0),
    state("b", rtt_ms=2.0, running=0, waiting=0, as_of=0.0),
)


def _router() -> PipelineRouter:
    router = build_router("predicted_ttft", {}, 0)
    assert isinstance(router, PipelineRouter) and router.learns_from_peers
    return router


def _predicted(router: PipelineRouter, backend: str, now: float, prompt: int = 0) -> float:
    ranked = router.explain(profile(prompt_tokens=prompt), SNAPSHOT, now).ranked
    value = {c.backend: c.predicted_ttft_ms for c in ranked}[backend]
    assert value is not None
    return value


def _served(
    router: PipelineRouter, request: RequestProfile, at: float, extra_ms: float, slower: float
) -> FirstToken:
    """Route ``request`` to ``a`` and answer it: the prefill ``slower`` times the configured
    one (10k tokens/s), plus ``extra_ms`` on the path. Returns what the router learned from."""
    chosen = router.explain(request, SNAPSHOT, at).ranked[0]
    assert chosen.backend == "a" and chosen.predicted_ttft_ms is not None
    terms = dict(chosen.terms_ms)
    prefill = slower * request.prompt_tokens / 10.0
    ttft = sum(terms.values()) - terms["bias"] - terms["prefill"] + prefill + extra_ms
    first = FirstToken(
        "a", at + 0.2, ttft, terms, prompt_tokens=request.prompt_tokens,
        predicted_ttft_ms=chosen.predicted_ttft_ms,
    )  # fmt: skip
    router.observe_first_token(first)
    return first


def test_a_peer_learns_a_step_it_never_routed_into() -> None:
    serving, peer = _router(), _router()
    before = _predicted(peer, "a", 0.5)
    request = profile(exclude=frozenset({"b"}))
    for i in range(6):
        first = _served(serving, request, 1.0 + i, extra_ms=200.0, slower=1.0)
        frame = serving.learned_frame("a")
        assert frame is not None
        peer.observe_peer_first_token(first, frame)
    own = _predicted(serving, "a", 8.0)
    taught = _predicted(peer, "a", 8.0)
    assert taught >= before + 180.0  # the step, learned from the serving router's answers
    assert abs(taught - own) <= 5.0  # ...as the serving router learned it
    assert peer.decide(profile(), SNAPSHOT, 8.1).chosen.backend == "b"  # type: ignore[union-attr]


def test_a_peer_sample_is_learned_in_the_receivers_frame_not_the_senders() -> None:
    """The serving router has learned a prefill 2x slower; its later samples, right in its own
    frame, are 2x the receiver's prefill: a rate, not an offset, for the receiver too."""
    serving, peer = _router(), _router()
    configured = _predicted(peer, "a", 0.5, prompt=8000)
    request = profile(exclude=frozenset({"b"}), prompt_tokens=8000)
    for i in range(30):
        _served(serving, request, 1.0 + i, extra_ms=0.0, slower=2.0)  # the serving one learns
    for i in range(30):
        first = _served(serving, request, 40.0 + i, extra_ms=0.0, slower=2.0)
        frame = serving.learned_frame("a")
        assert frame is not None
        peer.observe_peer_first_token(first, frame)
    own = _predicted(serving, "a", 80.0, prompt=8000)
    taught = _predicted(peer, "a", 80.0, prompt=8000)
    assert taught >= configured + 600.0  # 800 ms more prefill at 8,000 tokens
    assert abs(taught - own) <= 0.1 * own
    est = peer.scorer.learner.estimate("a")  # type: ignore[attr-defined]
    assert est is not None and abs(est.offset_ms) <= 20.0  # the rate took it, as it should


def test_unknown_backends_and_policies_that_do_not_learn_take_nothing() -> None:
    peer = _router()
    frame = LearnedFrame(10_000.0, 1.0, 20.0)
    first = FirstToken("a", 1.0, 500.0, {"rtt": 2.0, "prefill": 10.0, "bias": 0.0})
    peer.observe_peer_first_token(first, frame)  # no view yet: nothing to re-express against
    assert peer.scorer.learner.estimate("a") is None  # type: ignore[attr-defined]
    assert peer.learned_frame("a") is None
    _predicted(peer, "a", 0.0)
    assert peer.learned_frame("zz") is None
    peer.observe_peer_first_token(FirstToken("zz", 1.0, 500.0, first.predicted_terms_ms), frame)
    assert peer.scorer.learner.estimate("zz") is None  # type: ignore[attr-defined]
    plain = build_router("round_robin", {}, 0)
    assert isinstance(plain, PipelineRouter) and not plain.learns_from_peers
    assert plain.learned_frame("a") is None
    plain.observe_peer_first_token(first, frame)  # ignored


def test_reexpression_scales_each_rate_made_term_and_keeps_the_rest() -> None:
    terms = {"rtt": 5.0, "queue": 40.0, "prefill": 100.0, "step": 10.0, "bias": 7.0}
    first = FirstToken("a", 1.0, 200.0, terms, predicted_ttft_ms=165.0)
    out = reexpressed(first, LearnedFrame(5_000.0, 2.0, 10.0), LearnedFrame(10_000.0, 1.0, 20.0))
    assert out.predicted_terms_ms == {
        "rtt": 5.0, "queue": 20.0, "prefill": 50.0, "step": 20.0, "bias": 7.0,
    }  # fmt: skip
    assert out.predicted_ttft_ms == 165.0 - 20.0 - 50.0 + 10.0
    bare = FirstToken("a", 1.0, 200.0)
    assert reexpressed(bare, LearnedFrame(1.0, 1.0, 1.0), LearnedFrame(2.0, 2.0, 2.0)) is bare
    unknown = reexpressed(first, LearnedFrame(0.0, 1.0, 10.0), LearnedFrame(10_000.0, 1.0, 10.0))
    assert unknown.predicted_terms_ms["prefill"] == 100.0  # no rate to scale by: as sent
    no_total = reexpressed(
        FirstToken("a", 1.0, 200.0, terms), LearnedFrame(5_000.0, 1.0, 10.0),
        LearnedFrame(10_000.0, 1.0, 10.0),
    )  # fmt: skip
    assert no_total.predicted_ttft_ms is None
