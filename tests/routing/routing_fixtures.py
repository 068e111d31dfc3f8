"""Small builders for routing tests: specs, states and fleets with sensible defaults."""

from __future__ import annotations

from typing import Any

import numpy as np

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


def array_attributes(obj: Any) -> list[tuple[str, np.ndarray]]:
    """Every array attribute of ``obj``: by ``dir``, not ``vars``, so a compiled class (no
    ``__dict__``; ``make compiled-test``) is read the same way."""
    values = ((name, getattr(obj, name)) for name in dir(obj) if not name.startswith("__"))
    return [(name, value) for name, value in values if isinstance(value, np.ndarray)]
