"""Learning from first tokens another gateway saw (the workers of one host, or replicas of one
region sharing state): one host routes as one learner, not N that each need their own
evidence (issue 16; in scenario 6 three gateways each took three confirmations of a step,
11 requests at 330-430 ms in the spell against ~3 for one learner).

A sample is not a residual that can be added to another learner: it is an answer to the
sender's prediction, made with the sender's learned rates and offsets. So the sender ships
the factors its prediction used (``LearnedFrame``) and the receiver re-expresses each term in
its own: the prefill at its own learned rate, the queue at its own queue scale, the step at
its own step ITL, the RTT and the learned offset as they are now (``_current_offsets`` of the
policy). What is left is what the receiver would have learned had it routed the request.

Only samples from gateways of the receiver's own region are taken: the RTT to a backend, and
what a path costs, belong to where the request came from.
"""

from __future__ import annotations

from dataclasses import replace

from routing.learned_columns import LearnedFrame
from routing.types import FirstToken


def reexpressed(first: FirstToken, sender: LearnedFrame, receiver: LearnedFrame) -> FirstToken:
    """``first`` with its rate-made terms (and the prediction they sum to) in the receiver's
    frame. RTT and offset are left to the policy, which replaces them with today's."""
    terms = first.predicted_terms_ms
    if not terms:
        return first
    ratios = {
        "prefill": _ratio(sender.prefill_rate, receiver.prefill_rate),
        "queue": _ratio(receiver.queue_scale, sender.queue_scale),
        "step": _ratio(receiver.step_itl_ms, sender.step_itl_ms),
    }
    now = {name: ms * ratios.get(name, 1.0) for name, ms in terms.items()}
    predicted = first.predicted_ttft_ms
    if predicted is not None:
        predicted += sum(now.values()) - sum(terms.values())
    return replace(first, predicted_terms_ms=now, predicted_ttft_ms=predicted)


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if numerator > 0.0 and denominator > 0.0 else 1.0
