"""Issue 14, scenario 9: answers that come back long after their decision.

In an overload a request waits 20 s for its first token; its residual says how wrong a
prediction made 20 s ago was, with the scale of then. Rescaling today's scale by it
overshot: the learned queue scale swung between its bounds (1/4 and 4) and the predicted
wait from 10 s to 180 s against a steady 22 s. The closed loop below decides every 0.1 s with
what the learner knows and feeds each answer back when it arrives.
"""

from __future__ import annotations

import heapq

from hypothesis import given, settings
from hypothesis import strategies as st

from routing.learner import OnlineLearner
from routing.types import FirstToken
from tests.routing.routing_fixtures import spec

CONFIG = spec("a")
MODELLED_MS = 20_000.0  # the queue the model sees, at a learned scale of 1


def _scales(truth: float, modelled_ms: float, seconds: float = 150.0) -> list[float]:
    """The learned queue scale after each answer; the queue really takes ``truth`` x what
    the model sees."""
    learner = OnlineLearner()
    arriving: list[tuple[float, int, FirstToken]] = []
    scales: list[float] = []
    for i in range(int(seconds / 0.1)):
        now = 0.1 * i
        while arriving and arriving[0][0] <= now:
            _, _, first = heapq.heappop(arriving)
            learner.observe_first_token(first.observation(), CONFIG)
            est = learner.estimate("a")
            assert est is not None
            scales.append(est.queue_scale)
        est = learner.estimate("a")
        scale = 1.0 if est is None else est.queue_scale
        terms = {"rtt": 2.0, "queue": scale * modelled_ms, "prefill": 100.0, "step": 50.0,
                 "first_token_overhead": 10.0}  # fmt: skip
        ttft = 162.0 + truth * modelled_ms
        first = FirstToken("a", now + ttft / 1000.0, ttft, terms,
                           predicted_ttft_ms=sum(terms.values()))  # fmt: skip
        heapq.heappush(arriving, (first.at, i, first))
    return scales


@settings(max_examples=10, deadline=None)
@given(st.floats(0.65, 1.6), st.floats(5_000.0, 25_000.0))
def test_a_late_answer_corrects_the_scale_of_its_decision_without_swinging(
    truth: float, modelled_ms: float
) -> None:
    """Within what one sample may move it (``max_log_step``: a ratio of e^0.5 either way), a
    late answer's scale is its decision's times its ratio: the scale converges in one lag."""
    scales = _scales(truth, modelled_ms)
    settled = scales[len(scales) // 2 :]  # the last half of the answers
    assert all(abs(s / truth - 1.0) < 0.1 for s in settled), (min(settled), max(settled))
