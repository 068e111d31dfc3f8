"""``PipelineRouter``: filters -> scorer -> picker, plus in-flight accounting and explain.

Every policy, Meridian's own and the baselines, is one of these with different plugins, so
they share the same filters (an honest comparison) and the same ``Decision`` shape.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

import numpy as np

from routing.awaiting import AwaitingFirstToken
from routing.fleet_view import Rows, ViewCache
from routing.inflight import InFlightLedger
from routing.learned_columns import LearnedFrame
from routing.load import LoadColumns
from routing.pipeline.candidates import build_candidates, no_backend, rank
from routing.pipeline.filters import Filter, FilterContext, apply_filters
from routing.pipeline.pickers import Picker
from routing.pipeline.scoring import (
    FirstTokenLearner,
    PeerLearner,
    PrefixKeeper,
    Prewarmer,
    ScoreContext,
    Scorer,
)
from routing.prefix_index import PurgeProgress
from routing.step_clock import StepClock
from routing.types import Decision, FirstToken, FleetSnapshot, Observation, RequestProfile


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
        # The scorer's optional roles, checked once: a runtime Protocol check walks the
        # protocol's attributes (~1 us, on every first token and observation in the sim).
        self._first_token_learner = scorer if isinstance(scorer, FirstTokenLearner) else None
        self._prefix_keeper = scorer if isinstance(scorer, PrefixKeeper) else None
        self._peer_learner = scorer if isinstance(scorer, PeerLearner) else None
        self._prewarmer = scorer if isinstance(scorer, Prewarmer) else None
        self.picker = picker
        self.max_ranked = max_ranked
        self.ledger = InFlightLedger(inflight_ttl_s)
        self.load = LoadColumns(self.ledger)
        self._rng = random.Random(rng_seed)
        self._views = ViewCache()
        self._latest = -float("inf")  # the latest time seen (decide, reserve, observe)
        # Fed with the arrival of every token a stream brings, when the scorer keeps one.
        self.step_clock: StepClock | None = getattr(scorer, "step_clock", None)
        # Requests still waiting for a first token, when the scorer keeps count (routing.awaiting).
        self.awaiting: AwaitingFirstToken | None = getattr(scorer, "awaiting", None)

    def decide(self, profile: RequestProfile, fleet: FleetSnapshot, now: float) -> Decision:
        """Rank the top ``max_ranked`` candidates and count the first as in flight."""
        return self._decide(profile, fleet, now, commit=True)

    def explain(self, profile: RequestProfile, fleet: FleetSnapshot, now: float) -> Decision:
        return self._decide(profile, fleet, now, commit=False)

    def follow(
        self, profile: RequestProfile, fleet: FleetSnapshot, now: float, backend: str
    ) -> Decision:
        """As ``decide``, but commit to ``backend`` when it is eligible (else the policy's own
        choice): a replay that follows a recorded route learns from it exactly as the
        recording's router did (in flight, prefix index, prefill ahead, exploration credit)."""
        return self._decide(profile, fleet, now, commit=True, follow=backend)

    def observe(self, observation: Observation) -> None:
        if observation.at > self._latest:
            self._latest = observation.at
        self.load.release(observation.backend, observation.at)
        awaiting = self.awaiting
        if awaiting is not None and not observation.first_token_observed:
            if observation.ok:
                awaiting.answered(observation.backend, observation.at)
            else:
                awaiting.dropped(observation.backend)
        self.scorer.observe(observation)

    def observe_first_token(self, first: FirstToken) -> None:
        """A request routed to ``first.backend`` produced its first token: learns the TTFT
        model now; the request stays in flight until ``observe`` (pass
        ``first_token_observed=True`` there) or ``release``."""
        if first.at > self._latest:
            self._latest = first.at
        if self.awaiting is not None:
            self.awaiting.answered(first.backend, first.at)
        learner = self._first_token_learner
        if learner is not None:
            learner.observe_first_token(first.observation())

    @property
    def learns_from_peers(self) -> bool:
        """Whether first tokens other gateways saw teach this router (``observe_peer_...``)."""
        return self._peer_learner is not None

    def learned_frame(self, backend: str) -> LearnedFrame | None:
        """The learned factors this router's predictions for ``backend`` use now (None: it
        learns nothing, or has not routed with ``backend`` in its fleet yet)."""
        learner = self._peer_learner
        return None if learner is None else learner.learned_frame(backend)

    def observe_peer_first_token(self, first: FirstToken, frame: LearnedFrame) -> None:
        """A first token another gateway of this region saw, predicted in its ``frame``:
        learned as if this router had routed it (routing.peer_learning). No reservation of
        this router's is touched."""
        if self._peer_learner is not None:
            self._peer_learner.observe_peer_first_token(first, frame)

    def observe_canary(
        self,
        fleet: FleetSnapshot,
        backend: str,
        at: float,
        ttft_ms: float,
        prompt_tokens: int,
        cold_start: bool | None = None,
    ) -> bool:
        """A canary (a one-token request the gateway itself sent ``backend``) got its first
        token ``ttft_ms`` after it left, at ``at``: learned like a request's first token,
        against what this router predicts there for a request that size. A canary takes the
        request path, so it re-measures a backend no request is choosing. False when nothing
        was learned (a policy that learns nothing, a backend it would not route to)."""
        state = fleet.backends.get(backend)
        if self._first_token_learner is None or state is None:
            return False
        profile = RequestProfile(
            model=min(state.spec.models, default=""),
            prompt_tokens=prompt_tokens,
            max_tokens=1,
            exclude=frozenset(fleet.backends).difference((backend,)),
        )
        chosen = self.explain(profile, fleet, at).chosen
        if chosen is None or chosen.predicted_ttft_ms is None:
            return False
        self.observe_first_token(
            FirstToken(
                backend, at, ttft_ms, chosen.terms_ms, prompt_tokens, 0,
                predicted_ttft_ms=chosen.predicted_ttft_ms, cold_start=cold_start,
            )
        )  # fmt: skip
        return True

    @property
    def keeps_prefixes(self) -> bool:
        """Whether this policy keeps a prefix index (``note_remote_prefix`` does something)."""
        return self._prefix_keeper is not None

    def note_remote_prefix(self, backend: str, blocks: Mapping[int, float], now: float) -> int:
        """Another replica's router saw ``backend`` serve these prefix blocks (block hash ->
        when, on this router's clock). A block already known keeps the newer time; the blocks
        need not form a chain. Returns how many were new or refreshed (0: no prefix index)."""
        if self._prefix_keeper is not None:
            return self._prefix_keeper.note_remote_prefix(backend, blocks, now)
        return 0

    def purge_step(self, now: float, max_scan: int) -> PurgeProgress:
        """One bounded step of the prefix index's expiry sweep; a policy without an index has
        nothing to sweep. The gateway calls it in the background, yielding between steps."""
        if self._prefix_keeper is not None:
            return self._prefix_keeper.purge_step(now, max_scan)
        return PurgeProgress(0, 0, True, 0)

    def warm_up(self, fleet: FleetSnapshot, now: float) -> tuple[str, ...]:
        """Backends the caller should send a one-token warm-up request to now (the policy's
        pre-warm share, routing.prewarm); they count as sent. Call it on a timer (every
        snapshot refresh is plenty), never on the request path."""
        prewarmer = self._prewarmer
        if prewarmer is None:
            return ()
        if now > self._latest:
            self._latest = now
        view = self._views.get(fleet)
        self.load.bind(view, now)
        return prewarmer.warm_up(view, self.load, now)

    def reserve(self, backend: str, now: float) -> None:
        if now > self._latest:
            self._latest = now
        self.load.reserve(backend, now)

    def release(self, backend: str) -> None:
        # No outcome, no time: the latest time this router was told is close enough.
        self.load.release(backend, self._latest)
        if self.awaiting is not None:
            self.awaiting.dropped(backend)

    def _decide(
        self,
        profile: RequestProfile,
        fleet: FleetSnapshot,
        now: float,
        commit: bool,
        follow: str | None = None,
    ) -> Decision:
        if now > self._latest:
            self._latest = now
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
        if follow is not None:
            chosen = _position(view.index.get(follow), rows, chosen)
        order = rank(scores.values, chosen, self.max_ranked if commit else None)
        ranked = build_candidates(view, rows, order, scores, among)
        if commit:
            row = int(rows[chosen])
            self.load.reserve(view.names[row], now)
            self.scorer.decided(ctx, row, scores, chosen)
        return Decision(
            self.name, ranked, rejected, omitted=len(rows) - len(ranked), explored=scores.explored
        )


def _position(row: int | None, rows: Rows, otherwise: int) -> int:
    """Where ``row`` is among the eligible ``rows``, or ``otherwise`` when it is not there."""
    if row is None:
        return otherwise
    found = np.flatnonzero(rows == row)
    return int(found[0]) if len(found) else otherwise
