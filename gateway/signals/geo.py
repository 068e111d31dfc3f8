"""Client geography: client address -> location -> nearest region and RTT to every region.

The GeoIP database (MaxMind City or Country format) is opened and re-opened off the request
path, by a background task that watches its modification time; ``locate`` is a synchronous
in-memory lookup with a small LRU in front. A missing database, an address it does not know,
or garbage in the headers all give the configured default origin, never an error.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import geoip2.database
import geoip2.errors
import maxminddb
from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.signals.errors import ErrorTransitions, SignalError, SignalErrorKind
from gateway.signals.forwarded import IPAddress, client_address, parse_networks
from gateway.signals.geo_model import CONTINENT_CENTROIDS, RttModel, great_circle_km
from gateway.signals.tasks import TaskOwner, run_periodically

logger = logging.getLogger(__name__)


class RegionLocation(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    latitude: float = Field(ge=-90, le=90, description="Latitude in degrees.")
    longitude: float = Field(ge=-180, le=180, description="Longitude in degrees.")


class GeoConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    database_path: Path | None = Field(
        default=None,
        description="A MaxMind/GeoIP2 City or Country database file for client locations. None: clients' origin is unknown (or default_origin).",
    )
    reload_interval_s: float = Field(
        default=300.0,
        gt=0,
        description="How often the database file is checked for an update, in seconds.",
    )
    trusted_proxies: list[str] = Field(
        default_factory=list,
        description="CIDRs of proxies allowed to set X-Forwarded-For; other clients are located by their own address.",
    )
    regions: dict[str, RegionLocation] = Field(
        default_factory=dict,
        description="Where each region is (name -> latitude/longitude), for client-to-region distance.",
    )
    default_origin: str | None = Field(
        default=None, description="Region name assumed for clients that cannot be located."
    )
    fibre_km_per_ms: float = Field(
        default=200.0,
        gt=0,
        description="Signal speed in fibre for the distance model, km per ms one way.",
    )
    route_inflation: float = Field(
        default=1.5,
        ge=1,
        description="How much longer real network paths are than the great circle (multiplier).",
    )
    constant_ms: float = Field(
        default=5.0,
        ge=0,
        description="Fixed round-trip cost added to every modelled client RTT, in ms.",
    )
    # Measured client RTTs that override the model: ISO country code -> region -> ms.
    measured_rtt_ms: dict[str, dict[str, float]] = Field(
        default_factory=dict,
        description="Measured client RTTs that override the model: ISO country code -> region -> ms.",
    )
    cache_size: int = Field(
        default=4096, ge=0, description="Client addresses whose location is cached."
    )

    @model_validator(mode="after")
    def _check(self) -> GeoConfig:
        parse_networks(self.trusted_proxies)  # ValueError names the bad CIDR
        # With no regions of its own, the gateway config fills them from its top-level
        # ``regions`` and checks default_origin there.
        if (
            self.regions
            and self.default_origin is not None
            and self.default_origin not in self.regions
        ):
            known = ", ".join(sorted(self.regions)) or "none configured"
            raise ValueError(
                f"default_origin {self.default_origin!r} is not a configured region ({known})"
            )
        return self


class GeoSource(StrEnum):
    LOOKUP = "lookup"  # the database placed the client
    CONTINENT = "continent"  # the database knew only the continent: its centroid
    DEFAULT = "default"  # could not place the client: the configured default origin


@dataclass(frozen=True, slots=True)
class ClientGeo:
    origin: str | None  # nearest region by estimated RTT (or the default origin)
    region_rtt_ms: Mapping[str, float]
    source: GeoSource
    country: str | None = None
    continent: str | None = None
    latitude: float | None = None
    longitude: float | None = None
    reason: str = ""  # why the default was used, for explain; never contains the address


@dataclass(slots=True)
class _Database:
    reader: geoip2.database.Reader
    city: bool
    mtime: float


@dataclass(slots=True)
class _Lru:
    """Least recently used first; each entry remembers the generation it was last used in, so
    ``forget_idle`` drops what no request used for a whole generation (issue 19: a client
    address gone quiet costs nothing), at the cost of what it drops."""

    size: int
    items: OrderedDict[str, tuple[ClientGeo, int]] = field(default_factory=OrderedDict)
    generation: int = 0

    def get(self, key: str) -> ClientGeo | None:
        found = self.items.get(key)
        if found is None:
            return None
        self.items.move_to_end(key)
        if found[1] != self.generation:
            self.items[key] = (found[0], self.generation)
        return found[0]

    def put(self, key: str, value: ClientGeo) -> None:
        if self.size <= 0:
            return
        self.items[key] = (value, self.generation)
        if len(self.items) > self.size:
            self.items.popitem(last=False)

    def forget_idle(self) -> int:
        """Drop the entries unused since the previous call; returns how many."""
        items, dropped = self.items, 0
        while items:
            key, (_, used_in) = next(iter(items.items()))
            if used_in == self.generation:
                break  # ordered by last use: everything after it was used since too
            del items[key]
            dropped += 1
        self.generation += 1
        return dropped


def open_database(path: Path) -> _Database | SignalError:
    try:
        mtime = os.stat(path).st_mtime
        reader = geoip2.database.Reader(str(path))
    except FileNotFoundError:
        return SignalError(SignalErrorKind.CONNECT, f"GeoIP database {path} does not exist")
    except (OSError, ValueError, maxminddb.InvalidDatabaseError) as exc:
        return SignalError(SignalErrorKind.MALFORMED, f"cannot open GeoIP database {path}: {exc}")
    return _Database(reader, "City" in reader.metadata().database_type, mtime)


class GeoLocator:
    def __init__(self, config: GeoConfig, *, rng: random.Random | None = None) -> None:
        self._config = config
        self._trusted = parse_networks(config.trusted_proxies)
        self._model = RttModel(config.fibre_km_per_ms, config.route_inflation, config.constant_ms)
        self._measured = {c.upper(): dict(r) for c, r in config.measured_rtt_ms.items()}
        self._database: _Database | None = None
        self._cache = _Lru(config.cache_size)
        self._transitions = ErrorTransitions(logger, "GeoIP database")
        self._tasks = TaskOwner()
        self._rng = rng or random.Random()
        self._default = self._default_geo("no client address")

    @property
    def has_database(self) -> bool:
        return self._database is not None

    def load(self) -> SignalError | None:
        """(Re)open the database if its file changed. Blocking: for startup and tests."""
        return self._install(self._open_if_changed())

    def _open_if_changed(self) -> _Database | SignalError | None:
        """Runs in a worker thread: the file I/O. ``None`` means nothing to do."""
        path = self._config.database_path
        if path is None:
            return None
        current = self._database
        try:
            if current is not None and os.stat(path).st_mtime == current.mtime:
                return None
        except OSError:
            pass  # vanished: keep serving from the open copy; open_database reports it below
        return open_database(path)

    def _install(self, opened: _Database | SignalError | None) -> SignalError | None:
        """Runs on the event loop, so no lookup is ever using the reader being closed."""
        if opened is None:
            return None
        error = opened if isinstance(opened, SignalError) else None
        self._transitions.update("geoip", error)
        if isinstance(opened, _Database):
            previous, self._database = self._database, opened
            self._cache = _Lru(self._config.cache_size)
            if previous is not None:
                previous.reader.close()
        return error

    async def start(self) -> None:
        if self._config.database_path is None or self._tasks.running:
            return
        await self._reload()
        self._tasks.spawn(
            run_periodically(
                self._reload,
                interval_s=self._config.reload_interval_s,
                jitter=0.1,
                rng=self._rng,
                name="geoip-reload",
            ),
            name="meridian-geoip-reload",
        )

    async def _reload(self) -> None:
        self._install(await asyncio.to_thread(self._open_if_changed))

    async def stop(self) -> None:
        await self._tasks.stop()
        if self._database is not None:
            self._database.reader.close()
            self._database = None

    def record_measured_rtt(self, country: str, region: str, rtt_ms: float) -> None:
        """A measured client RTT (e.g. from TCP_INFO) overriding the model for that pair."""
        self._measured.setdefault(country.upper(), {})[region] = rtt_ms
        self._cache = _Lru(self._config.cache_size)

    def forget_idle(self) -> int:
        """Forget the client addresses no request came from since the previous call (the idle
        sweep calls this every interval); returns how many."""
        return self._cache.forget_idle()

    def cached_addresses(self) -> int:
        return len(self._cache.items)

    def locate(
        self, peer: str | None, forwarded_for: str | Sequence[str] | None = None
    ) -> ClientGeo:
        """Where the client of a request is, from its peer address and proxy headers."""
        address = client_address(peer, forwarded_for, self._trusted)
        if address is None:
            return self._default
        return self.locate_address(address)

    def locate_address(self, address: IPAddress) -> ClientGeo:
        key = str(address)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        result = self._lookup(address)
        self._cache.put(key, result)
        return result

    def _lookup(self, address: IPAddress) -> ClientGeo:
        database = self._database
        if database is None:
            return self._default_geo("no GeoIP database loaded")
        try:
            record: Any = (
                database.reader.city(address) if database.city else database.reader.country(address)
            )
        except geoip2.errors.AddressNotFoundError:
            return self._default_geo("address not in the GeoIP database")
        except (ValueError, TypeError, maxminddb.InvalidDatabaseError) as exc:
            return self._default_geo(f"GeoIP lookup failed: {type(exc).__name__}")
        country = record.country.iso_code
        continent = record.continent.code
        location = getattr(record, "location", None)
        lat = location.latitude if location is not None else None
        lon = location.longitude if location is not None else None
        source = GeoSource.LOOKUP
        if (lat is None or lon is None) and continent in CONTINENT_CENTROIDS:
            (lat, lon), source = CONTINENT_CENTROIDS[continent], GeoSource.CONTINENT
        if lat is None or lon is None:
            return self._default_geo("GeoIP record has no location or continent")
        rtts = self._region_rtts(lat, lon, country)
        return ClientGeo(
            origin=min(rtts, key=rtts.__getitem__) if rtts else self._config.default_origin,
            region_rtt_ms=rtts,
            source=source,
            country=country,
            continent=continent,
            latitude=lat,
            longitude=lon,
        )

    def _region_rtts(self, lat: float, lon: float, country: str | None) -> dict[str, float]:
        measured = self._measured.get(country or "", {})
        return {
            name: measured.get(
                name,
                self._model.rtt_ms(great_circle_km(lat, lon, region.latitude, region.longitude)),
            )
            for name, region in self._config.regions.items()
        }

    def _default_geo(self, reason: str) -> ClientGeo:
        origin = self._config.default_origin
        rtts: Mapping[str, float] = {}
        if origin is not None:
            home = self._config.regions[origin]
            rtts = self._region_rtts(home.latitude, home.longitude, None)
        return ClientGeo(origin=origin, region_rtt_ms=rtts, source=GeoSource.DEFAULT, reason=reason)
