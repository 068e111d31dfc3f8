"""A backend's price list (see ``routing.cost`` for how a request's cost is worked out)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Price:
    """A backend's price list; per-token prices per million tokens."""

    prompt_per_mtok: float = 0.0
    cached_prompt_per_mtok: float | None = None  # None: the same as an uncached prompt token
    completion_per_mtok: float = 0.0
    hourly: float | None = None  # dedicated capacity, per hour (marginal cost: module docs)

    def tokens_cost(self, uncached: float, cached: float, completion: float) -> float:
        """The per-token part for these token counts (what a request's usage is billed)."""
        cached_price = self.prompt_per_mtok
        if self.cached_prompt_per_mtok is not None:
            cached_price = self.cached_prompt_per_mtok
        total = uncached * self.prompt_per_mtok + cached * cached_price
        return (total + completion * self.completion_per_mtok) / 1e6
