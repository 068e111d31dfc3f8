"""Fleet files: regions, the round-trip matrix between them, client populations, backends.

A fleet file is validated as a whole; an error names the file and the key path
(``backends[2] (eu-serverless).engine.cold_start_ms: ...``) so an operator can fix it at once.
Each backend's ``engine`` overlays ``defaults.engine`` key by key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from loadtests import rtt_matrix
from loadtests.emulator.config import EmulatedBackendConfig, EngineParams, FaultConfig
from loadtests.validation import problems
from routing.types import BackendKind


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ClientPopulation(_Strict):
    region: str
    weight: float = Field(default=1.0, gt=0, description="share of traffic from here")


class FleetDefaults(_Strict):
    models: Sequence[str] = ("emulated-model",)
    engine: Mapping[str, Any] = Field(default_factory=dict)
    faults: Mapping[str, Any] = Field(default_factory=dict)


class BackendEntry(_Strict):
    name: str = Field(min_length=1)
    region: str
    kind: BackendKind = BackendKind.DEDICATED
    models: Sequence[str] | None = None
    engine: EngineParams = EngineParams.model_validate({})
    faults: FaultConfig = FaultConfig.model_validate({})
    seed: int | None = None
    rtt_ms: float | None = Field(default=None, ge=0, description="override the region matrix")


class FleetFile(_Strict):
    name: str = "fleet"
    description: str = ""
    regions: Sequence[str] = Field(min_length=1)
    # rtt_ms[a][b]: round trip between regions a and b; one direction is enough.
    rtt_ms: Mapping[str, Mapping[str, float]] = Field(default_factory=dict)
    intra_region_rtt_ms: float = Field(default=1.0, ge=0)
    clients: Mapping[str, ClientPopulation] = Field(default_factory=dict)
    defaults: FleetDefaults = FleetDefaults()
    backends: Sequence[BackendEntry] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _overlay_defaults(cls, data: Any) -> Any:
        if not isinstance(data, Mapping) or not isinstance(data.get("backends"), list):
            return data
        defaults = data.get("defaults") or {}
        base_engine = defaults.get("engine") or {} if isinstance(defaults, Mapping) else {}
        base_faults = defaults.get("faults") or {} if isinstance(defaults, Mapping) else {}
        backends = []
        for entry in data["backends"]:
            if isinstance(entry, Mapping):
                entry = dict(entry)
                entry["engine"] = {**base_engine, **(entry.get("engine") or {})}
                entry["faults"] = {**base_faults, **(entry.get("faults") or {})}
            backends.append(entry)
        return {**data, "backends": backends}

    @model_validator(mode="after")
    def _consistent(self) -> FleetFile:
        known = set(self.regions)
        rtt_matrix.check(self.rtt_ms, known)
        for key, population in self.clients.items():
            if population.region not in known:
                raise ValueError(f"clients.{key}.region: unknown region {population.region!r}")
        names: set[str] = set()
        for i, backend in enumerate(self.backends):
            if backend.region not in known:
                raise ValueError(f"backends[{i}].region: unknown region {backend.region!r}")
            if backend.name in names:
                raise ValueError(f"backends[{i}].name: duplicate backend name {backend.name!r}")
            names.add(backend.name)
        return self

    def rtt(self, a: str, b: str) -> float:
        """Round trip in ms between two regions (symmetric)."""
        value = rtt_matrix.lookup(self.rtt_ms, a, b)
        if value is None:
            return self.intra_region_rtt_ms if a == b else 0.0
        return value

    def backend_configs(self, from_region: str | None = None) -> list[EmulatedBackendConfig]:
        """Backends as seen from ``from_region`` (its RTT to each); None = no added distance."""
        configs = []
        for i, entry in enumerate(self.backends):
            rtt = entry.rtt_ms
            if rtt is None:
                rtt = self.rtt(from_region, entry.region) if from_region is not None else 0.0
            configs.append(
                EmulatedBackendConfig(
                    name=entry.name,
                    models=tuple(entry.models or self.defaults.models),
                    region=entry.region,
                    kind=entry.kind,
                    engine=entry.engine,
                    faults=entry.faults,
                    rtt_ms=rtt,
                    seed=entry.seed if entry.seed is not None else i,
                )
            )
        return configs


@dataclass(frozen=True, slots=True)
class FleetError:
    kind: str  # "unreadable" | "invalid"
    message: str

    def __str__(self) -> str:
        return self.message


def load_fleet(path: str | Path) -> FleetFile | FleetError:
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        return FleetError("unreadable", f"{path}: cannot read fleet file: {exc}")
    try:
        return FleetFile.model_validate(raw)
    except ValidationError as exc:
        return FleetError("invalid", problems(exc, str(path), raw))
