"""The wire form between ``meridian serve --workers N``'s workers and the host's state
coordinator (``host_server``): one JSON object per line over a Unix socket.

A call is ``{"op": ..., ...arguments}`` and its answer ``{"r": result}`` or ``{"e": message}``;
a connection that sent ``{"op": "events"}`` then only receives ``{"b": batch}`` and
``{"tick": true}`` lines. Batches travel in their pub/sub form (``records.encode_batch``), so
this adds no second encoding of the shared records.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import orjson

from gateway.state.errors import StateError, StateErrorKind, StateUnavailable
from gateway.state.records import (
    SharedPull,
    TokenResult,
    batch_of,
    decode_ejection,
    decode_signal,
    encode_ejection,
    encode_signal,
)
from gateway.state.store import StoreSummary

MAX_LINE_BYTES = 64 * 1024 * 1024  # a full pull of a large prefix index fits


def line(message: dict[str, Any]) -> bytes:
    return orjson.dumps(message) + b"\n"


def read_message(raw: bytes) -> dict[str, Any]:
    try:
        message = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _protocol(f"undecodable host-state message: {exc}") from None
    if not isinstance(message, dict):
        raise _protocol("host-state message is not an object")
    return message


def encode_pull(pull: SharedPull) -> dict[str, Any]:
    return {
        "i": {r: dict(counts) for r, counts in pull.in_flight.items()},
        "p": {b: [[h, t] for h, t in blocks.items()] for b, blocks in pull.prefix.items()},
        "s": {b: orjson.loads(encode_signal(s)) for b, s in pull.signals.items()},
        "e": {b: orjson.loads(encode_ejection(e)) for b, e in pull.ejections.items()},
    }


def decode_pull(data: Any) -> SharedPull:
    try:
        return SharedPull(
            in_flight={
                str(r): {str(b): int(n) for b, n in counts.items()}
                for r, counts in data["i"].items()
            },
            prefix={str(b): {int(h): float(t) for h, t in pairs} for b, pairs in data["p"].items()},
            signals={str(b): decode_signal(orjson.dumps(s)) for b, s in data["s"].items()},
            ejections={str(b): decode_ejection(orjson.dumps(e)) for b, e in data["e"].items()},
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise _protocol(f"malformed host-state pull: {exc!r}") from None


def encode_tokens(result: TokenResult) -> list[Any]:
    return [result.allowed, result.tokens_left, result.retry_after_s]


def decode_tokens(data: Any) -> TokenResult:
    try:
        allowed, left, retry = data
        return TokenResult(bool(allowed), float(left), float(retry))
    except (TypeError, ValueError) as exc:
        raise _protocol(f"malformed host-state token result: {exc!r}") from None


def encode_summary(summary: StoreSummary) -> dict[str, Any]:
    return asdict(summary)


def decode_summary(data: Any, kind: str) -> StoreSummary:
    try:
        fields = dict(data)
        fields["backend"] = kind
        fields["replicas"] = tuple(fields.get("replicas", ()))
        return StoreSummary(**fields)
    except (TypeError, ValueError) as exc:
        raise _protocol(f"malformed host-state summary: {exc!r}") from None


def decode_event(message: dict[str, Any]) -> Any:
    """A ``WriteBatch`` from an events line, or None for a tick."""
    if "b" in message:
        return batch_of(message["b"])
    return None


def _protocol(message: str) -> StateUnavailable:
    return StateUnavailable(StateError(StateErrorKind.PROTOCOL, message))
