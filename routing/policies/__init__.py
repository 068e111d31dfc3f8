"""Routing policies: Meridian's predicted-TTFT router and the baselines it is compared with.

``build_router(name, params, rng_seed)`` is how configuration becomes a router::

    routing:
      policy: predicted_ttft      # default; or any name in POLICIES
      params: {margin_ms: 2.0}    # validated against the policy's parameter model
      seed: 0
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from routing.errors import ErrorKind, RoutingError
from routing.pipeline.router import PipelineRouter
from routing.policies import (
    cache_aware,
    latency_ewma,
    least_loaded,
    llm_d,
    nearest_region,
    oracle,
    predicted_ttft,
    random_choice,
    round_robin,
    slo_cost,
)
from routing.policies.oracle import OracleTruth
from routing.policies.params import CommonParams
from routing.policies.predicted_ttft_params import PredictedTTFTParams

DEFAULT_POLICY = "predicted_ttft"

_Builder = Callable[[Any, int], PipelineRouter]

POLICIES: Mapping[str, tuple[type[CommonParams], _Builder]] = {
    "predicted_ttft": (PredictedTTFTParams, predicted_ttft.build),
    "round_robin": (CommonParams, round_robin.build),
    "random": (CommonParams, random_choice.build),
    "least_loaded": (CommonParams, least_loaded.build),
    "nearest_region": (nearest_region.NearestRegionParams, nearest_region.build),
    "latency_ewma": (latency_ewma.LatencyEwmaParams, latency_ewma.build),
    "cache_aware": (cache_aware.CacheAwareParams, cache_aware.build),
    "llm_d": (llm_d.LlmDParams, llm_d.build),
    "slo_cost": (slo_cost.SloCostParams, slo_cost.build),
}
SIMULATION_ONLY = ("oracle",)


def _params(name: str, model: type[CommonParams], raw: Mapping[str, Any]) -> CommonParams:
    try:
        return model.model_validate(dict(raw))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in err['loc']) or '(params)'}: {err['msg']}"
            for err in exc.errors()
        )
        allowed = ", ".join(sorted(model.model_fields))
        raise RoutingError(
            ErrorKind.BAD_PARAMS,
            f"routing.params for policy {name!r}: {problems} (known params: {allowed})",
        ) from exc


def build_router(
    name: str,
    params: Mapping[str, Any] | None = None,
    rng_seed: int = 0,
    *,
    oracle_truth: OracleTruth | None = None,
) -> PipelineRouter:
    """A router for policy ``name`` with validated ``params``; raises ``RoutingError``."""
    raw = params or {}
    if name == "oracle":
        if oracle_truth is None:
            raise RoutingError(
                ErrorKind.UNKNOWN_POLICY,
                "policy 'oracle' is simulation-only: the simulator passes oracle_truth",
            )
        return oracle.build(_params(name, CommonParams, raw), rng_seed, oracle_truth)
    entry = POLICIES.get(name)
    if entry is None:
        known = ", ".join(sorted(POLICIES))
        raise RoutingError(
            ErrorKind.UNKNOWN_POLICY, f"routing.policy {name!r} is not one of: {known}"
        )
    model, builder = entry
    return builder(_params(name, model, raw), rng_seed)
