"""A ``FleetSnapshot`` as columns: per-backend numbers in numpy arrays, kept current cheaply.

A decision scores every backend with a handful of vector operations instead of a Python loop
per backend, so the snapshot is turned into arrays. The gateway rebuilds its snapshot whenever
an in-flight count changes (every request), but it reuses the ``BackendState`` objects of the
backends that did not change. So a new snapshot with the same backends and specs *refreshes*
the view in place: only rows whose state object changed are rewritten, and ``changed`` says
which, so consumers that cache per-row work (load, predictor) redo just those rows.
Missing signals are NaN so the predictor can fall back explicitly.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from itertools import compress
from operator import is_not
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from routing.types import BackendKind, BackendSpec, BackendState, FleetSnapshot

F64 = npt.NDArray[np.float64]
Mask = npt.NDArray[np.bool_]
T = TypeVar("T")
Rows = npt.NDArray[np.intp]

_NAN = float("nan")
_INF = float("inf")
_STATE_COLUMNS = (
    "ejected_until", "in_flight", "running", "waiting", "kv_cache_usage", "metrics_as_of",
    "running0", "waiting0", "rtt_ms", "rtt_as_of", "last_traffic_at", "others_uncached",
    "others_requests", "others_in_flight",
)  # fmt: skip
_STATE_MASKS = ("healthy", "circuit_open", "has_metrics", "rtt_measured")


class FleetView:
    """Columns of one fleet layout (backends + specs); state columns follow each snapshot.

    Not a value: ``refresh`` mutates the state columns. ``version`` counts refreshes and
    ``changed`` lists the rows the latest one rewrote (every row right after building). A
    snapshot marked ``built_from`` the one the view follows names the only backends that may
    have changed, so a refresh touches those rows alone instead of comparing every backend.
    """

    __slots__ = (
        "fleet", "names", "index", "specs", "states", "regions", "serverless", "gateway", "gateway_rows",
        "max_num_seqs", "step_budget", "prefill_rate", "itl_ms", "overhead_ms", "cold_start_ms",
        "idle_timeout_s", "version", "gates_version", "changed", "memo", *_STATE_COLUMNS, *_STATE_MASKS,
        "downstream_ttft", "downstream_as_of",
    )  # fmt: skip

    fleet: FleetSnapshot
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
    others_uncached: F64  # other clients' uncached prompt tokens/s (routing.arrivals); 0: none
    others_requests: F64  # ...and requests/s
    others_in_flight: F64  # other replicas' open requests (BackendState); 0: none or unknown

    def __init__(self, fleet: FleetSnapshot) -> None:
        names = tuple(sorted(fleet.backends))
        states = [fleet.backends[name] for name in names]
        specs = tuple(state.spec for state in states)
        size = len(names)
        self.fleet = fleet
        self.names = names
        self.index: Mapping[str, int] = {name: row for row, name in enumerate(names)}
        self.specs = specs
        self.states = states
        self.regions = tuple(spec.region for spec in specs)
        self.serverless: Mask = np.array([s.kind is BackendKind.SERVERLESS for s in specs], bool)
        self.gateway: Mask = np.array([s.kind is BackendKind.GATEWAY for s in specs], bool)
        self.gateway_rows: list[int] = np.flatnonzero(self.gateway).tolist()
        self.max_num_seqs = _spec_column(specs, lambda s: max(1.0, float(s.max_num_seqs)))
        self.step_budget = _spec_column(specs, lambda s: max(1.0, float(s.max_num_batched_tokens)))
        self.prefill_rate = _spec_column(specs, lambda s: s.prefill_tokens_per_s)
        self.itl_ms = _spec_column(specs, lambda s: s.itl_ms)
        self.overhead_ms = _spec_column(specs, lambda s: s.first_token_overhead_ms)
        self.cold_start_ms = _spec_column(specs, lambda s: s.cold_start_ms)
        self.idle_timeout_s = _spec_column(
            specs, lambda s: _INF if s.idle_timeout_s is None else s.idle_timeout_s
        )
        for name in _STATE_COLUMNS:
            setattr(self, name, np.zeros(size))
        for name in _STATE_MASKS:
            setattr(self, name, np.zeros(size, np.bool_))
        # Gateway-kind backends only: what the remote reports per model, and since when.
        self.downstream_ttft: list[Mapping[str, float] | None] = [None] * size
        self.downstream_as_of = np.full(size, _NAN)
        self.memo: dict[Hashable, Any] = {}  # read back as its builder's type (``remember``)
        self.version = 0
        # Counts the refreshes that moved a row's health, circuit or ejection (``healthy``,
        # ``circuit_open``, ``ejected_until``): what a per-version cache of those waits for.
        self.gates_version = 0
        self.changed: Sequence[int] = range(size)
        for row, state in enumerate(states):
            self._write(row, state)

    def __len__(self) -> int:
        return len(self.names)

    def remember(self, key: Hashable, build: Callable[[], T]) -> T:
        """Cache for things that depend only on the layout (names and specs) and ``key``. A
        key is built by one caller only (it names what it holds), so the value is ``build``'s
        type: an annotation, not a runtime check (nor ``typing.cast``, a Python call) on the
        decision path."""
        if key not in self.memo:
            self.memo[key] = build()
        value: T = self.memo[key]
        return value

    def changed_since(self, version: int) -> Sequence[int] | None:
        """Rows rewritten after ``version``; None if that is not known (redo every row)."""
        if version == self.version:
            return ()
        return self.changed if version == self.version - 1 else None

    def refresh(self, fleet: FleetSnapshot) -> bool:
        """Follow ``fleet`` in place; False (and nothing changed) if its layout differs."""
        backends = fleet.backends
        if len(backends) != len(self.names) or fleet.gateway_region != self.fleet.gateway_region:
            return False
        old, specs = self.states, self.specs
        hint = fleet.changes
        if hint is not None and hint.previous() is self.fleet:  # only these names may differ
            index = self.index
            if not all(map(index.__contains__, hint.backends)):
                return False
            states = old.copy()
            changed = []
            for row in sorted(map(index.__getitem__, hint.backends)):
                state = states[row] = backends[self.names[row]]
                if state is not old[row]:
                    changed.append(row)
        else:
            try:
                states = list(map(backends.__getitem__, self.names))
            except KeyError:
                return False
            changed = list(compress(range(len(states)), map(is_not, states, old)))
        for row in changed:
            spec = states[row].spec
            if spec is not specs[row] and spec != specs[row]:
                return False
        if fleet.region_rtt_ms != self.fleet.region_rtt_ms:
            changed = list(range(len(states)))  # the RTT fallback of any row may move
        for row in changed:
            before, after = old[row], states[row]
            if (
                before.healthy != after.healthy
                or before.circuit_open != after.circuit_open
                or before.ejected_until != after.ejected_until
            ):
                self.gates_version += 1
                break
        self.fleet, self.states = fleet, states
        for row in changed:
            self._write(row, states[row])
        self.version += 1
        self.changed = changed
        return True

    def _write(self, row: int, s: BackendState) -> None:
        running, waiting = s.running, s.waiting
        self.healthy[row] = s.healthy
        self.ejected_until[row] = -_INF if s.ejected_until is None else s.ejected_until
        self.circuit_open[row] = s.circuit_open
        self.in_flight[row] = s.in_flight
        # None -> NaN inline, not by a helper: a row is rewritten on every request (the float
        # columns convert the ints themselves).
        self.running[row] = _NAN if running is None else running
        self.waiting[row] = _NAN if waiting is None else waiting
        self.has_metrics[row] = running is not None
        self.running0[row] = 0.0 if running is None else running
        self.waiting0[row] = 0.0 if waiting is None else waiting
        kv_cache_usage = s.kv_cache_usage
        self.kv_cache_usage[row] = _NAN if kv_cache_usage is None else kv_cache_usage
        self.metrics_as_of[row] = s.as_of if s.metrics_as_of is None else s.metrics_as_of
        rtt = s.rtt_ms
        self.rtt_measured[row] = rtt is not None
        if rtt is None:
            rtt = self.fleet.region_rtt_ms.get(s.spec.region, _NAN)
        self.rtt_ms[row] = rtt
        self.rtt_as_of[row] = s.as_of if s.rtt_as_of is None else s.rtt_as_of
        last_traffic_at = s.last_traffic_at
        self.last_traffic_at[row] = _NAN if last_traffic_at is None else last_traffic_at
        others = s.others_uncached_per_s
        self.others_uncached[row] = 0.0 if others is None else others
        requests = s.others_requests_per_s
        self.others_requests[row] = 0.0 if requests is None else requests
        replicas = s.others_in_flight
        self.others_in_flight[row] = 0.0 if replicas is None else replicas
        self.downstream_ttft[row] = s.downstream_ttft_ms
        self.downstream_as_of[row] = s.as_of if s.downstream_as_of is None else s.downstream_as_of


def _spec_column(specs: tuple[BackendSpec, ...], get: Callable[[BackendSpec], float]) -> F64:
    return np.fromiter((get(s) for s in specs), dtype=np.float64, count=len(specs))


def eligible_positions(rows: Rows, view_size: int, wanted: Sequence[int]) -> list[int]:
    """Positions into the eligible ``rows`` (ascending) of the view rows ``wanted`` (ascending)
    that are among them; every one of ``wanted`` when every row of the view is eligible."""
    if not wanted or len(rows) == view_size:
        return list(wanted)
    at = np.searchsorted(rows, wanted).tolist()
    size = len(rows)
    return [p for p, row in zip(at, wanted, strict=True) if p < size and rows.item(p) == row]


def build_view(fleet: FleetSnapshot) -> FleetView:
    return FleetView(fleet)


def empty_view() -> FleetView:
    """A view of no backends: what a column set holds before its first ``bind``."""
    return FleetView(FleetSnapshot(backends={}))


class ViewCache:
    """Keeps the view of the last snapshot seen, refreshed in place while its layout holds."""

    def __init__(self) -> None:
        self._view: FleetView | None = None

    def get(self, fleet: FleetSnapshot) -> FleetView:
        view = self._view
        if view is None or (view.fleet is not fleet and not view.refresh(fleet)):
            view = self._view = FleetView(fleet)
        return view
