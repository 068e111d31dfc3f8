"""The whole answer in a request's score, not just its first token (issue 14, finding 4).

A request costs its user its TTFT plus its decode, ITL at the batch it joins x its expected
output; and it costs the requests already decoding there the ITL it adds to each of their
steps, over its output. Both come from ``RowTerms`` (``itl``, ``others``, per row) and are
weighed by configuration: ``interactive_decode_weight`` for an interactive request's own
decode (a long-form request is scored on its end-to-end time already) and
``others_decode_weight`` for the batch it slows, every class. Its prefill slows that batch too:
chunked prefill puts its uncached prompt into the steps the running sequences decode in, so
each of them waits for all of it (``RowTerms.batch`` x the prefill term), at
``others_prefill_weight``: a cache miss on a busy backend costs everyone there, which is what
a prefix-heavy fleet's e2e tail is made of.

Unbounded, the decode terms swamp TTFT: a few ms of ITL over a few hundred tokens is worth
more than any RTT, so an interactive request would follow the emptiest batch wherever it is,
through a degraded path or across an ocean, and the first token the user waits for gets
slower. ``interactive_ttft_slack_ms`` bounds that trade: an interactive request's decode
terms can buy at most that much predicted TTFT over the best eligible candidate's. A candidate
past the slack forfeits its decode advantage, never its disadvantage: it scores its TTFT plus
the larger of its own decode term and the largest of the candidates within the slack, so it
ranks behind every one of them (its TTFT is more than the slack above the best, theirs are
not) and among the rest by TTFT plus what it would cost beyond them. Were the disadvantage
dropped too, a score-only term added later (``RowTerms.hedge``, the placement penalty) that
pushes the candidates within behind one past the slack would hand the request to a cold
backend whose prefill stalls its whole batch as if it were free: in scenario 2 that was a
prompt prefilled on a second backend, 4,432 tokens into a batch of 4 (~1.8 s of the others'
decode), scored as its TTFT alone.
With a slack the decode terms are taken relative to the cheapest within it (a constant added
to every row changes no ranking), so the score stays on the TTFT's scale, which the
picker's relative margin and the explorer's bounds read.
"""

from __future__ import annotations

import numpy as np

from routing.fleet_view import F64, Rows
from routing.predictor_params import PredictorParams
from routing.predictor_rows import RowTerms


def with_answer(
    score: F64, ttft: F64, prefill: F64, rows: Rows, output: int, long_form: bool, rt: RowTerms
) -> F64:
    """``score`` (aligned with the view's rows) plus the weighted whole-answer terms of an
    answer of ``output`` tokens with ``prefill`` ms of uncached prompt per row; ``score``
    itself when every weight is 0."""
    p: PredictorParams = rt.params
    own = 0.0 if long_form else p.interactive_decode_weight
    others, chunks = p.others_decode_weight, p.others_prefill_weight
    if own <= 0.0 and others <= 0.0 and chunks <= 0.0:
        return score
    extra: F64 = output * (own * rt.itl + others * rt.others)
    if chunks > 0.0:
        extra = extra + chunks * rt.batch * prefill
    slack = p.interactive_ttft_slack_ms
    if long_form or slack == float("inf"):
        return score + extra
    within = ttft <= ttft[rows].min() + slack
    kept = extra[rows][within[rows]]  # never empty: the best TTFT's row is within
    floor = kept.min()
    relative: F64 = np.where(within, extra - floor, np.maximum(extra, kept.max()) - floor)
    return score + relative
