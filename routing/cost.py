"""What one request is expected to cost on each backend, from the prices in configuration.

Per-token prices are per million tokens, in one currency (the operator's)::

    cost = (uncached prompt x prompt price + cached prompt x cached price
            + expected output x completion price) / 1e6

Dedicated capacity may instead (or also) carry an hourly price. The hour is paid whether the
backend is busy or not, so what one more request *adds* is an opportunity cost that grows with
how full the backend already is. Meridian's marginal cost is linear in utilisation::

    hourly part = hourly price / 3600 x service_s / max_num_seqs x min(utilisation, 1)
    service_s   = uncached prompt / prefill_tokens_per_s + expected output x itl_ms / 1000
    utilisation = (running + queued) / max_num_seqs, as the load columns see it

An idle dedicated backend costs (almost) nothing extra, so it soaks up traffic before per-token
capacity does; a full one charges the request its whole share of the hour (one of
``max_num_seqs`` slots for ``service_s``), as if it displaced a request that would have paid
it. A backend without a price costs 0 (capacity already paid for by other means).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from routing.fleet_view import F64, FleetView, Rows
from routing.price import Price


@dataclass(frozen=True, slots=True)
class PriceColumns:
    """Prices aligned with a view's rows (a view's specs never change, so built once)."""

    prompt: F64
    cached: F64
    completion: F64
    hourly: F64  # 0 where none
    any_hourly: bool


def price_columns(view: FleetView) -> PriceColumns:
    def build() -> PriceColumns:
        prices = [spec.price or Price() for spec in view.specs]
        prompt = np.array([p.prompt_per_mtok for p in prices], dtype=np.float64)
        cached = np.array(
            [
                p.prompt_per_mtok if p.cached_prompt_per_mtok is None else p.cached_prompt_per_mtok
                for p in prices
            ],
            dtype=np.float64,
        )
        completion = np.array([p.completion_per_mtok for p in prices], dtype=np.float64)
        hourly = np.array([p.hourly or 0.0 for p in prices], dtype=np.float64)
        return PriceColumns(prompt, cached, completion, hourly, bool(np.any(hourly > 0)))

    columns = view.remember("price_columns", build)
    return columns


def expected_cost(
    view: FleetView,
    rows: Rows,
    prompt_tokens: int,
    cached: Mapping[int, float],
    output_tokens: int,
    depth: F64,
) -> F64:
    """Expected cost of the request on each of ``rows`` (aligned with ``rows``).

    ``cached`` maps view rows to the prompt tokens expected to be cached there; ``depth`` is
    running + queued per view row (the utilisation of hourly-priced capacity).
    """
    columns = price_columns(view)
    held = np.zeros(len(view))
    if cached:
        held[list(cached)] = list(cached.values())
    held = np.minimum(held[rows], float(prompt_tokens))
    uncached = float(prompt_tokens) - held
    tokens = (
        uncached * columns.prompt[rows]
        + held * columns.cached[rows]
        + float(output_tokens) * columns.completion[rows]
    ) / 1e6
    if not columns.any_hourly:
        result: F64 = tokens
        return result
    seqs = view.max_num_seqs[rows]
    service_s = uncached / view.prefill_rate[rows] + output_tokens * view.itl_ms[rows] / 1000.0
    utilisation = np.minimum(depth[rows] / seqs, 1.0)
    hourly: F64 = columns.hourly[rows] / 3600.0 * service_s / seqs * utilisation
    total: F64 = tokens + hourly
    return total
