"""Label values bounded by the configuration: a model, region, backend or door the config does
not name is counted as ``other``, so no client input can grow the number of series."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.config import GatewayConfig

OTHER = "other"
NO_BACKEND = "none"  # a request no backend served (failed before any first token)
DOORS = frozenset({"http", "grpc"})


@dataclass(frozen=True, slots=True)
class LabelBounds:
    models: frozenset[str]
    regions: frozenset[str]
    backends: frozenset[str]
    doors: frozenset[str] = DOORS

    @classmethod
    def from_config(cls, config: GatewayConfig) -> LabelBounds:
        return cls(
            models=frozenset(config.models()),
            regions=frozenset(b.region for b in config.backends) | {NO_BACKEND},
            backends=frozenset(b.name for b in config.backends) | {NO_BACKEND},
        )

    def route(self, model: str, region: str, backend: str, door: str) -> tuple[str, str, str, str]:
        """(model, region, backend, door), each one the config names or ``other``."""
        return (
            model if model in self.models else OTHER,
            region if region in self.regions else OTHER,
            backend if backend in self.backends else OTHER,
            door if door in self.doors else OTHER,
        )

    def backend(self, backend: str) -> str:
        return backend if backend in self.backends else OTHER


def outcome_class(outcome: str) -> str:
    """An attempt's outcome as a bounded label: ``ok``, ``429``, ``4xx``, ``5xx`` or the kind."""
    if outcome.isdigit():
        return outcome if outcome == "429" else f"{outcome[0]}xx"
    return outcome
