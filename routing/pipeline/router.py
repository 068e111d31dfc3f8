"""``PipelineRouter``: filters -> scorer -> picker, plus in-flight accounting and explain.

Every policy, Meridian's own and the baselines, is one of these with different plugins, so
they share the same filters (an honest comparison) and the same ``Decision`` shape.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from routing.fleet_view import ViewCache
from routing.inflight import InFlightLedger
from routing.load import LoadColumns
from routing.pipeline.candidates import build_candidates, no_backend, rank
from routing.pipeline.filters import Filter, FilterContext, apply_filters
from routing.pipeline.pickers import Picker
from routing.pipeline.scoring import ScoreContext, Scorer
from routing.types import Decision, FleetSnapshot, Observation, RequestProfile


class PipelineRouter:
    def __init__(
        self,
        name: str,
        filters: Sequence[Filter],
        scorer: Scorer,
        picker: Picker,
        rng_seed: int,
        max_ranked: int = 4,
        inflight_ttl_s: float = 300.0,
    ) -> None:
        if max_ranked < 1:
            raise ValueError("max_ranked must be >= 1")
        self.name = name
        self.filters = tuple(filters)
        self.scorer = scorer
        self.picker = picker
        self.max_ranked = max_ranked
        self.ledger = InFlightLedger(inflight_ttl_s)
        self.load = LoadColumns(self.ledger)
        self._rng = random.Random(rng_seed)
        self._views = ViewCache()

    def decide(self, profile: RequestProfile, fleet: FleetSnapshot, now: float) -> Decision:
        """Rank the top ``max_ranked`` candidates and count the first as in flight."""
        return self._decide(profile, fleet, now, commit=True)

    def explain(self, profile: RequestProfile, fleet: FleetSnapshot, now: float) -> Decision:
        return self._decide(profile, fleet, now, commit=False)

    def observe(self, observation: Observation) -> None:
        self.load.release(observation.backend)
        self.scorer.observe(observation)

    def reserve(self, backend: str, now: float) -> None:
        self.load.reserve(backend, now)

    def release(self, backend: str) -> None:
        self.load.release(backend)

    def _decide(
        self, profile: RequestProfile, fleet: FleetSnapshot, now: float, commit: bool
    ) -> Decision:
        view = self._views.get(fleet)
        self.load.bind(view, now)
        rows, rejected = apply_filters(self.filters, FilterContext(view, profile, now, self.load))
        if len(rows) == 0:
            return no_backend(self.name, rejected, len(view))
        rng = self._rng
        if not commit:  # explain must not move the seeded sequence decide() will follow
            rng = random.Random()
            rng.setstate(self._rng.getstate())
        ctx = ScoreContext(view, rows, profile, now, self.load, rng)
        scores = self.scorer.score(ctx)
        chosen, among = self.picker.pick(scores.values, rng)
        order = rank(scores.values, chosen, self.max_ranked if commit else None)
        ranked = build_candidates(view, rows, order, scores, among)
        if commit:
            row = int(rows[chosen])
            self.load.reserve(view.names[row], now)
            self.scorer.decided(ctx, row, scores, chosen)
        return Decision(self.name, ranked, rejected, omitted=len(rows) - len(ranked))
