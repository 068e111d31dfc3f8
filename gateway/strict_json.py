"""Request bodies parsed strictly: one value per key, integers that fit, no NaN.

The gateway forwards the client's body unchanged, so what it routes on must be exactly what the
backend will read. ``{"model": "a", "model": "b"}`` is legal-looking JSON that parsers resolve
differently (first wins, last wins): refused. So are integers beyond signed 64 bits (parsers
disagree on them too: orjson turns them into floats) and the non-standard ``NaN``/``Infinity``.

orjson does the fast validating parse (and refuses invalid UTF-8 and lone surrogates); the
standard library's scanner then sees every key pair and integer literal, which orjson hides.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson

from gateway.errors import ApiError, bad_request

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


class _Refused(ValueError):
    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                shown = key if len(key) <= 64 and key.isprintable() else key[:64].encode().hex()
                raise _Refused(f"duplicate key '{shown}' in the request body", "duplicate_key")
            seen.add(key)
    return result


def _bounded_int(text: str) -> int:
    if len(text) > 20:  # beyond any int64, and int() on huge literals is slow
        raise _Refused("an integer in the request body is out of range", "integer_out_of_range")
    value = int(text)
    if not INT64_MIN <= value <= INT64_MAX:
        raise _Refused("an integer in the request body is out of range", "integer_out_of_range")
    return value


def _no_constants(name: str) -> Any:
    raise _Refused(f"'{name}' is not valid JSON", "invalid_json")


# The standard library's C scanner with the hooks, built once: ``json.loads`` with hooks builds
# a decoder per call and reaches the scanner through four Python calls (the request path).
_DECODER = json.JSONDecoder(
    object_pairs_hook=_unique_pairs, parse_int=_bounded_int, parse_constant=_no_constants
)
_scan: Callable[[str, int], tuple[Any, int]] = vars(_DECODER)["scan_once"]  # not in typeshed
_JSON_SPACE = " \t\n\r"


def loads_request(body: bytes) -> Any:
    """The parsed body, or :class:`ApiError` 400 (``invalid_json``, ``duplicate_key``, …)."""
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise bad_request(
            f"request body is not valid JSON: {exc.msg}", code="invalid_json"
        ) from None
    try:
        text = body.decode()  # orjson accepted it: UTF-8, one JSON value with spaces around
        _scan(text, len(text) - len(text.lstrip(_JSON_SPACE)))
    except _Refused as refused:
        raise bad_request(refused.message, code=refused.code) from None
    # orjson accepted it; the scanner's own limits (StopIteration: no value where orjson saw
    # one, which json.loads turned into a ValueError, as this does: never a 500).
    except (ValueError, RecursionError, StopIteration):
        raise bad_request("request body is not valid JSON", code="invalid_json") from None
    return payload


__all__ = ["ApiError", "loads_request"]
