"""The ``state:`` section of the gateway config: where shared state lives and how hard to try.

Passwords are never inline: name an environment variable or a file. Defaults are tuned for one
region with a handful of replicas; every bound is documented in gateway/state/README.md.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal, Self
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.state.errors import StateError, StateErrorKind, StateUnavailable

_PREFIX_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
_URL_SCHEMES = {"redis", "rediss", "unix"}


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TlsConfig(_Section):
    enabled: bool = Field(default=False, description="Connect to Redis over TLS.")
    ca_file: Path | None = Field(
        default=None, description="CA bundle to verify the server with; None: the system's."
    )
    cert_file: Path | None = Field(default=None, description="Client certificate, for mutual TLS.")
    key_file: Path | None = Field(default=None, description="Client certificate's private key.")
    check_hostname: bool = Field(
        default=True, description="Check the server certificate's host name."
    )

    @model_validator(mode="after")
    def _cert_and_key_together(self) -> Self:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("state.tls: cert_file and key_file must be given together")
        return self


class StateTimeouts(_Section):
    op_s: float = Field(
        default=0.25, gt=0, le=10, description="One store call, including its pipeline, in seconds."
    )
    connect_s: float = Field(
        default=0.5, gt=0, le=30, description="Connecting to the store, in seconds."
    )
    breaker_failures: int = Field(
        default=3,
        ge=1,
        description="Consecutive store failures that open the breaker (local state only until it closes).",
    )
    breaker_reset_s: float = Field(
        default=1.0,
        gt=0,
        description="An open breaker tries again (half-open) after this long, in seconds.",
    )


class StateIntervals(_Section):
    flush_s: float = Field(
        default=0.05, gt=0, le=5, description="Batched writes are pipelined this often, in seconds."
    )
    refresh_s: float = Field(
        default=1.0,
        gt=0,
        le=60,
        description="Periodic pull of shared state (the safety net behind pub/sub), in seconds.",
    )
    lease_period_s: float = Field(
        default=6.0,
        gt=0.1,
        le=600,
        description="Probe-leader lease period: bound on a takeover after the leader dies, in seconds.",
    )
    in_flight_ttl_s: float = Field(
        description="A replica's in-flight counts expire this long after its last write (a dead replica's load is forgotten), in seconds.",
        default=10.0,
        gt=0.1,
        le=600,
    )  # a dead replica's counts vanish after


class StateBounds(_Section):
    prefix_ttl_s: float = Field(
        default=600.0,
        gt=0,
        description="A prefix block not seen for this long is forgotten, in seconds.",
    )
    prefix_blocks_per_backend: int = Field(
        default=50_000, ge=16, description="Most prefix blocks remembered per backend."
    )
    signal_ttl_s: float = Field(
        description="Shared probe/scrape results older than this are ignored, in seconds.",
        default=60.0,
        gt=0,
    )  # probe/scrape results older than this are ignored
    ejection_ttl_s: float = Field(
        description="Shared ejection records are kept at most this long, in seconds.",
        default=3600.0,
        gt=0,
    )  # ejection records are kept this long at most
    pending_blocks_per_backend: int = Field(
        description="Prefix writes kept per backend while the store is unreachable.",
        default=20_000,
        ge=16,
    )  # unsent writes kept while degraded


class StateConfig(_Section):
    # "host": the workers of one ``meridian serve --workers N`` share the supervisor's store
    # over the Unix socket in ``url`` (set by the supervisor, not written by operators).
    backend: Literal["memory", "redis", "redis-cluster", "host"] = Field(
        default="memory",
        description="memory (one process), redis, redis-cluster, or host (the workers of one 'meridian serve --workers N').",
    )
    url: str | None = Field(
        default=None,
        description="Redis URL: redis://host:port/0, rediss://... (TLS) or unix:///path/redis.sock.",
    )
    urls: tuple[str, ...] = Field(
        default=(), description="Redis Cluster seed nodes, redis://host:port or rediss://host:port."
    )
    username: str | None = Field(default=None, description="Redis ACL user name.")
    password_env: str | None = Field(
        default=None, description="Environment variable holding the Redis password."
    )
    password_file: Path | None = Field(default=None, description="File holding the Redis password.")
    tls: TlsConfig = Field(
        default=TlsConfig(), description="TLS to Redis (certificates, mutual TLS)."
    )
    key_prefix: str = Field(
        default="meridian",
        description="Prefix of every Redis key: one per deployment sharing a Redis.",
    )
    replica_id: str | None = Field(
        default=None, description="This replica's id in shared state. Default: hostname-pid."
    )
    share_learning: bool = Field(
        default=False,
        description="Learn from the first tokens the other replicas of this gateway's region (and the other workers of its host) saw, as they learn from ours: one learner per region, not one per process. Better calibrated and fewer explorations after a path changes, but the replicas then react as one and leave a loaded backend together (simulator: e2e p99 +1.6-8.3% in scenarios 1, 2 and 8). Off: each learns from its own traffic only.",
    )
    leader_when_degraded: bool = Field(
        default=True,
        description="When Redis is unreachable, probe as if leader (duplicate probes beat missing ones).",
    )
    timeouts: StateTimeouts = Field(
        default=StateTimeouts(),
        description="Store call and connect timeouts, and the circuit breaker in front of the store.",
    )
    intervals: StateIntervals = Field(
        default=StateIntervals(),
        description="How often state is written, refreshed and leases renewed.",
    )
    bounds: StateBounds = Field(
        default=StateBounds(), description="How much shared state is kept and for how long."
    )

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if not _PREFIX_RE.match(self.key_prefix):
            raise ValueError(
                "state.key_prefix: expected 1-64 characters of letters, digits and _.:- "
                f"(no braces: they are Redis Cluster hash tags), got {self.key_prefix!r}"
            )
        if self.backend == "redis" and not self.url:
            raise ValueError("state.url: required when state.backend is 'redis'")
        if self.backend == "host" and not (self.url or "").startswith("unix://"):
            raise ValueError("state.url: 'host' needs the coordinator's unix:// socket")
        if self.backend == "redis-cluster" and not self.urls:
            raise ValueError("state.urls: list at least one seed node for 'redis-cluster'")
        for key, url in [("url", self.url), *(("urls", u) for u in self.urls)]:
            if url is not None:
                _check_url(key, url)
        if self.password_env and self.password_file:
            raise ValueError("state: give password_env or password_file, not both")
        return self

    def resolve_password(self) -> str | None:
        """Read the password from its environment variable or file, at connect time."""
        if self.password_env:
            value = os.environ.get(self.password_env)
            if value is None:
                raise _config_error(f"state.password_env: variable {self.password_env} is unset")
            return value
        if self.password_file:
            try:
                return self.password_file.read_text(encoding="utf-8").rstrip("\r\n")
            except OSError as exc:
                raise _config_error(
                    f"state.password_file: cannot read {self.password_file}: {exc.strerror}"
                ) from exc
        return None


def _check_url(key: str, url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in _URL_SCHEMES:
        raise ValueError(f"state.{key}: expected redis://, rediss:// or unix://, got {url!r}")
    if parts.password:
        raise ValueError(
            f"state.{key}: the URL carries a password; move it to state.password_env "
            "or state.password_file"
        )


def _config_error(message: str) -> StateUnavailable:
    return StateUnavailable(StateError(StateErrorKind.CONFIG, message))
