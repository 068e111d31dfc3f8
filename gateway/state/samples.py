"""First-token samples shared between replicas (``routing.peer_learning``): what one gateway
learned from, so the others of its region learn it too.

A sample holds timings and the prediction's terms, never prompt text: the backend, the
measured TTFT, the predicted terms, token counts, the backend's own word on its queue wait and
cold start, and the learned factors the prediction used (``LearnedFrame``). It travels in a
``WriteBatch`` (pub/sub on Redis, the host coordinator's event lines) and is not stored: a
replica that was not listening has nothing to catch up on, its own traffic teaches it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from routing.learned_columns import LearnedFrame
from routing.types import FirstToken


@dataclass(frozen=True, slots=True)
class LearningSample:
    region: str  # the sender's gateway region ("" when not configured)
    backend: str
    at: float  # wall clock (seconds) of the first token
    ttft_ms: float
    frame: LearnedFrame  # the sender's learned factors its prediction used
    terms_ms: Mapping[str, float] = field(default_factory=dict)
    predicted_ttft_ms: float | None = None
    prompt_tokens: int = 0
    cached_tokens: int | None = None
    queue_wait_ms: float | None = None
    cold_start: bool | None = None

    @classmethod
    def of(cls, region: str, first: FirstToken, at: float, frame: LearnedFrame) -> LearningSample:
        """``first`` as seen by a router whose clock read ``first.at`` at wall time ``at``."""
        return cls(
            region, first.backend, at, first.ttft_ms, frame, first.predicted_terms_ms,
            first.predicted_ttft_ms, first.prompt_tokens, first.cached_tokens,
            first.queue_wait_ms, first.cold_start,
        )  # fmt: skip

    def first_token(self, at: float) -> FirstToken:
        """As a router's ``FirstToken``, at ``at`` on the receiving router's clock."""
        return FirstToken(
            self.backend, at, self.ttft_ms, self.terms_ms, self.prompt_tokens,
            self.cached_tokens, self.predicted_ttft_ms, self.queue_wait_ms, self.cold_start,
        )  # fmt: skip


def encode_sample(sample: LearningSample) -> list[Any]:
    frame = sample.frame
    return [
        sample.region, sample.backend, sample.at, sample.ttft_ms, dict(sample.terms_ms),
        sample.predicted_ttft_ms, sample.prompt_tokens, sample.cached_tokens,
        sample.queue_wait_ms, sample.cold_start,
        [frame.prefill_rate, frame.queue_scale, frame.step_itl_ms],
    ]  # fmt: skip


def decode_sample(data: Any) -> LearningSample:
    """Raises ``KeyError``/``TypeError``/``ValueError`` on a malformed sample (the batch
    decoder turns them into a protocol error)."""
    region, backend, at, ttft, terms, predicted, prompt, cached, wait, cold, frame = data
    return LearningSample(
        str(region),
        str(backend),
        float(at),
        float(ttft),
        LearnedFrame(float(frame[0]), float(frame[1]), float(frame[2])),
        {str(k): float(v) for k, v in terms.items()},
        None if predicted is None else float(predicted),
        int(prompt),
        None if cached is None else int(cached),
        None if wait is None else float(wait),
        None if cold is None else bool(cold),
    )
