"""Build small GeoIP databases for tests: City-like MMDB files mapping test networks.

Reusable by any test that needs clients "from" a region: ``write_city_db(tmp_path / "c.mmdb")``
and send requests with ``X-Forwarded-For: EU_CLIENT`` (through a trusted proxy) or from a
peer in one of the networks. All networks are documentation / reserved ranges, never routed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from mmdb_writer import MMDBWriter
from netaddr import IPSet


@dataclass(frozen=True, slots=True)
class FixtureNetwork:
    cidr: str
    country: str
    continent: str
    latitude: float | None = None  # None: a Country-style record (continent only)
    longitude: float | None = None


FRANKFURT = FixtureNetwork("192.0.2.0/24", "DE", "EU", 50.11, 8.68)
VIRGINIA = FixtureNetwork("198.51.100.0/24", "US", "NA", 38.9, -77.0)
TOKYO = FixtureNetwork("203.0.113.0/24", "JP", "AS", 35.68, 139.69)
BRAZIL_NO_LOCATION = FixtureNetwork("100.64.0.0/24", "BR", "SA")
IPV6_PARIS = FixtureNetwork("2001:db8::/48", "FR", "EU", 48.86, 2.35)

DEFAULT_NETWORKS = (FRANKFURT, VIRGINIA, TOKYO, BRAZIL_NO_LOCATION, IPV6_PARIS)

EU_CLIENT = "192.0.2.10"
US_CLIENT = "198.51.100.10"
AP_CLIENT = "203.0.113.10"
SA_CLIENT = "100.64.0.10"
EU_CLIENT_V6 = "2001:db8::10"
UNKNOWN_CLIENT = "233.252.0.1"  # not in any test network

# Region coordinates matching the networks above, for GeoConfig(regions=...).
TEST_REGIONS = {
    "eu-central": (50.11, 8.68),
    "us-east": (38.9, -77.0),
    "ap-northeast": (35.68, 139.69),
}


def _record(network: FixtureNetwork) -> dict[str, object]:
    record: dict[str, object] = {
        "country": {"iso_code": network.country, "names": {"en": network.country}},
        "continent": {"code": network.continent, "names": {"en": network.continent}},
    }
    if network.latitude is not None and network.longitude is not None:
        record["location"] = {"latitude": network.latitude, "longitude": network.longitude}
    return record


def write_city_db(path: Path, networks: Iterable[FixtureNetwork] = DEFAULT_NETWORKS) -> Path:
    """Write a GeoLite2-City-shaped database (IPv6 tree, IPv4 mapped) and return its path."""
    writer = MMDBWriter(
        ip_version=6,
        ipv4_compatible=True,
        database_type="GeoLite2-City",
        languages=["en"],
        description="Meridian test GeoIP database",
    )
    for network in networks:
        writer.insert_network(IPSet([network.cidr]), _record(network))
    writer.to_db_file(str(path))
    return path
