"""What the gRPC door reads from a call's invocation metadata, in one pass.

``context.invocation_metadata()`` builds a fresh tuple from the C-core array on every call, so
the door reads it once per call and keeps the few keys it uses: the request id, the claimed
tenant, the API key, the trace context it forwards and the ``x-forwarded-for`` values.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

TENANT_KEY = "x-meridian-tenant"
AUTHORIZATION_KEY = "authorization"
REQUEST_ID_KEY = "x-request-id"
FORWARDED_FOR_KEY = "x-forwarded-for"
FORWARDED_KEYS = frozenset({"traceparent", "tracestate"})


@dataclass(frozen=True, slots=True)
class CallMetadata:
    request_id: str | None = None
    tenant: str | None = None
    authorization: str | None = None
    forward: tuple[tuple[str, str], ...] = ()  # trace context, as the client sent it
    forwarded_for: tuple[str, ...] = ()  # every x-forwarded-for value, in order


def read_call_metadata(pairs: Iterable[tuple[str, str | bytes]] | None) -> CallMetadata:
    """The keys the door uses; binary (``-bin``) values and unknown keys are ignored. For a key
    sent twice the last value counts (as a dict of the pairs would have it), except
    ``x-forwarded-for``, whose values are all kept."""
    request_id = tenant = authorization = None
    forward: dict[str, str] = {}
    forwarded_for: list[str] = []
    for key, value in pairs or ():
        if not isinstance(value, str):
            continue
        if key == REQUEST_ID_KEY:
            request_id = value
        elif key == TENANT_KEY:
            tenant = value
        elif key == AUTHORIZATION_KEY:
            authorization = value
        elif key == FORWARDED_FOR_KEY:
            forwarded_for.append(value)
        elif key in FORWARDED_KEYS:
            forward[key] = value
    return CallMetadata(
        request_id, tenant, authorization, tuple(forward.items()), tuple(forwarded_for)
    )
