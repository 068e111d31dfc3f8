"""The scorer plugin interface: turn eligible rows into scores (lower is better)."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from routing.fleet_view import F64, FleetView, Rows
from routing.learned_columns import LearnedFrame
from routing.load import LoadColumns
from routing.predictor import Prediction
from routing.prefix_index import PurgeProgress
from routing.quick_init import quick_init
from routing.types import Candidate, FirstToken, Observation, RequestProfile

# Adds what a policy knows beyond the prediction to its ranked candidates (positions: ``order``).
Annotate = Callable[[tuple[Candidate, ...], Sequence[int]], tuple[Candidate, ...]]


class RoutingInvariantError(RuntimeError):
    """A state routing's own construction rules out (a bug, not bad input). Raised instead of
    an ``assert``: the gateway's core turns it into a logged impossible state with the request
    id and the door's own error (gateway/lifecycle/call.py)."""


@quick_init
@dataclass(frozen=True, slots=True)
class ScoreContext:
    view: FleetView
    rows: Rows  # eligible rows of ``view``, ascending
    profile: RequestProfile
    now: float
    load: LoadColumns
    rng: random.Random


@quick_init
@dataclass(frozen=True, slots=True)
class Scores:
    values: F64  # aligned with ``ScoreContext.rows``; lower is better
    basis: str  # what the values are, for humans: "predicted TTFT (ms)"
    prediction: Prediction | None = None
    mode: str = ""  # which branch of a policy decided, e.g. "cache affinity"
    explored: bool = False  # one row's score was lowered to re-measure it (routing.exploration)
    annotate: Annotate | None = None

    def predicted(self) -> Prediction:
        """The prediction of a scorer that always predicts (predicted_ttft and its kin)."""
        if self.prediction is None:
            raise RoutingInvariantError(f"scores without a prediction ({self.basis})")
        return self.prediction


class Scorer(Protocol):
    def score(self, ctx: ScoreContext) -> Scores: ...

    def decided(self, ctx: ScoreContext, row: int, scores: Scores, position: int) -> None:
        """The router committed to ``row`` (not called by ``explain``)."""
        ...

    def observe(self, observation: Observation) -> None: ...


@runtime_checkable
class PrefixKeeper(Protocol):
    """A scorer with a prefix index that can learn what other replicas' routers saw."""

    def note_remote_prefix(self, backend: str, blocks: Mapping[int, float], now: float) -> int: ...

    def purge_step(self, now: float, max_scan: int) -> PurgeProgress:
        """One bounded step of the index's expiry sweep (``PrefixIndex.purge_step``)."""
        ...


@runtime_checkable
class FirstTokenLearner(Protocol):
    """A scorer that learns its TTFT model at each request's first token (``observe`` at the
    end of the stream then skips TTFT when ``Observation.first_token_observed``)."""

    def observe_first_token(self, observation: Observation) -> None: ...


@runtime_checkable
class PeerLearner(Protocol):
    """A scorer that also learns from first tokens other gateways of its region saw
    (routing.peer_learning)."""

    def learned_frame(self, backend: str) -> LearnedFrame | None: ...

    def observe_peer_first_token(self, first: FirstToken, frame: LearnedFrame) -> None: ...


@runtime_checkable
class Prewarmer(Protocol):
    """A scorer that keeps part of the serverless pool warm (routing.prewarm)."""

    def warm_up(self, view: FleetView, load: LoadColumns, now: float) -> tuple[str, ...]:
        """Backends to send a one-token warm-up request to now (recorded as sent)."""
        ...


class StatelessScorer:
    """Base for scorers that keep no state between decisions."""

    def decided(self, ctx: ScoreContext, row: int, scores: Scores, position: int) -> None:
        return None

    def observe(self, observation: Observation) -> None:
        return None
