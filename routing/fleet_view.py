"""A ``FleetSnapshot`` as columns: per-backend numbers in numpy arrays, built once per snapshot.

A snapshot is built off the request path and shared by many decisions; turning it into arrays
once lets every decision score 100 backends with a handful of vector operations instead of a
Python loop per backend. Missing signals are NaN so the predictor can fall back explicitly.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from routing.types import BackendKind, BackendSpec, BackendState, FleetSnapshot

F64 = npt.NDArray[np.float64]
Mask = npt.NDArray[np.bool_]
Rows = npt.NDArray[np.intp]

_NAN = float("nan")


def _opt(value: float | int | None) -> float:
    return _NAN if value is None else float(value)


@dataclass(frozen=True, slots=True, eq=False)
class FleetView:
    fleet: FleetSnapshot
    names: tuple[str, ...]
    index: Mapping[str, int]
    specs: tuple[BackendSpec, ...]
    states: tuple[BackendState, ...]
    regions: tuple[str, ...]
    serverless: Mask
    max_num_seqs: F64
    prefill_rate: F64
    itl_ms: F64
    overhead_ms: F64
    cold_start_ms: F64
    idle_timeout_s: F64  # inf: always warm
    healthy: Mask
    ejected_until: F64  # -inf: not ejected
    circuit_open: Mask
    in_flight: F64
    running: F64  # NaN: engine does not report
    waiting: F64
    kv_cache_usage: F64
    metrics_as_of: F64
    has_metrics: Mask  # running is reported
    running0: F64  # running / waiting with NaN as 0, precomputed for the hot path
    waiting0: F64
    rtt_ms: F64  # measured, else the region table, else NaN
    rtt_measured: Mask
    rtt_as_of: F64
    last_traffic_at: F64  # NaN: never seen traffic
    memo: dict[Hashable, object] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.names)

    def remember(self, key: Hashable, build: Callable[[], object]) -> object:
        """Per-snapshot cache for things that depend only on the snapshot (and ``key``)."""
        if key not in self.memo:
            self.memo[key] = build()
        return self.memo[key]


def _column(states: tuple[BackendState, ...], get: Callable[[BackendState], float]) -> F64:
    return np.fromiter((get(s) for s in states), dtype=np.float64, count=len(states))


def _rtt(state: BackendState, fleet: FleetSnapshot) -> float:
    if state.rtt_ms is not None:
        return state.rtt_ms
    return fleet.region_rtt_ms.get(state.spec.region, _NAN)


def build_view(fleet: FleetSnapshot) -> FleetView:
    names = tuple(sorted(fleet.backends))
    running = _column(tuple(fleet.backends[n] for n in names), lambda s: _opt(s.running))
    waiting = _column(tuple(fleet.backends[n] for n in names), lambda s: _opt(s.waiting))
    states = tuple(fleet.backends[name] for name in names)
    specs = tuple(state.spec for state in states)
    inf = float("inf")
    return FleetView(
        fleet=fleet,
        names=names,
        index={name: row for row, name in enumerate(names)},
        specs=specs,
        states=states,
        regions=tuple(spec.region for spec in specs),
        serverless=np.array([s.kind is BackendKind.SERVERLESS for s in specs], dtype=np.bool_),
        max_num_seqs=_column(states, lambda s: max(1.0, float(s.spec.max_num_seqs))),
        prefill_rate=_column(states, lambda s: s.spec.prefill_tokens_per_s),
        itl_ms=_column(states, lambda s: s.spec.itl_ms),
        overhead_ms=_column(states, lambda s: s.spec.first_token_overhead_ms),
        cold_start_ms=_column(states, lambda s: s.spec.cold_start_ms),
        idle_timeout_s=_column(
            states, lambda s: inf if s.spec.idle_timeout_s is None else s.spec.idle_timeout_s
        ),
        healthy=np.array([s.healthy for s in states], dtype=np.bool_),
        ejected_until=_column(
            states, lambda s: -inf if s.ejected_until is None else s.ejected_until
        ),
        circuit_open=np.array([s.circuit_open for s in states], dtype=np.bool_),
        in_flight=_column(states, lambda s: float(s.in_flight)),
        running=running,
        waiting=waiting,
        kv_cache_usage=_column(states, lambda s: _opt(s.kv_cache_usage)),
        metrics_as_of=_column(
            states, lambda s: s.as_of if s.metrics_as_of is None else s.metrics_as_of
        ),
        has_metrics=~np.isnan(running),
        running0=np.nan_to_num(running),
        waiting0=np.nan_to_num(waiting),
        rtt_ms=_column(states, lambda s: _rtt(s, fleet)),
        rtt_measured=np.array([s.rtt_ms is not None for s in states], dtype=np.bool_),
        rtt_as_of=_column(states, lambda s: s.as_of if s.rtt_as_of is None else s.rtt_as_of),
        last_traffic_at=_column(states, lambda s: _opt(s.last_traffic_at)),
    )


class ViewCache:
    """Keeps the view of the last snapshot seen; a new snapshot object means a new view."""

    def __init__(self) -> None:
        self._view: FleetView | None = None

    def get(self, fleet: FleetSnapshot) -> FleetView:
        view = self._view
        if view is None or view.fleet is not fleet:
            view = self._view = build_view(fleet)
        return view
