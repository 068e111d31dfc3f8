"""Small builders for routing tests: specs, states and fleets with sensible defaults."""

from __future__ import annotations

from typing import Any

from routing.types import BackendKind, BackendSpec, BackendState, FleetSnapshot, RequestProfile

MODEL = "m"


def spec(name: str, region: str = "r1", **kwargs: Any) -> BackendSpec:
    kwargs.setdefault("kind", BackendKind.DEDICATED)
    kwargs.setdefault("models", frozenset({MODEL}))
    return BackendSpec(name=name, region=region, **kwargs)


def state(
    name: str, region: str = "r1", spec_kwargs: dict[str, Any] | None = None, **kwargs: Any
) -> BackendState:
    return BackendState(spec=spec(name, region, **(spec_kwargs or {})), **kwargs)


def fleet(*states: BackendState, **kwargs: Any) -> FleetSnapshot:
    kwargs.setdefault("gateway_region", "r1")
    return FleetSnapshot({s.spec.name: s for s in states}, **kwargs)


def profile(**kwargs: Any) -> RequestProfile:
    kwargs.setdefault("model", MODEL)
    return RequestProfile(**kwargs)
