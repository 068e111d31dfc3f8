"""The values that travel between replicas, and their compact wire form (JSON via orjson).

Timestamps here are wall-clock seconds (``time.time()``): they are compared across processes
and hosts, unlike the monotonic clock routing/ uses. Convert with ``age = wall_now - at``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import orjson

from gateway.state.errors import StateError, StateErrorKind, StateUnavailable
from gateway.state.samples import LearningSample, decode_sample, encode_sample


class Timed(Protocol):
    @property
    def at(self) -> float: ...


TimedT = TypeVar("TimedT", bound=Timed)


def keep_newer(into: dict[str, TimedT], key: str, value: TimedT) -> None:
    current = into.get(key)
    if current is None or value.at >= current.at:
        into[key] = value


@dataclass(frozen=True, slots=True)
class SignalRecord:
    """One probe or scrape result for one backend (values keyed like BackendState fields)."""

    at: float
    source: str  # replica that measured it
    healthy: bool = True
    values: Mapping[str, float] = field(default_factory=dict)  # rtt_ms, running, waiting, ...


@dataclass(frozen=True, slots=True)
class Ejection:
    """Outlier-detection state for one backend: ejected until ``until`` (wall seconds)."""

    until: float
    at: float
    count: int = 1  # consecutive ejections; ejection time grows with it
    reason: str = ""


@dataclass(frozen=True, slots=True)
class TokenResult:
    allowed: bool
    tokens_left: float
    retry_after_s: float  # 0 when allowed


@dataclass(frozen=True, slots=True)
class WriteBatch:
    """What one replica sends in one flush. In-flight counts are absolute, never deltas, so a
    re-sent batch is harmless and a dead replica's counts simply expire."""

    replica: str
    at: float
    in_flight: Mapping[str, int] | None = None  # None = unchanged since last heartbeat
    prefix: Mapping[str, Mapping[int, float]] = field(default_factory=dict)  # hash -> seen at
    signals: Mapping[str, SignalRecord] = field(default_factory=dict)
    ejections: Mapping[str, Ejection] = field(default_factory=dict)
    samples: tuple[LearningSample, ...] = ()  # first tokens to learn from (not stored)

    def is_empty(self) -> bool:
        return self.in_flight is None and not (
            self.prefix or self.signals or self.ejections or self.samples
        )

    def block_count(self) -> int:
        return sum(len(blocks) for blocks in self.prefix.values())


@dataclass(frozen=True, slots=True)
class SharedPull:
    """Everything a replica reads back from the store in one refresh."""

    in_flight: Mapping[str, Mapping[str, int]]  # replica -> backend -> count (live replicas)
    prefix: Mapping[str, Mapping[int, float]]  # backend -> hash -> last seen
    signals: Mapping[str, SignalRecord]
    ejections: Mapping[str, Ejection]


def encode_signal(record: SignalRecord) -> bytes:
    return orjson.dumps(
        {"at": record.at, "src": record.source, "ok": record.healthy, "v": dict(record.values)}
    )


def decode_signal(raw: bytes | str) -> SignalRecord:
    data = _loads(raw)
    try:
        return SignalRecord(
            at=float(data["at"]),
            source=str(data["src"]),
            healthy=bool(data["ok"]),
            values={str(k): float(v) for k, v in data["v"].items()},
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise _protocol_error(f"malformed signal record: {exc!r}") from exc


def encode_ejection(ejection: Ejection) -> bytes:
    return orjson.dumps(
        {"until": ejection.until, "at": ejection.at, "n": ejection.count, "why": ejection.reason}
    )


def decode_ejection(raw: bytes | str) -> Ejection:
    data = _loads(raw)
    try:
        return Ejection(
            until=float(data["until"]),
            at=float(data["at"]),
            count=int(data["n"]),
            reason=str(data["why"]),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise _protocol_error(f"malformed ejection record: {exc!r}") from exc


def encode_batch(batch: WriteBatch) -> bytes:
    return orjson.dumps(
        {
            "r": batch.replica,
            "t": batch.at,
            "i": None if batch.in_flight is None else dict(batch.in_flight),
            # JSON object keys are strings; hashes travel as [hash, seen_at] pairs.
            "p": {b: [[h, t] for h, t in blocks.items()] for b, blocks in batch.prefix.items()},
            "s": {b: orjson.loads(encode_signal(s)) for b, s in batch.signals.items()},
            "e": {b: orjson.loads(encode_ejection(e)) for b, e in batch.ejections.items()},
            "l": [encode_sample(sample) for sample in batch.samples],
        }
    )


def decode_batch(raw: bytes | str) -> WriteBatch:
    return batch_of(_loads(raw))


def batch_of(data: Any) -> WriteBatch:
    """A ``WriteBatch`` from ``encode_batch``'s JSON already parsed (e.g. as part of a larger
    message: no second encoding round trip)."""
    try:
        in_flight = data["i"]
        return WriteBatch(
            replica=str(data["r"]),
            at=float(data["t"]),
            in_flight=None if in_flight is None else {str(k): int(v) for k, v in in_flight.items()},
            prefix={str(b): {int(h): float(t) for h, t in pairs} for b, pairs in data["p"].items()},
            signals={str(b): decode_signal(orjson.dumps(s)) for b, s in data["s"].items()},
            ejections={str(b): decode_ejection(orjson.dumps(e)) for b, e in data["e"].items()},
            # Absent from a replica of an earlier release: it shares no samples.
            samples=tuple(decode_sample(sample) for sample in data.get("l", ())),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise _protocol_error(f"malformed state event: {exc!r}") from exc


def _loads(raw: bytes | str) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _protocol_error(f"undecodable state record: {exc}") from exc


def _protocol_error(message: str) -> StateUnavailable:
    return StateUnavailable(StateError(StateErrorKind.PROTOCOL, message))
