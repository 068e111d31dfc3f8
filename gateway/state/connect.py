"""Build the configured state store. Never connects here: the first call does, in the
background, so a replica whose Redis is down at start-up still starts and serves."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from redis.asyncio import Redis, RedisCluster
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from gateway.state.config import StateConfig
from gateway.state.errors import StateError, StateErrorKind, StateUnavailable
from gateway.state.keys import KeyLayout
from gateway.state.memory import MemoryStore
from gateway.state.redis_store import RedisStore
from gateway.state.store import Retention, StateStore

_CLUSTER_REDIRECTS = 3


def retention_of(config: StateConfig) -> Retention:
    bounds = config.bounds
    return Retention(
        prefix_ttl_s=bounds.prefix_ttl_s,
        prefix_blocks_per_backend=bounds.prefix_blocks_per_backend,
        signal_ttl_s=bounds.signal_ttl_s,
        ejection_ttl_s=bounds.ejection_ttl_s,
        in_flight_ttl_s=config.intervals.in_flight_ttl_s,
    )


def open_store(config: StateConfig, wall: Callable[[], float] = time.time) -> StateStore:
    """The store ``config`` selects. Raises ``StateUnavailable`` (kind config) if the password
    source named in the config cannot be read."""
    retention = retention_of(config)
    if config.backend == "memory":
        return MemoryStore(retention, wall)
    if config.backend == "host":
        from gateway.state.host_store import HostStore

        return HostStore(urlsplit(_url(config)).path, config.timeouts.op_s)
    client = redis_client(config)
    return RedisStore(
        client, KeyLayout(config.key_prefix), retention, config.timeouts.op_s, wall=wall
    )


def redis_client(config: StateConfig) -> Redis | RedisCluster:
    options = _common_options(config)
    if config.backend == "redis-cluster":
        nodes = [_cluster_node(url) for url in config.urls]
        # A cluster client must follow MOVED/ASK redirects, which it does through its retry
        # budget; our timeout still bounds the whole call.
        options["retry"] = Retry(NoBackoff(), _CLUSTER_REDIRECTS)
        return RedisCluster(
            startup_nodes=nodes,
            **options,
            **_tls_options(config, any(u.startswith("rediss://") for u in config.urls)),
        )
    url = _url(config)
    if config.tls.enabled and url.startswith("redis://"):
        url = urlunsplit(urlsplit(url)._replace(scheme="rediss"))
    return Redis.from_url(url, **options, **_tls_options(config, url.startswith("rediss://")))


def _common_options(config: StateConfig) -> dict[str, Any]:
    timeouts = config.timeouts
    return {
        "username": config.username,
        "password": config.resolve_password(),
        "socket_timeout": timeouts.op_s,
        "socket_connect_timeout": timeouts.connect_s,
        # Our own loops retry; a client-side retry would only stretch a call past its timeout.
        "retry": Retry(NoBackoff(), 0),
        "client_name": f"meridian-{config.key_prefix}",
    }


def _tls_options(config: StateConfig, wanted: bool) -> dict[str, Any]:
    if not (wanted or config.tls.enabled):
        return {}
    tls = config.tls
    options: dict[str, Any] = {
        "ssl_cert_reqs": "required",
        "ssl_check_hostname": tls.check_hostname,
        "ssl_ca_certs": str(tls.ca_file) if tls.ca_file else None,
        "ssl_certfile": str(tls.cert_file) if tls.cert_file else None,
        "ssl_keyfile": str(tls.key_file) if tls.key_file else None,
    }
    if config.backend == "redis-cluster":
        options["ssl"] = True
    return options


def _cluster_node(url: str) -> ClusterNode:
    parts = urlsplit(url)
    return ClusterNode(parts.hostname or "127.0.0.1", parts.port or 6379)


def _url(config: StateConfig) -> str:
    """``state.url``, which StateConfig requires for the "redis" and "host" backends."""
    if config.url is None:
        raise StateUnavailable(
            StateError(StateErrorKind.CONFIG, f"state.url is required for backend {config.backend}")
        )
    return config.url
