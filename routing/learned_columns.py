"""The learner's per-backend estimates as columns aligned with the current ``FleetView``.

Configured values fill in wherever nothing has been learned yet. Only backends the learner
touched since the last decision are rewritten, so observing every request stays cheap.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from routing.fleet_view import F64, FleetView
from routing.learner import BackendEstimate, OnlineLearner, peer_key
from routing.types import BackendSpec


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
        est = self.learner.estimate(backend)
        peer = self.learner.peer(spec)
        if peer is not None:
            return pooled_bias_ms(est, peer, self.learner.params.peer_weight)
        return 0.0 if est is None else est.offset_ms

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
        rate = spec.prefill_tokens_per_s
        itl = spec.itl_ms
        prefill_ms = 1000.0 * self.default_prompt_tokens / rate
        service_ms = spec.first_token_overhead_ms + prefill_ms + itl * self.default_output_tokens
        cold = spec.cold_start_ms
        self.queue_scale[row], self.bias_ms[row], self.bias_dev_ms[row] = 1.0, 0.0, 0.0
        self.step_itl_ms[row] = spec.itl_ms
        self.ratio_p90[row], self.learned_at[row], self.prefill_samples[row] = 1.0, np.nan, 0
        if est is not None:
            rate = est.prefill_rate or rate
            itl = est.itl_ms or itl
            prefill_ms = est.prefill_ms if est.prefill_ms is not None else prefill_ms
            service_ms = est.service_ms or service_ms
            cold = est.cold_start_ms if est.cold_start_ms is not None else cold
            self.queue_scale[row] = est.queue_scale
            self.step_itl_ms[row] = spec.itl_ms * est.step_scale
            self.bias_ms[row], self.bias_dev_ms[row] = est.offset_ms, est.bias_dev_ms
            self.ratio_p90[row] = est.ratio_p90
            self.learned_at[row] = np.nan if est.last_at is None else est.last_at
            self.prefill_samples[row] = est.prefill_samples
        peer = self.learner.peer(spec)
        if peer is not None:
            w = self.learner.params.peer_weight
            rate = rate ** (1.0 - w) * (peer.prefill_rate or spec.prefill_tokens_per_s) ** w
            self.queue_scale[row] = self.queue_scale.item(row) ** (1.0 - w) * peer.queue_scale**w
            own_step = est.step_scale if est is not None else 1.0
            self.step_itl_ms[row] = spec.itl_ms * own_step ** (1.0 - w) * peer.step_scale**w
            self.bias_ms[row] = pooled_bias_ms(est, peer, w)
        self.prefill_rate[row], self.itl_ms[row] = max(rate, 1e-6), itl
        self.prefill_ms[row], self.service_ms[row], self.cold_start_ms[row] = (
            prefill_ms,
            max(service_ms, 1e-3),
            cold,
        )


def pooled_bias_ms(est: BackendEstimate | None, peer: BackendEstimate, weight: float) -> float:
    """A backend's offset with its group's: only the slow part is pooled, a level shift is
    the backend's own."""
    own_bias, shift = (est.bias_ms, est.shift_ms) if est is not None else (0.0, 0.0)
    return (1.0 - weight) * own_bias + weight * peer.offset_ms + shift
