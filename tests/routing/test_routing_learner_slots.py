"""Issue 14, scenario 9: how long a request holds a batch slot is not how long it waited for one.

The learner's service time (a slot's occupancy, ``slots ahead x service / max_num_seqs`` in the
queue term) was learned from TTFT + ITL x output. In an overload the TTFT is mostly the wait
for a slot (22 s in scenario 9), so the predicted wait grew with the wait it predicted and
overstated it by more than the learned queue scale can take back.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from routing.learner import OnlineLearner
from routing.types import Observation
from tests.routing.routing_fixtures import spec

CONFIG = spec("a")


def _service(queue_ms: float, waited_ms: float | None, rtt_ms: float) -> float:
    learner = OnlineLearner()
    terms = {"rtt": rtt_ms, "queue": queue_ms, "prefill": 120.0, "step": 40.0,
             "first_token_overhead": 10.0}  # fmt: skip
    ttft = sum(terms.values())
    learner.observe(
        Observation("a", 1.0, ok=True, ttft_ms=ttft, itl_ms=20.0, output_tokens=100,
                    predicted_terms_ms=terms, queue_wait_ms=waited_ms),
        CONFIG,
    )  # fmt: skip
    est = learner.estimate("a")
    assert est is not None and est.service_ms is not None
    return est.service_ms


@settings(max_examples=50, deadline=None)
@given(st.floats(0.0, 60_000.0), st.floats(0.0, 300.0), st.booleans())
def test_a_slot_is_held_for_the_prefill_and_the_decode_not_the_wait(
    queue: float, rtt: float, told: bool
) -> None:
    """Whatever the wait for a slot and the path, predicted or told by the backend."""
    held = _service(queue, queue if told else None, rtt)
    assert abs(held - (10.0 + 120.0 + 40.0 + 20.0 * 100)) < 1e-6
