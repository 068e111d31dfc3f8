"""The ``signals:`` section of the operator file (re-exported by :mod:`gateway.signals.hub`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from gateway.signals.engine_metrics import EngineMetricsConfig
from gateway.signals.geo import GeoConfig
from gateway.signals.outlier import OutlierConfig
from gateway.signals.probe_config import ProbeConfig


class SignalsConfig(BaseModel):
    """The ``signals:`` section of Meridian's configuration."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    probes: ProbeConfig = Field(
        default=ProbeConfig(), description="Active probes: round trip, health, optional canaries."
    )
    engine_metrics: EngineMetricsConfig = Field(
        default=EngineMetricsConfig(), description="Scraping the engines' Prometheus metrics."
    )
    geo: GeoConfig = Field(
        default=GeoConfig(),
        description="Locating clients (GeoIP) and modelling their round trip to each region.",
    )
    outlier: OutlierConfig = Field(
        default=OutlierConfig(), description="Ejecting backends that keep failing."
    )
    snapshot_min_interval_ms: float = Field(
        default=5.0,
        ge=0,
        description="Shortest time between rebuilds of the fleet snapshot routing reads, in ms.",
    )
    tick_interval_s: float = Field(
        default=1.0,
        gt=0,
        description="Period of the background housekeeping tick (readmissions, age gauges), in seconds.",
    )
