"""The pinned addresses of every backend host name, and the aiohttp resolver upstream
connections use: it answers from the pins (a dictionary read, no DNS on the request path).

Host names are resolved at start and every ``dns.refresh_s`` (``refresh``); each answer is
judged (:mod:`gateway.pinning.policy`) against the pin it would replace. A refused answer keeps
the old pin, logs a ``dns_pin_refused`` event and counts in
``meridian_dns_pin_refused_total{host}``; a failed lookup keeps the old pin too. A host not
pinned yet (a backend a reload just added) is resolved and judged on its first connection.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections.abc import Callable, Sequence

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver
from prometheus_client import CollectorRegistry, Counter

from gateway.backend_urls import IpAddress, host_address
from gateway.config_backends import BackendConfig
from gateway.observability.events import gateway_event
from gateway.pinning.config import DnsConfig
from gateway.pinning.policy import judge

log = logging.getLogger("meridian.dns")


class PinRefused(OSError):
    """No pinned address may be used for this host (the connection fails as unreachable)."""


def _parse(result: ResolveResult) -> IpAddress | None:
    try:
        return ipaddress.ip_address(result["host"].split("%", 1)[0])
    except ValueError:
        return None


class DnsPins:
    def __init__(
        self,
        config: DnsConfig,
        backends: Callable[[], Sequence[BackendConfig]],
        registry: CollectorRegistry | None = None,
        base: AbstractResolver | None = None,
    ) -> None:
        """``backends``: the current ones (a reload may change them); ``base``: where answers
        come from (default: the system's, ``getaddrinfo`` in a thread)."""
        self.config = config
        self.base = base
        self._backends = backends
        self._pins: dict[str, tuple[IpAddress, ...]] = {}
        self._hosts: dict[str, tuple[str, bool]] = {}  # host -> (a backend, allow_link_local)
        self.resolver = PinnedResolver(self)
        self.refused = Counter(
            "meridian_dns_pin_refused",
            "DNS answers for a backend host refused (link-local, or public turned private): "
            "the previous pin stays",
            ["host"],
            registry=registry,
        )
        self.changes = Counter(
            "meridian_dns_pin_changes",
            "Backend host pins replaced by a new, accepted DNS answer",
            ["host"],
            registry=registry,
        )
        self.failures = Counter(
            "meridian_dns_resolve_failures",
            "Backend host lookups that failed or timed out (the previous pin stays)",
            ["host"],
            registry=registry,
        )

    def pinned(self, host: str) -> tuple[IpAddress, ...] | None:
        return self._pins.get(host)

    def _learn_hosts(self) -> None:
        hosts: dict[str, tuple[str, bool]] = {}
        for backend in self._backends():
            host = backend.url.host or ""
            if host and host_address(host) is None:  # literal addresses need no pin
                name, allowed = hosts.get(host, (backend.name, True))
                hosts[host] = (name, allowed and backend.allow_link_local)
        self._hosts = hosts
        for gone in set(self._pins) - set(hosts):
            del self._pins[gone]

    async def _lookup(self, host: str) -> tuple[IpAddress, ...] | None:
        if self.base is None:
            self.base = ThreadedResolver()
        try:
            async with asyncio.timeout(self.config.resolve_timeout_s):
                results = await self.base.resolve(host, 0, socket.AF_UNSPEC)
        except (OSError, TimeoutError):
            self.failures.labels(host).inc()
            log.warning("resolving backend host %s failed; its pin stays", host)
            return None
        parsed = [_parse(result) for result in results]
        return tuple(sorted({a for a in parsed if a is not None}, key=str))

    async def _refresh_one(self, host: str) -> str | None:
        """Resolve and judge ``host``; the refusal's message, or None."""
        answer = await self._lookup(host)
        if answer is None:
            return None
        backend, allow_link_local = self._hosts.get(host, (host, False))
        previous = self._pins.get(host)
        verdict = judge(answer, previous, allow_link_local)
        if not verdict.accepted:
            self.refused.labels(host).inc()
            message = f"backend {backend}: host {host} {verdict.reason}"
            gateway_event(
                "dns_pin_refused",
                f"{message}; keeping {'its pin' if previous else 'no address'}",
                logging.WARNING,
                backend=backend,
                host=host,
            )
            return message
        if previous is not None and previous != answer:
            self.changes.labels(host).inc()
            log.info("backend %s: host %s now pinned to %s", backend, host, answer)
        self._pins[host] = answer
        return None

    async def refresh(self) -> list[str]:
        """Resolve every backend host now; what was refused, one message per host."""
        self._learn_hosts()
        verdicts = await asyncio.gather(*(self._refresh_one(h) for h in self._hosts))
        return [v for v in verdicts if v is not None]

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.config.refresh_s)
            await self.refresh()

    async def addresses(self, host: str) -> tuple[IpAddress, ...]:
        """For a connection: the pin; a host not pinned yet is resolved and judged first."""
        found = self._pins.get(host)
        if found is not None:
            return found
        if host not in self._hosts:
            self._learn_hosts()
        await self._refresh_one(host)
        found = self._pins.get(host)
        if found is None:
            raise PinRefused(f"no usable address pinned for backend host {host}")
        return found

    async def close(self) -> None:
        if self.base is not None:
            await self.base.close()


class PinnedResolver(AbstractResolver):
    """What every upstream connector resolves with: the pins, never a fresh answer."""

    def __init__(self, pins: DnsPins) -> None:
        self._pins = pins

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = []
        for address in await self._pins.addresses(host):
            own = socket.AF_INET6 if address.version == 6 else socket.AF_INET
            if family in (socket.AF_UNSPEC, own):
                results.append(
                    ResolveResult(
                        hostname=host,
                        host=str(address),
                        port=port,
                        family=own,
                        proto=0,
                        flags=socket.AI_NUMERICHOST,
                    )
                )
        if not results:
            raise PinRefused(f"no pinned address of family {family!r} for backend host {host}")
        return results

    async def close(self) -> None:
        """The pins own the base resolver; connectors closing do not close it."""
