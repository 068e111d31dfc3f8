"""The GeoIP cache forgets client addresses gone quiet (issue 19): after two idle sweeps with
no request from an address it holds nothing for it; an address still in use stays."""

from __future__ import annotations

from gateway.signals.geo import GeoConfig, GeoLocator


def test_addresses_unused_for_a_whole_interval_are_forgotten() -> None:
    geo = GeoLocator(GeoConfig(cache_size=100))
    for n in range(50):
        geo.locate(f"203.0.113.{n}")
    assert geo.cached_addresses() == 50
    assert geo.forget_idle() == 0  # all were used since the (implicit) previous sweep
    geo.locate("203.0.113.7")  # still a client
    geo.locate("198.51.100.1")  # a new one
    assert geo.forget_idle() == 49
    assert geo.cached_addresses() == 2
    assert geo.locate("203.0.113.7") == geo.locate("203.0.113.7")  # answers as before
    assert geo.forget_idle() == 1  # 198.51.100.1 was not used again
    assert geo.forget_idle() == 1
    assert geo.cached_addresses() == 0


def test_the_size_bound_still_holds_between_sweeps() -> None:
    geo = GeoLocator(GeoConfig(cache_size=16))
    for n in range(200):
        geo.locate(f"203.0.113.{n}")
    assert geo.cached_addresses() == 16
