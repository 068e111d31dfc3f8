"""The SignalHub's side of shared state (``gateway.signals.shared_fleet.SharedFleet``).

The hub keeps monotonic time, the store keeps wall time (it crosses processes and hosts), so
every measurement is converted at this edge: ``wall_at -> now - (wall_now - wall_at)``.
A measurement travels as one ``SignalRecord`` per backend: the probe's verdict in
``healthy``, and in ``values`` the numbers the snapshot needs with the wall time each was taken.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable

from gateway.signals.probe_summary import ProbeSummary
from gateway.state.records import SignalRecord
from gateway.state.sync import SharedStateSync
from routing.types import BackendState

_RTT = "rtt_ms"
_RTT_AT = "rtt_at"
_PROBE_AT = "probe_at"
_METRICS_AT = "metrics_at"
_RUNNING = "running"
_WAITING = "waiting"
_KV = "kv_cache_usage"


def probe_lease(backend: str) -> str:
    return f"probe:{backend}"


class SharedFleetBridge:
    def __init__(self, sync: SharedStateSync, wall: Callable[[], float] = time.time) -> None:
        self._sync = sync
        self._view = sync.snapshot()
        self._wall = wall
        self._contended: set[str] = set()

    def contend(self, backends: Iterable[str]) -> None:
        """Compete for probing these backends (done lazily for any backend ``leads`` is asked
        about, so a reload that adds backends needs nothing more)."""
        fresh = [b for b in backends if b not in self._contended]
        self._contended.update(fresh)
        self._sync.contend(probe_lease(b) for b in fresh)

    # -- SharedFleet ---------------------------------------------------------------------

    def leads(self, backend: str) -> bool:
        if backend not in self._contended:
            self.contend((backend,))
        return self._sync.is_leader(probe_lease(backend))

    def note_in_flight(self, backend: str, delta: int) -> None:
        self._sync.note_in_flight(backend, delta)

    def version(self) -> int:
        return self._view.remote_version

    def publish(self, measured: BackendState, probe: ProbeSummary | None, now: float) -> None:
        to_wall = _Clocks(now, self._wall()).to_wall
        values: dict[str, float] = {}
        if measured.rtt_ms is not None and measured.rtt_as_of is not None:
            values[_RTT] = measured.rtt_ms
            values[_RTT_AT] = to_wall(measured.rtt_as_of)
        if probe is not None and probe.last_probe_at is not None:
            values[_PROBE_AT] = to_wall(probe.last_probe_at)
        if measured.metrics_as_of is not None:
            values[_METRICS_AT] = to_wall(measured.metrics_as_of)
            for key, value in (
                (_RUNNING, measured.running),
                (_WAITING, measured.waiting),
                (_KV, measured.kv_cache_usage),
            ):
                if value is not None:
                    values[key] = float(value)
        healthy = probe.active_healthy if probe is not None else True
        record = SignalRecord(self._wall(), self._sync.replica, healthy, values)
        self._sync.note_signal(measured.spec.name, record)

    def merge(self, local: BackendState, now: float) -> BackendState:
        name = local.spec.name
        others = self._view.remote_in_flight(name)
        record = self._remote_record(name)
        # The others' part apart too: routing counts theirs sent since a scrape (routing.load);
        # unset and 0 alike mean none of theirs open.
        if record is None:
            return (
                local
                if others == 0
                else dataclasses.replace(
                    local, in_flight=local.in_flight + others, others_in_flight=others
                )
            )
        to_mono = _Clocks(now, self._wall()).to_mono
        changes: dict[str, object] = {
            "in_flight": local.in_flight + others,
            "others_in_flight": others,
        }
        values = record.values
        if _RTT in values and _RTT_AT in values:
            rtt_at = to_mono(values[_RTT_AT])
            if local.rtt_as_of is None or rtt_at > local.rtt_as_of:
                changes.update(rtt_ms=values[_RTT], rtt_as_of=rtt_at)
        if _METRICS_AT in values:
            metrics_at = to_mono(values[_METRICS_AT])
            if local.metrics_as_of is None or metrics_at > local.metrics_as_of:
                changes.update(
                    running=_int_or_none(values.get(_RUNNING)),
                    waiting=_int_or_none(values.get(_WAITING)),
                    kv_cache_usage=values.get(_KV),
                    metrics_as_of=metrics_at,
                )
        merged = dataclasses.replace(local, **changes)  # type: ignore[arg-type]
        known = [at for at in (merged.rtt_as_of, merged.metrics_as_of) if at is not None]
        return dataclasses.replace(merged, as_of=max(known)) if known else merged

    def remote_active_health(
        self, backend: str, local_probe_at: float | None, now: float
    ) -> bool | None:
        record = self._remote_record(backend)
        if record is None or _PROBE_AT not in record.values:
            return None
        probe_at = _Clocks(now, self._wall()).to_mono(record.values[_PROBE_AT])
        if local_probe_at is not None and local_probe_at >= probe_at:
            return None
        return record.healthy

    def _remote_record(self, backend: str) -> SignalRecord | None:
        """The newest shared measurement, unless this replica took it (then ours is as new)."""
        record = self._view.signal(backend)
        if record is None or record.source == self._sync.replica:
            return None
        return record


@dataclasses.dataclass(frozen=True, slots=True)
class _Clocks:
    mono_now: float
    wall_now: float

    def to_wall(self, mono_at: float) -> float:
        return self.wall_now - (self.mono_now - mono_at)

    def to_mono(self, wall_at: float) -> float:
        # Never in the future: a writer's clock slightly ahead must not make a signal fresher.
        return self.mono_now - max(0.0, self.wall_now - wall_at)


def _int_or_none(value: float | None) -> int | None:
    return None if value is None else int(value)
