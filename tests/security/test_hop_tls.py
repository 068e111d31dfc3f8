"""mTLS between gateway hops, with certificates made in the test (the ``openssl`` CLI) and
every connection on loopback: gateway A reaches gateway B over HTTPS, verifying B against the
CA and presenting a client certificate; B takes a verified client certificate for a hop and
believes the tenant A sends. A hop without a certificate, or with one another CA signed, gets
nothing through."""

from __future__ import annotations

import asyncio
import ssl
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
import yaml

from gateway.config import ConfigError, parse_config
from gateway.grpc.mount import GRPC_SERVER
from gateway.state_keys import RELAY
from loadtests.tls_certs import make_ca, make_leaf
from tests.gateway.support import config_for
from tests.security.auth_support import (
    CHAT,
    MODEL,
    grpc_call,
    issue,
    recording_backend,
    until,
)
from tests.servers import GatewayFactory, gateways


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    where = tmp_path_factory.mktemp("pki")
    ca, rogue_ca = make_ca(where, "hop-ca"), make_ca(where, "rogue-ca")
    return {
        "ca": ca,
        "server": make_leaf(where, "gw-b", ca, "-addext", "subjectAltName=IP:127.0.0.1"),
        "client": make_leaf(where, "gw-a", ca),
        "rogue": make_leaf(where, "gw-x", rogue_ca),
    }


@pytest.fixture
async def gateway() -> AsyncIterator[GatewayFactory]:
    async with gateways() as factory:
        yield factory


def _listen_tls(pki: dict[str, tuple[Path, Path]], require: bool = False) -> dict[str, Any]:
    server_cert, server_key = pki["server"]
    tls: dict[str, Any] = {"cert_file": str(server_cert), "key_file": str(server_key)}
    tls |= {"client_ca_file": str(pki["ca"][0]), "require_client_cert": require}
    return {"host": "127.0.0.1", "port": 0, "tls": tls}


def _upstream(downstream_url: str, tls: dict[str, str], client_key: dict[str, Any]) -> Any:
    hop: dict[str, Any] = {"name": "gw-b", "region": "local", "kind": "gateway"}
    hop["models"] = [MODEL]
    hop |= {"url": downstream_url + "/v1", "tls": tls}
    return parse_config(
        {
            "backends": [hop],
            "timeouts": {"first_token_s": 5.0},
            "auth": {"keys": [client_key]},
            "chain": {"id": "gw-a"},
            # Probes and summary polls reach B with the same TLS settings as the relay.
            "signals": {"probes": {"interval_s": 0.2, "jitter": 0.1}},
        },
        "<test>",
    )


async def _post(url: str, headers: dict[str, str]) -> int:
    async with aiohttp.ClientSession() as session:
        async with session.post(url + "/v1/chat/completions", json=CHAT, headers=headers) as r:
            await r.read()
            return r.status


async def test_a_hop_over_mtls_carries_the_tenant_and_an_unverified_one_is_refused(
    gateway: GatewayFactory, pki: dict[str, tuple[Path, Path]]
) -> None:
    client = issue("acme")
    ca = str(pki["ca"][0])
    async with recording_backend() as recorder:
        downstream = await gateway(
            config_for({"c1": recorder.url}, listen=_listen_tls(pki), auth={"mode": "keys"})
        )
        assert downstream.url.startswith("https://")
        cert, key = pki["client"]
        mutual = {"ca_file": ca, "cert_file": str(cert), "key_file": str(key)}
        upstream = await gateway(_upstream(downstream.url, mutual, client.entry))
        claims_evil = {**client.headers, "X-Meridian-Tenant": "evil"}
        assert await _post(upstream.url, claims_evil) == 200
        assert recorder.tenants == ["acme"]  # the key's tenant, believed from the certificate
        probes = upstream.app[RELAY].fleet.prober
        await until(lambda: probes.summaries()["gw-b"].probes_total >= 2)
        assert probes.summaries()["gw-b"].failures_total == 0  # verified B, B knew A

        rogue_cert, rogue_key = pki["rogue"]
        for tls in (
            {"ca_file": ca},  # TLS, but no client certificate: B wants a key then
            {"ca_file": ca, "cert_file": str(rogue_cert), "key_file": str(rogue_key)},
        ):
            unverified = await gateway(_upstream(downstream.url, tls, client.entry))
            assert await _post(unverified.url, claims_evil) != 200
        assert recorder.tenants == ["acme"]  # nothing else reached the engine


async def test_a_listener_requiring_client_certificates_refuses_the_handshake(
    gateway: GatewayFactory, pki: dict[str, tuple[Path, Path]]
) -> None:
    async with recording_backend() as recorder:
        downstream = await gateway(
            config_for(
                {"c1": recorder.url},
                listen=_listen_tls(pki, require=True),
                auth={"mode": "keys"},
            )
        )
        context = ssl.create_default_context(cafile=str(pki["ca"][0]))
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
            with pytest.raises(aiohttp.ClientError):
                async with session.post(downstream.url + "/v1/chat/completions", json=CHAT) as r:
                    await r.read()
        assert recorder.tenants == []


def test_tls_settings_are_checked_at_load() -> None:
    base = {"name": "b", "region": "local", "models": [MODEL]}
    with pytest.raises(ConfigError, match="https"):
        parse_config({"backends": [{**base, "url": "http://h/v1", "tls": {}}]}, "<test>")
    with pytest.raises(ConfigError, match="cert_file and key_file"):
        tls = {"cert_file": "/c.pem"}
        parse_config({"backends": [{**base, "url": "https://h/v1", "tls": tls}]}, "<test>")
    with pytest.raises(ConfigError, match="client_ca_file"):
        listen = {"tls": {"cert_file": "c", "key_file": "k", "require_client_cert": True}}
        parse_config({"backends": [{**base, "url": "https://h/v1"}], "listen": listen}, "<test>")


async def test_workers_serve_tls_and_say_so(
    tmp_path: Path, pki: dict[str, tuple[Path, Path]]
) -> None:
    """``--workers 2``: the supervisor's announced URL is https, and each worker answers TLS."""
    listen = _listen_tls(pki)
    config = {
        "backends": [
            {"name": "b1", "region": "local", "url": "http://127.0.0.1:9/v1", "models": [MODEL]}
        ],
        "listen": listen,
        "auth": {"mode": "off"},
        "signals": {"probes": {"enabled": False}, "engine_metrics": {"enabled": False}},
    }
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(config))
    argv = [sys.executable, "-m", "gateway.cli", "serve", "--config", str(path), "--port", "0"]
    process = await asyncio.create_subprocess_exec(
        *argv, "--workers", "2", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
    )
    try:
        assert process.stdout is not None
        line = (await asyncio.wait_for(process.stdout.readline(), 60)).decode()
        assert line.startswith("meridian listening on https://127.0.0.1:"), line
        url = line.split()[-1]
        context = ssl.create_default_context(cafile=str(pki["ca"][0]))
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
            async with session.get(url + "/healthz") as response:
                assert response.status == 200
    finally:
        if process.returncode is None:
            process.terminate()
        await asyncio.wait_for(process.wait(), 30)


@pytest.mark.parametrize("grpc_engine", ["grpcio", "h2"])  # h2: ALPN h2 on the HTTP context
async def test_the_grpc_listener_serves_the_same_tls(
    gateway: GatewayFactory, pki: dict[str, tuple[Path, Path]], grpc_engine: str
) -> None:
    ca = pki["ca"][0].read_bytes()
    cert, key = (p.read_bytes() for p in pki["client"])
    async with recording_backend() as recorder:
        for require in (False, True):
            listen = {
                **_listen_tls(pki, require=require),
                "grpc_port": 0,
                "grpc_engine": grpc_engine,
            }
            running = await gateway(
                config_for({"c1": recorder.url}, listen=listen, auth={"mode": "off"})
            )
            target = running.app[GRPC_SERVER].target
            server_only = grpc.ssl_channel_credentials(root_certificates=ca)
            mutual = grpc.ssl_channel_credentials(ca, private_key=key, certificate_chain=cert)
            assert await grpc_call(target, credentials=mutual) == grpc.StatusCode.OK
            assert await grpc_call(target) == grpc.StatusCode.UNAVAILABLE  # plaintext
            without_cert = await grpc_call(target, credentials=server_only)
            assert without_cert == (grpc.StatusCode.UNAVAILABLE if require else grpc.StatusCode.OK)
        assert len(recorder.tenants) == 3
