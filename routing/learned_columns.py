"""The learner's per-backend estimates as columns aligned with the current ``FleetView``.

Configured values fill in wherever nothing has been learned yet. Only backends the learner
touched since the last decision are rewritten, so observing every request stays cheap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from routing.fleet_view import F64, FleetView
from routing.learner import BackendEstimate, OnlineLearner, peer_key
from routing.types import BackendSpec


@dataclass(frozen=True, slots=True)
class LearnedFrame:
    """The learned factors a prediction for one backend uses: the frame its terms are in."""

    prefill_rate: float  # tokens/s
    queue_scale: float
    step_itl_ms: float  # the configured ITL x the learned step scale


class LearnedColumns:
    def __init__(
        self, learner: OnlineLearner, default_output_tokens: int, default_prompt_tokens: int
    ) -> None:
        self.learner = learner
        self.default_output_tokens = default_output_tokens
        self.default_prompt_tokens = default_prompt_tokens
        self._view: FleetView | None = None
        empty = np.zeros(0)
        self.prefill_rate: F64 = empty
        self.prefill_samples: F64 = empty
        self.queue_scale: F64 = empty
        self.bias_ms: F64 = empty
        self.bias_dev_ms: F64 = empty
        self.itl_ms: F64 = empty  # ITL at a half-full batch, as observed (long-form output)
        self.step_itl_ms: F64 = empty  # ...as configured x the learned step scale (prefill)
        self.cold_start_ms: F64 = empty
        self.service_ms: F64 = empty
        self.prefill_ms: F64 = empty
        self.ratio_p90: F64 = empty
        self.learned_at: F64 = empty  # NaN: nothing observed
        self._peer_rows: dict[tuple[object, ...], list[int]] = {}  # peer_key -> view rows

    def bias_now_ms(self, backend: str, spec: BackendSpec) -> float:
        """The offset a prediction for ``backend`` would carry now: what ``sync`` would write
        to its ``bias_ms`` row, read straight from the learner (the column waits for the next
        decision)."""
        return self._factors(spec, self.learner.estimate(backend))[1]

    def frame_now(self, backend: str, spec: BackendSpec) -> LearnedFrame:
        """The learned rates a prediction for ``backend`` would use now (as ``bias_now_ms``)."""
        return self._factors(spec, self.learner.estimate(backend))[0]

    def frame_at(self, row: int) -> LearnedFrame:
        """The learned rates row ``row``'s predictions used since the last decision."""
        return LearnedFrame(
            self.prefill_rate.item(row), self.queue_scale.item(row), self.step_itl_ms.item(row)
        )

    @property
    def view(self) -> FleetView | None:
        """The view the columns are aligned with (a new one: a new layout of rows)."""
        return self._view

    def sync(self, view: FleetView) -> Sequence[int] | None:
        """Bring the columns up to date; the rows rewritten, or None when all were."""
        rows: Sequence[int]
        fresh = self._view is not view
        learner = self.learner
        if fresh:
            self._view = view
            self._allocate(len(view))
            rows = range(len(view))
            self._peer_rows = {}
            if learner.params.peer_weight > 0.0:
                for row, spec in enumerate(view.specs):
                    self._peer_rows.setdefault(peer_key(spec), []).append(row)
        else:
            rows = [view.index[b] for b in learner.dirty if b in view.index]
            for key in learner.dirty_peers:
                rows.extend(self._peer_rows.get(key, ()))
        learner.dirty.clear()
        learner.dirty_peers.clear()
        for row in rows:
            self._fill(row, view.specs[row], self.learner.estimate(view.names[row]))
        return None if fresh else rows

    def _allocate(self, size: int) -> None:
        for name in (
            "prefill_rate", "prefill_samples", "queue_scale", "bias_ms", "bias_dev_ms", "itl_ms",
            "step_itl_ms", "cold_start_ms", "service_ms", "prefill_ms", "ratio_p90", "learned_at",
        ):  # fmt: skip
            setattr(self, name, np.zeros(size))

    def _fill(self, row: int, spec: BackendSpec, est: BackendEstimate | None) -> None:
        itl = spec.itl_ms
        prefill_ms = 1000.0 * self.default_prompt_tokens / spec.prefill_tokens_per_s
        service_ms = spec.first_token_overhead_ms + prefill_ms + itl * self.default_output_tokens
        cold = spec.cold_start_ms
        self.bias_dev_ms[row] = 0.0
        self.ratio_p90[row], self.learned_at[row], self.prefill_samples[row] = 1.0, np.nan, 0
        if est is not None:
            itl = est.itl_ms or itl
            prefill_ms = est.prefill_ms if est.prefill_ms is not None else prefill_ms
            service_ms = est.service_ms or service_ms
            cold = est.cold_start_ms if est.cold_start_ms is not None else cold
            self.bias_dev_ms[row] = est.bias_dev_ms
            self.ratio_p90[row] = est.ratio_p90
            self.learned_at[row] = np.nan if est.last_at is None else est.last_at
            self.prefill_samples[row] = est.prefill_samples
        frame, bias = self._factors(spec, est)
        self.prefill_rate[row], self.queue_scale[row] = frame.prefill_rate, frame.queue_scale
        self.step_itl_ms[row], self.bias_ms[row] = frame.step_itl_ms, bias
        self.itl_ms[row] = itl
        self.prefill_ms[row], self.service_ms[row], self.cold_start_ms[row] = (
            prefill_ms,
            max(service_ms, 1e-3),
            cold,
        )

    def _factors(
        self, spec: BackendSpec, est: BackendEstimate | None
    ) -> tuple[LearnedFrame, float]:
        """The learned rates (as a ``LearnedFrame``) and offset of a backend configured as
        ``spec``, with its group's where peers are pooled."""
        rate, queue, step, bias = spec.prefill_tokens_per_s, 1.0, 1.0, 0.0
        if est is not None:
            rate, queue, step, bias = (
                est.prefill_rate or rate,
                est.queue_scale,
                est.step_scale,
                est.offset_ms,
            )
        step_itl = spec.itl_ms * step
        peer = self.learner.peer(spec)
        if peer is not None:
            w = self.learner.params.peer_weight
            rate = rate ** (1.0 - w) * (peer.prefill_rate or spec.prefill_tokens_per_s) ** w
            queue = queue ** (1.0 - w) * peer.queue_scale**w
            step_itl = spec.itl_ms * step ** (1.0 - w) * peer.step_scale**w
            bias = pooled_bias_ms(est, peer, w)
        return LearnedFrame(max(rate, 1e-6), queue, step_itl), bias


def pooled_bias_ms(est: BackendEstimate | None, peer: BackendEstimate, weight: float) -> float:
    """A backend's offset with its group's: only the slow part is pooled, a level shift is
    the backend's own."""
    own_bias, shift = (est.bias_ms, est.shift_ms) if est is not None else (0.0, 0.0)
    return (1.0 - weight) * own_bias + weight * peer.offset_ms + shift
