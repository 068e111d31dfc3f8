"""Client geography with a GeoIP database built by the test itself (no downloads)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from gateway.signals.forwarded import client_address, parse_ip, parse_networks
from gateway.signals.geo import GeoConfig, GeoLocator, GeoSource, RegionLocation
from gateway.signals.geo_model import RttModel, great_circle_km
from tests.servers import settle
from tests.signals.geo_fixtures import (
    AP_CLIENT,
    EU_CLIENT,
    EU_CLIENT_V6,
    FRANKFURT,
    SA_CLIENT,
    TEST_REGIONS,
    UNKNOWN_CLIENT,
    US_CLIENT,
    FixtureNetwork,
    write_city_db,
)

PROXY = "10.0.0.5"
TRUSTED = ["10.0.0.0/8", "fd00::/8"]


def config(db: Path | None, **overrides: object) -> GeoConfig:
    regions = {
        name: {"latitude": lat, "longitude": lon} for name, (lat, lon) in TEST_REGIONS.items()
    }
    return GeoConfig.model_validate(
        {
            "database_path": db,
            "trusted_proxies": TRUSTED,
            "regions": regions,
            "default_origin": "us-east",
            **overrides,
        }
    )


@pytest.fixture
def locator(tmp_path: Path) -> GeoLocator:
    geo = GeoLocator(config(write_city_db(tmp_path / "city.mmdb")))
    assert geo.load() is None
    return geo


@pytest.mark.parametrize(
    ("client", "region", "country"),
    [
        (EU_CLIENT, "eu-central", "DE"),
        (US_CLIENT, "us-east", "US"),
        (AP_CLIENT, "ap-northeast", "JP"),
        (EU_CLIENT_V6, "eu-central", "FR"),
        (f"::ffff:{AP_CLIENT}", "ap-northeast", "JP"),  # dual-stack sockets report this
    ],
)
def test_clients_map_to_their_nearest_region(locator, client, region, country):
    geo = locator.locate(client, None)
    assert geo.origin == region and geo.country == country
    assert geo.source is GeoSource.LOOKUP
    assert min(geo.region_rtt_ms, key=geo.region_rtt_ms.__getitem__) == region


def test_rtt_estimates_follow_the_model(locator):
    geo = locator.locate(EU_CLIENT, None)
    assert geo.region_rtt_ms["eu-central"] == pytest.approx(5.0)  # same place: the constant
    lat, lon = TEST_REGIONS["us-east"]
    km = great_circle_km(FRANKFURT.latitude or 0, FRANKFURT.longitude or 0, lat, lon)
    assert 6400 < km < 6700  # Frankfurt - Washington
    assert geo.region_rtt_ms["us-east"] == pytest.approx(2 * km / 200 * 1.5 + 5.0)


def test_measured_rtts_override_the_model(tmp_path):
    db = write_city_db(tmp_path / "city.mmdb")
    geo = GeoLocator(config(db, measured_rtt_ms={"de": {"us-east": 71.0}}))
    geo.load()
    assert geo.locate(EU_CLIENT, None).region_rtt_ms["us-east"] == 71.0
    geo.record_measured_rtt("DE", "ap-northeast", 230.0)
    assert geo.locate(EU_CLIENT, None).region_rtt_ms["ap-northeast"] == 230.0


def test_forwarded_for_is_honoured_only_from_trusted_proxies(locator):
    trusted = locator.locate(PROXY, f"{AP_CLIENT}, {EU_CLIENT}")
    assert trusted.origin == "eu-central"  # right-most untrusted hop
    spoofed = locator.locate(US_CLIENT, AP_CLIENT)  # an untrusted peer claims to be in Tokyo
    assert spoofed.origin == "us-east"
    chain = locator.locate(PROXY, [f"{AP_CLIENT}, {EU_CLIENT}", "10.1.2.3"])  # two headers
    assert chain.origin == "eu-central"
    assert locator.locate("[fd00::1]:443", f"{AP_CLIENT}:5555").origin == "ap-northeast"


@pytest.mark.parametrize(
    ("peer", "forwarded"),
    [
        (None, None),
        ("", EU_CLIENT),
        ("not-an-ip", None),
        (PROXY, "garbage"),
        (PROXY, f"{EU_CLIENT}, unknown"),
        (PROXY, ",,,"),
        (UNKNOWN_CLIENT, None),  # not in the database
        ("127.0.0.1", None),
        (PROXY, "\x00\xff" * 100),
    ],
)
def test_garbage_and_unknown_addresses_get_the_default_origin(locator, peer, forwarded):
    geo = locator.locate(peer, forwarded)
    assert geo.origin == "us-east" and geo.source is GeoSource.DEFAULT
    assert geo.region_rtt_ms["us-east"] == pytest.approx(5.0)


def test_country_only_records_use_the_continent_centroid(locator):
    geo = locator.locate(SA_CLIENT, None)
    assert geo.source is GeoSource.CONTINENT and geo.country == "BR"
    assert geo.origin == "us-east"  # of the three test regions, nearest South America


def test_missing_or_corrupt_database_falls_back(tmp_path):
    missing = GeoLocator(config(tmp_path / "absent.mmdb"))
    error = missing.load()
    assert error is not None and "does not exist" in error.message
    assert missing.locate(EU_CLIENT, None).origin == "us-east"
    corrupt_path = tmp_path / "corrupt.mmdb"
    corrupt_path.write_bytes(b"\x00" * 1000)
    corrupt = GeoLocator(config(corrupt_path))
    assert corrupt.load() is not None
    geo = corrupt.locate(EU_CLIENT, None)
    assert geo.source is GeoSource.DEFAULT and "no GeoIP database" in geo.reason
    no_db = GeoLocator(config(None))
    assert no_db.load() is None and no_db.locate(EU_CLIENT, None).origin == "us-east"


async def test_background_task_loads_and_reloads_a_changed_database(tmp_path):
    path = tmp_path / "city.mmdb"
    write_city_db(path, [FRANKFURT])
    geo = GeoLocator(config(path, reload_interval_s=0.05))
    await geo.start()
    assert geo.locate(EU_CLIENT, None).origin == "eu-central"
    assert geo.locate(AP_CLIENT, None).source is GeoSource.DEFAULT
    write_city_db(path, [FRANKFURT, FixtureNetwork("203.0.113.0/24", "JP", "AS", 35.68, 139.69)])
    os.utime(path, (1e9, 2e9))  # make sure the mtime differs even on coarse clocks
    await settle(lambda: geo.locate(AP_CLIENT, None).origin == "ap-northeast")
    await geo.stop()
    assert not geo.has_database


def test_config_errors_name_the_problem():
    with pytest.raises(ValidationError, match="not a configured region"):
        GeoConfig(
            default_origin="mars",
            regions={"us-east": RegionLocation(latitude=38.9, longitude=-77.4)},
        )
    with pytest.raises(ValidationError, match="does not appear to be an IPv4 or IPv6 network"):
        GeoConfig(trusted_proxies=["10.0.0.0/33"])


@settings(max_examples=300, deadline=None)
@given(
    peer=st.one_of(st.none(), st.text(max_size=60)), xff=st.one_of(st.none(), st.text(max_size=200))
)
def test_client_address_never_raises_on_arbitrary_input(peer, xff):
    result = client_address(peer, xff, parse_networks(TRUSTED))
    assert result is None or parse_ip(str(result)) == result


@settings(max_examples=200, deadline=None)
@given(
    a=st.tuples(st.floats(-90, 90), st.floats(-180, 180)),
    b=st.tuples(st.floats(-90, 90), st.floats(-180, 180)),
)
def test_distance_is_symmetric_bounded_and_rtt_monotone(a, b):
    d = great_circle_km(*a, *b)
    assert d == pytest.approx(great_circle_km(*b, *a), abs=1e-6)
    assert 0.0 <= d <= 20_016.0  # half the circumference
    model = RttModel()
    assert model.rtt_ms(d) >= model.rtt_ms(0.0) == 5.0
