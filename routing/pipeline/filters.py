"""Filters: which backends may take this request at all. Each says why it rejected one.

A filter returns a mask over the whole fleet view. ``static`` filters depend only on the
snapshot and on ``static_key(profile)``, so their verdicts (and rejection reasons) are
computed once per snapshot and key, not once per request.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from routing.fleet_view import F64, FleetView, Mask, Rows
from routing.load import LoadColumns
from routing.quick_init import quick_init
from routing.types import Rejection, RequestProfile


@quick_init
@dataclass(frozen=True, slots=True)
class FilterContext:
    view: FleetView
    profile: RequestProfile
    now: float
    load: LoadColumns


class Filter(Protocol):
    name: str
    static: bool

    def static_key(self, profile: RequestProfile) -> Hashable: ...

    def keep(self, ctx: FilterContext) -> Mask | None:
        """Rows to keep; None when this filter rejects nobody for this request."""
        ...

    def reason(self, ctx: FilterContext, row: int) -> str: ...


class _Dynamic:
    static = False

    def static_key(self, profile: RequestProfile) -> Hashable:
        return None


class ServesModel:
    name = "serves_model"
    static = True

    def static_key(self, profile: RequestProfile) -> Hashable:
        return profile.model

    def keep(self, ctx: FilterContext) -> Mask:
        model = ctx.profile.model
        return np.fromiter((model in s.models for s in ctx.view.specs), np.bool_, len(ctx.view))

    def reason(self, ctx: FilterContext, row: int) -> str:
        return f"does not serve model {ctx.profile.model!r}"


class ServesApi:
    """The door's API (embeddings, Anthropic Messages, ...): a backend without it is no
    candidate, so a decision and its explanation name only backends the relay may try."""

    name = "serves_api"
    static = True

    def static_key(self, profile: RequestProfile) -> Hashable:
        return profile.api

    def keep(self, ctx: FilterContext) -> Mask | None:
        api = ctx.profile.api
        if api is None:
            return None
        return np.fromiter(
            (s.apis is None or api in s.apis for s in ctx.view.specs), np.bool_, len(ctx.view)
        )

    def reason(self, ctx: FilterContext, row: int) -> str:
        return f"does not serve the {ctx.profile.api!r} API"


class RegionAllowed:
    """Data residency: the gateway resolves tenant/origin placement into allowed regions."""

    name = "region_allowed"
    static = True

    def static_key(self, profile: RequestProfile) -> Hashable:
        return profile.allowed_regions

    def keep(self, ctx: FilterContext) -> Mask:
        allowed = ctx.profile.allowed_regions
        if allowed is None:
            return np.ones(len(ctx.view), np.bool_)
        return np.fromiter((r in allowed for r in ctx.view.regions), np.bool_, len(ctx.view))

    def reason(self, ctx: FilterContext, row: int) -> str:
        allowed = ", ".join(sorted(ctx.profile.allowed_regions or ()))
        return f"region {ctx.view.regions[row]!r} not allowed for this request ({allowed})"


class NotExcluded(_Dynamic):
    """Loop prevention: never route back to a gateway (or backend) the request came through."""

    name = "not_excluded"

    def keep(self, ctx: FilterContext) -> Mask | None:
        if not ctx.profile.exclude:
            return None
        keep = np.ones(len(ctx.view), np.bool_)
        for backend in ctx.profile.exclude:
            row = ctx.view.index.get(backend)
            if row is not None:
                keep[row] = False
        return keep

    def reason(self, ctx: FilterContext, row: int) -> str:
        return (
            f"{ctx.view.names[row]!r} is in this request's exclude list: the request already "
            "passed through it (a loop between gateways) or it already failed this request"
        )


class Healthy(_Dynamic):
    name = "healthy"

    def keep(self, ctx: FilterContext) -> Mask:
        view = ctx.view
        keep: Mask = view.healthy & (view.ejected_until <= ctx.now)
        return keep

    def reason(self, ctx: FilterContext, row: int) -> str:
        until = float(ctx.view.ejected_until[row])
        if until > ctx.now:
            return f"ejected as an outlier for another {until - ctx.now:.1f} s"
        return "failing health checks"


class CircuitClosed(_Dynamic):
    name = "circuit_closed"

    def keep(self, ctx: FilterContext) -> Mask:
        keep: Mask = ~ctx.view.circuit_open
        return keep

    def reason(self, ctx: FilterContext, row: int) -> str:
        return "circuit breaker open"


class CapacityLeft(_Dynamic):
    """Rejects backends whose queue is already ``max_queue_ratio`` x their batch size deep."""

    name = "capacity_left"

    def __init__(self, max_queue_ratio: float = 4.0) -> None:
        self.max_queue_ratio = max_queue_ratio

    def limit(self, view: FleetView) -> F64:
        limit = view.remember(
            ("capacity-limit", self.max_queue_ratio),
            lambda: view.max_num_seqs * (1.0 + self.max_queue_ratio),
        )
        return limit

    def keep(self, ctx: FilterContext) -> Mask:
        keep: Mask = ctx.load.depth < self.limit(ctx.view)
        return keep

    def reason(self, ctx: FilterContext, row: int) -> str:
        depth = ctx.load.depth.item(row)
        limit = self.limit(ctx.view).item(row)
        return f"no capacity left: {depth:.0f} requests running or queued, limit {limit:.0f}"


class DownstreamServes(_Dynamic):
    """A gateway-kind backend whose remote reports no backend for the model cannot serve it."""

    name = "downstream_serves"

    def keep(self, ctx: FilterContext) -> Mask | None:
        view, model = ctx.view, ctx.profile.model
        if not view.gateway_rows:
            return None
        keep = np.ones(len(view), np.bool_)
        for row in view.gateway_rows:
            report = view.downstream_ttft[row]
            if report is not None and model not in report:
                keep[row] = False
        return keep

    def reason(self, ctx: FilterContext, row: int) -> str:
        age = ctx.now - ctx.view.downstream_as_of.item(row)
        return (
            f"remote gateway reports no backend for model {ctx.profile.model!r} "
            f"(report {age:.1f} s old)"
        )


def default_filters(max_queue_ratio: float = 4.0) -> tuple[Filter, ...]:
    return (
        ServesModel(),
        ServesApi(),
        RegionAllowed(),
        NotExcluded(),
        Healthy(),
        CircuitClosed(),
        DownstreamServes(),
        CapacityLeft(max_queue_ratio),
    )


def _run(
    filters: Sequence[Filter], ctx: FilterContext, alive: Mask, rejected: list[Rejection]
) -> Mask:
    kept = [(filt, keep) for filt in filters if (keep := filt.keep(ctx)) is not None]
    passing = alive.copy()
    for _, keep in kept:
        passing &= keep
    if np.count_nonzero(passing) == np.count_nonzero(alive):
        return passing  # the common case: nobody rejected, no per-row work
    for filt, keep in kept:
        for row in np.flatnonzero(alive & ~keep).tolist():
            rejected.append(Rejection(ctx.view.names[row], filt.name, filt.reason(ctx, row)))
        alive = alive & keep
    return alive


@functools.cache
def _split(
    filters: tuple[Filter, ...],
) -> tuple[tuple[Filter, ...], tuple[Filter, ...], tuple[str, ...]]:
    """The leading static filters, the rest, and the static ones' names (a cache key part)."""
    lead = 0
    while lead < len(filters) and filters[lead].static:
        lead += 1
    return filters[:lead], filters[lead:], tuple(f.name for f in filters[:lead])


def static_verdict(
    filters: Sequence[Filter], ctx: FilterContext
) -> tuple[Mask, tuple[Rejection, ...], list[int]]:
    """The leading static filters' mask, rejections and kept rows, once per snapshot layout
    and static key (``FleetView.remember``)."""
    static, _, names = _split(tuple(filters))
    key = ("static-filters", names, tuple([f.static_key(ctx.profile) for f in static]))

    def run_static() -> tuple[Mask, tuple[Rejection, ...], list[int]]:
        found: list[Rejection] = []
        mask = _run(static, ctx, np.ones(len(ctx.view), np.bool_), found)
        return mask, tuple(found), np.flatnonzero(mask).tolist()

    cached = ctx.view.remember(key, run_static)
    return cached


def apply_filters(
    filters: Sequence[Filter], ctx: FilterContext
) -> tuple[Rows, tuple[Rejection, ...]]:
    """Rows that pass every filter, and a rejection (first failing filter) for each other."""
    alive, static_rejected, _ = static_verdict(filters, ctx)
    rejected: list[Rejection] = list(static_rejected)
    alive = _run(_split(tuple(filters))[1], ctx, alive, rejected)
    return np.flatnonzero(alive), tuple(rejected)
