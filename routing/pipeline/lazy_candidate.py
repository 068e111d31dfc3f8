"""A ranked ``Candidate`` whose breakdown is worked out on first read.

``decide`` returns a few ranked candidates (the fallback depth), but the gateway reads the
breakdown of the one it sends to, of a fallback only if it gets that far, and operators read
the rest through ``explain``. Building every breakdown eagerly (three dicts, a p90, a reason
string and a frozen dataclass each) was most of a decision's cost. So backend, score,
predicted TTFT / end-to-end and cached tokens are set at once, and the terms, their ages and
spreads, the p90 and the reason are computed together on the first read of any of them, from
values captured when the decision was taken (the columns they came from move on).

It is a ``Candidate`` in every way that matters: same attributes, ``==`` compares it with
plain candidates field by field, and ``dataclasses.replace``, ``copy`` and ``pickle`` give
plain ``Candidate`` values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

from routing.predictor_detail import TERMS, RowInputs, breakdown
from routing.quick_init import quick_init
from routing.types import Candidate

_FIELDS = tuple(f.name for f in fields(Candidate))


class RankContext(NamedTuple):
    """What every candidate of one decision shares, for its reason."""

    basis: str
    best_score: float
    chosen_reason: str
    chosen: RowInputs  # the chosen candidate's inputs, to say which terms cost the others


@quick_init
@dataclass(frozen=True, slots=True)
class _Details:
    terms_ms: Mapping[str, float]
    term_age_s: Mapping[str, float]
    term_spread_ms: Mapping[str, float]
    predicted_ttft_p90_ms: float
    reason: str


class LazyCandidate(Candidate):
    __slots__ = ("_context", "_details", "_inputs")
    _context: RankContext
    _details: _Details | None
    _inputs: RowInputs

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        # Called with Candidate's own arguments (dataclasses.replace does): a plain Candidate.
        return Candidate(*args, **kwargs)

    @classmethod
    def build(
        cls,
        backend: str,
        score: float,
        inputs: RowInputs,
        e2e_ms: float | None,
        cached_tokens: int,
        context: RankContext,
    ) -> LazyCandidate:
        self: LazyCandidate = object.__new__(cls)
        # The slots' own setters: half the cost of object.__setattr__ by name (a frozen
        # dataclass refuses plain assignment), four candidates a decision.
        _SET_BACKEND(self, backend)
        _SET_SCORE(self, score)
        _SET_TTFT(self, inputs.ttft_ms)
        _SET_E2E(self, e2e_ms)
        _SET_CACHED(self, cached_tokens)
        _SET_COST(self, None)
        _SET_INPUTS(self, inputs)
        _SET_CONTEXT(self, context)
        _SET_DETAILS(self, None)
        return self

    def _worked_out(self) -> _Details:
        details: _Details | None = self._details
        if details is None:
            details = _work_out(self._inputs, self.score, self._context)
            object.__setattr__(self, "_details", details)
        return details

    @property
    def terms_ms(self) -> Mapping[str, float]:
        return self._worked_out().terms_ms

    @property
    def term_age_s(self) -> Mapping[str, float]:
        return self._worked_out().term_age_s

    @property
    def term_spread_ms(self) -> Mapping[str, float]:
        return self._worked_out().term_spread_ms

    @property
    def predicted_ttft_p90_ms(self) -> float:
        return self._worked_out().predicted_ttft_p90_ms

    @property
    def reason(self) -> str:
        return self._worked_out().reason

    def plain(self) -> Candidate:
        return Candidate(*(getattr(self, name) for name in _FIELDS))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Candidate):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in _FIELDS)

    __hash__ = None  # type: ignore[assignment]  # like Candidate: it holds dicts

    def __repr__(self) -> str:
        return repr(self.plain())

    def __reduce__(self) -> tuple[Any, ...]:
        return (Candidate, tuple(getattr(self, name) for name in _FIELDS))


_SET_BACKEND, _SET_SCORE, _SET_TTFT, _SET_E2E, _SET_CACHED, _SET_COST = (
    getattr(Candidate, name).__set__
    for name in (
        "backend", "score", "predicted_ttft_ms", "predicted_e2e_ms", "cached_tokens",
        "expected_cost",
    )
)  # fmt: skip
_SET_INPUTS, _SET_CONTEXT, _SET_DETAILS = (
    getattr(LazyCandidate, name).__set__ for name in ("_inputs", "_context", "_details")
)


def _work_out(inputs: RowInputs, score: float, context: RankContext) -> _Details:
    parts = breakdown(inputs)
    terms = dict(zip(TERMS, inputs.terms, strict=True))
    if inputs is context.chosen:
        reason = context.chosen_reason
    else:
        reason = lost_reason(context.basis, score, context.best_score, inputs, context.chosen)
    return _Details(
        terms_ms=terms,
        term_age_s=dict(zip(TERMS, parts.age_s, strict=True)),
        term_spread_ms=dict(zip(TERMS, parts.spread_ms, strict=True)),
        predicted_ttft_p90_ms=parts.ttft_p90_ms,
        reason=reason,
    )


def lost_reason(basis: str, mine: float, best: float, inputs: RowInputs, chosen: RowInputs) -> str:
    """Why a candidate lost, with the two terms that cost it most against the chosen one."""
    text = f"{basis} {mine:.1f} vs {best:.1f} for the chosen one (+{mine - best:.1f})"
    deltas = [a - b for a, b in zip(inputs.terms, chosen.terms, strict=True)]
    deltas.append(inputs.placement_ms - chosen.placement_ms)
    worse = sorted(zip(deltas, (*TERMS, "placement"), strict=True), reverse=True)
    worst = ", ".join(f"{name} +{delta:.1f}" for delta, name in worse[:2] if delta > 0.05)
    return text + (": " + worst if worst else "")
