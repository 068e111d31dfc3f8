"""Distance and round-trip estimates between a client and a region. Pure arithmetic."""

from __future__ import annotations

import math
from dataclasses import dataclass

EARTH_RADIUS_KM = 6371.0

# Rough centroids, for Country databases that carry a continent but no coordinates.
CONTINENT_CENTROIDS: dict[str, tuple[float, float]] = {
    "AF": (2.0, 17.0),
    "AN": (-80.0, 0.0),
    "AS": (34.0, 100.0),
    "EU": (50.0, 10.0),
    "NA": (45.0, -100.0),
    "OC": (-25.0, 135.0),
    "SA": (-15.0, -60.0),
}


@dataclass(frozen=True, slots=True)
class RttModel:
    """RTT = 2 x distance / fibre speed x route inflation + constant.

    Light in fibre covers about 200 km per ms; real routes are longer than great circles (the
    inflation factor), and every path pays some fixed cost in switching and last-mile access.
    """

    fibre_km_per_ms: float = 200.0
    route_inflation: float = 1.5
    constant_ms: float = 5.0

    def rtt_ms(self, distance_km: float) -> float:
        one_way = distance_km / self.fibre_km_per_ms
        return 2.0 * one_way * self.route_inflation + self.constant_ms


def great_circle_km(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """Haversine distance on a spherical Earth."""
    phi1, phi2 = math.radians(lat1), math.radians(lat2)
    dphi, dlam = phi2 - phi1, math.radians(lon2 - lon1)
    h = math.sin(dphi / 2) ** 2 + math.cos(phi1) * math.cos(phi2) * math.sin(dlam / 2) ** 2
    return 2.0 * EARTH_RADIUS_KM * math.asin(min(1.0, math.sqrt(h)))
