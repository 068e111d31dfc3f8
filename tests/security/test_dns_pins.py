"""DNS pinning: backend host names are resolved at start and on a schedule, off the request
path, and upstream connections use only the pinned addresses; an answer that turns link-local
(or public to private) is refused, counted and logged, and the old pin stays. The answers come
from a resolver the test controls (a hosts mapping behind aiohttp's resolver interface): no DNS
and no network beyond loopback."""

from __future__ import annotations

import ipaddress
import logging
import socket
from typing import Any

import aiohttp
import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from gateway.app import start_gateway
from gateway.config import ConfigError, parse_config
from gateway.pinning.config import DnsConfig
from gateway.pinning.pins import DnsPins, PinRefused
from gateway.pinning.policy import judge
from gateway.pinning.wiring import DNS_PINS
from gateway.state_keys import METRICS, RELAY
from tests.gateway.support import FAST_ENGINE
from tests.security.auth_support import CHAT, MODEL, until
from tests.servers import emulators


class HostsResolver(AbstractResolver):
    """Answers from a mapping the test edits, like an /etc/hosts it controls."""

    def __init__(self, hosts: dict[str, list[str]]) -> None:
        self.hosts = hosts
        self.lookups = 0

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.lookups += 1
        if host not in self.hosts:
            raise OSError(f"{host}: no such name")
        return [
            ResolveResult(
                hostname=host,
                host=address,
                port=port,
                family=socket.AF_INET6 if ":" in address else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for address in self.hosts[host]
        ]

    async def close(self) -> None:
        pass


def _ips(*addresses: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, ...]:
    return tuple(ipaddress.ip_address(a) for a in addresses)


@pytest.mark.parametrize(
    ("answer", "pinned", "allow", "accepted"),
    [
        (("10.0.0.5",), None, False, True),  # a private backend, pinned as it is
        (("10.0.0.6",), ("10.0.0.5",), False, True),  # moved within its kind
        (("169.254.169.254",), ("10.0.0.5",), False, False),  # rebinding to the metadata service
        (("169.254.10.1",), None, False, False),  # link-local from the first answer
        (("169.254.10.1",), None, True, True),  # ...unless the backend allows it
        (("::ffff:169.254.169.254",), None, False, False),  # however it is spelled
        (("fe80::1",), None, False, False),
        (("fd00:ec2::254",), None, False, False),
        (("8.8.4.4",), ("8.8.8.8",), False, True),  # public to public
        (("8.8.8.8", "10.0.0.5"), ("8.8.8.8",), False, False),  # public turned (partly) private
        (("127.0.0.1",), ("8.8.8.8",), False, False),
        ((), ("10.0.0.5",), False, False),
    ],
)
def test_which_answers_a_pin_may_take(
    answer: tuple[str, ...], pinned: tuple[str, ...] | None, allow: bool, accepted: bool
) -> None:
    verdict = judge(_ips(*answer), _ips(*pinned) if pinned else None, allow)
    assert verdict.accepted is accepted, verdict.reason


def _config(port: int, host: str = "backend.test") -> dict[str, Any]:
    return {
        "backends": [
            {"name": "b1", "region": "local", "url": f"http://{host}:{port}/v1", "models": [MODEL]}
        ],
        "timeouts": {"first_token_s": 5.0},
        # Probes and scrapes connect through the pins too: nothing asks the system's DNS.
        "signals": {"probes": {"interval_s": 0.1, "jitter": 0.1}},
        "dns": {"refresh_s": 3600},  # refreshed by the test, when it says so
    }


def _sample(app: Any, name: str, host: str) -> float:
    value = app[METRICS].registry.get_sample_value(name, {"host": host})
    return value or 0.0


async def test_connections_use_the_pin_and_a_rebinding_answer_is_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hosts = HostsResolver({"backend.test": ["127.0.0.1"]})
    async with emulators(MODEL, FAST_ENGINE) as emulator:
        backend = await emulator("b1")
        port = int(backend.url.rsplit(":", 1)[1])
        running = await start_gateway(
            parse_config(_config(port), "<test>"),
            "127.0.0.1",
            0,
            prepare=lambda app: setattr(app[DNS_PINS], "base", hosts),
        )
        try:
            pins = running.app[DNS_PINS]
            assert pins.pinned("backend.test") == _ips("127.0.0.1")  # before the first request
            resolved_at_start = hosts.lookups
            async with aiohttp.ClientSession() as session:
                for _ in range(3):  # "backend.test" exists nowhere but in the pin
                    async with session.post(running.url + "/v1/chat/completions", json=CHAT) as r:
                        assert r.status == 200
            assert backend.stats.requests == 3
            probes = running.app[RELAY].fleet.prober
            await until(lambda: probes.summaries()["b1"].probes_total >= 2)
            assert probes.summaries()["b1"].failures_total == 0  # probes reached it by the pin
            assert hosts.lookups == resolved_at_start  # no DNS on the request path

            hosts.hosts["backend.test"] = ["169.254.169.254"]
            with caplog.at_level(logging.WARNING):
                refused = await pins.refresh()
            assert refused and "link-local" in refused[0]
            assert "host backend.test resolves to link-local" in caplog.text
            assert _sample(running.app, "meridian_dns_pin_refused_total", "backend.test") == 1
            assert pins.pinned("backend.test") == _ips("127.0.0.1")  # the old pin stays
            answered = await pins.resolver.resolve("backend.test", port, socket.AF_UNSPEC)
            assert [a["host"] for a in answered] == ["127.0.0.1"]

            hosts.hosts["backend.test"] = ["127.0.0.2"]  # moving within its kind is taken
            assert await pins.refresh() == []
            assert pins.pinned("backend.test") == _ips("127.0.0.2")
            assert _sample(running.app, "meridian_dns_pin_changes_total", "backend.test") == 1
        finally:
            await running.close()


async def test_a_backend_host_resolving_link_local_refuses_the_start() -> None:
    hosts = HostsResolver({"evil.test": ["169.254.169.254"]})
    with pytest.raises(ConfigError, match=r"backend b1: host evil\.test .*link-local"):
        running = await start_gateway(
            parse_config(_config(8000, "evil.test"), "<test>"),
            "127.0.0.1",
            0,
            prepare=lambda app: setattr(app[DNS_PINS], "base", hosts),
        )
        await running.close()


async def test_a_host_first_seen_on_a_connection_is_judged_before_it_is_used() -> None:
    hosts = HostsResolver({"late.test": ["169.254.1.1"], "fine.test": ["10.1.2.3"]})
    config = parse_config(_config(8000, "late.test"), "<test>")
    pins = DnsPins(DnsConfig(), lambda: config.backends, base=hosts)
    with pytest.raises(PinRefused):  # a reload added it: not pinned yet, and refused
        await pins.resolver.resolve("late.test", 8000, socket.AF_UNSPEC)
    answered = await pins.resolver.resolve("fine.test", 8000, socket.AF_INET)
    assert [a["host"] for a in answered] == ["10.1.2.3"]
    assert pins.pinned("fine.test") == _ips("10.1.2.3")
