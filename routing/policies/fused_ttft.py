"""The fused decision path of ``predicted_ttft``: the generic pipeline's answer, with less work.

``PipelineRouter._decide`` runs every filter as a plugin (a mask each, a context object, the
rejection walk), then the scorer, the picker and the ranking. For the request the gateway sends
most — no exclude list, no gateway-kind backend in the fleet, nobody rejected by a dynamic
filter — the dynamic filters collapse into four in-place mask operations, and the picker and
the ranking need only the top ``max_ranked`` positions. Whenever one of those conditions does
not hold, the fused path steps aside *before changing anything* and the generic path decides
(binding the view and the load twice is idempotent). ``decide`` therefore returns what the
generic path returns, field for field, and leaves the router in the same state:
tests/routing/test_fused_ttft.py drives both side by side over random fleets and requests.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np

from routing.fleet_view import FleetView, Mask, Rows
from routing.pipeline.candidates import build_candidates, pick_and_rank, rank, rank_values
from routing.pipeline.filters import CapacityLeft, Filter, FilterContext, static_verdict
from routing.pipeline.pickers import MarginPicker
from routing.pipeline.router import PipelineRouter
from routing.pipeline.scoring import ScoreContext, Scorer
from routing.policies.scalar_ttft import SCALAR_MAX_BACKENDS, RowScorer, row_candidates
from routing.types import Decision, FleetSnapshot, Rejection, RequestProfile

# The dynamic filters the fused mask stands for, in the generic order.
FUSED_DYNAMIC = ("not_excluded", "healthy", "circuit_closed", "downstream_serves", "capacity_left")


class FusedTTFTRouter(PipelineRouter):
    def __init__(
        self,
        name: str,
        filters: Sequence[Filter],
        scorer: Scorer,
        picker: MarginPicker,
        rng_seed: int,
        max_ranked: int = 4,
        inflight_ttl_s: float = 300.0,
    ) -> None:
        super().__init__(name, filters, scorer, picker, rng_seed, max_ranked, inflight_ttl_s)
        self.margin_picker = picker
        dynamic = [f for f in self.filters if not f.static]
        capacity = dynamic[-1] if dynamic else None
        fusable = tuple(f.name for f in dynamic) == FUSED_DYNAMIC
        # None: these filters are not the ones the fused mask stands for (always generic).
        self.capacity = capacity if fusable and isinstance(capacity, CapacityLeft) else None
        self.fused = 0  # decisions the fused path took (the rest went the generic way)
        self.scalar = 0  # ...of which the scalar path (fleets of up to ``scalar_max``)
        self.scalar_max = SCALAR_MAX_BACKENDS
        self.row_scorer = scorer if isinstance(scorer, RowScorer) else None
        # healthy & circuit closed, and the latest ejection's end, of one ``gates_version``:
        # they change only when a snapshot refresh rewrites a row's health or circuit.
        self._signals_of: tuple[FleetView, int] | None = None
        self._healthy_and_closed: Mask = np.zeros(0, np.bool_)
        self._ejected_last = float("inf")
        self._alive_of: tuple[FleetView | None, int, Mask | None] = (None, -1, None)
        self._alive: Mask = np.zeros(0, np.bool_)

    def decide(self, profile: RequestProfile, fleet: FleetSnapshot, now: float) -> Decision:
        decision = self._fused(profile, fleet, now)
        if decision is None:
            return self._decide(profile, fleet, now, commit=True)
        self.fused += 1
        return decision

    def _static_alive(self, view: FleetView, static: Mask) -> Mask:
        """``static`` & healthy & circuit closed (cached per view version and static mask)."""
        key = self._alive_of
        if key[0] is not view or key[1] != view.gates_version or key[2] is not static:
            self._alive = static & self._healthy_closed(view)
            self._alive_of = (view, view.gates_version, static)
        return self._alive

    def _healthy_closed(self, view: FleetView) -> Mask:
        """Healthy with a closed circuit, per row of ``view`` as it is now (cached until a
        refresh moves a row's gates); sets ``_ejected_last``, the latest ``ejected_until``
        (-inf: nobody ejected)."""
        key = (view, view.gates_version)
        if self._signals_of != key:
            self._signals_of = key
            self._healthy_and_closed = view.healthy & ~view.circuit_open
            self._ejected_last = float(view.ejected_until.max()) if len(view) else -float("inf")
        return self._healthy_and_closed

    def _fused(self, profile: RequestProfile, fleet: FleetSnapshot, now: float) -> Decision | None:
        capacity = self.capacity
        if capacity is None or profile.exclude:
            return None
        if now > self._latest:
            self._latest = now
        view = self._views.get(fleet)
        load = self.load
        load.bind(view, now)
        if view.gateway_rows:  # downstream reports may reject: the generic filters say why
            return None
        static, rejected, kept = static_verdict(
            self.filters, FilterContext(view, profile, now, load)
        )
        if len(view) <= self.scalar_max and self.row_scorer is not None:
            return self._scalar(view, profile, now, kept, rejected, capacity, self.row_scorer)
        alive = load.depth < capacity.limit(view)
        alive &= self._static_alive(view, static)
        if self._ejected_last > now:  # someone is (or was) ejected: the only per-time check
            alive &= view.ejected_until <= now
        rows: Rows = alive.nonzero()[0]
        if len(rows) != len(kept) or not kept:  # a dynamic filter rejected one: reasons needed
            return None
        rng: random.Random = self._rng
        ctx = ScoreContext(view, rows, profile, now, load, rng)
        scores = self.scorer.score(ctx)
        picked = pick_and_rank(self.margin_picker, scores.values, rng, self.max_ranked)
        if picked is None:
            chosen, among = self.margin_picker.pick(scores.values, rng)
            order = rank(scores.values, chosen, self.max_ranked)
        else:
            chosen, among, order = picked
        ranked = build_candidates(view, rows, order, scores, among)
        row = rows.item(chosen)
        load.reserve(view.names[row], now)
        self.scorer.decided(ctx, row, scores, chosen)
        return Decision(
            self.name, ranked, rejected, omitted=len(rows) - len(ranked), explored=scores.explored
        )

    def _scalar(
        self,
        view: FleetView,
        profile: RequestProfile,
        now: float,
        kept: list[int],
        rejected: tuple[Rejection, ...],
        capacity: CapacityLeft,
        scorer: RowScorer,
    ) -> Decision | None:
        """The same decision with Python floats (routing.policies.scalar_ttft)."""
        load = self.load
        healthy, circuit_open, until = view.healthy, view.circuit_open, view.ejected_until
        depth, limit = load.depth, capacity.limit(view)
        rows = [
            row
            for row in kept
            if healthy.item(row) and not circuit_open.item(row) and until.item(row) <= now
            and depth.item(row) < limit.item(row)
        ]  # fmt: skip
        if len(rows) != len(kept) or not kept:  # a dynamic filter rejected one: reasons needed
            return None
        self.scalar += 1
        scored = scorer.score_rows(view, rows, profile, now, load)
        chosen, among = self.margin_picker.pick_values(scored.values, self._rng)
        order = rank_values(scored.values, chosen, self.max_ranked)
        ranked = row_candidates(
            view, order, scored, among, lambda prediction: scorer.capture_row(view, prediction, now)
        )
        prediction = scored.predictions[chosen]
        load.reserve(view.names[prediction.row], now)
        scorer.decided_row(view, load, profile, now, prediction)
        return Decision(
            self.name, ranked, rejected, omitted=len(rows) - len(ranked), explored=scored.explored
        )
