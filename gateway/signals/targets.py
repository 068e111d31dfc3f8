"""What the signal loops need to know about a backend beyond its routing spec."""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from gateway.signals.rtt_policy import RttPolicy
from routing.types import BackendKind, BackendSpec


class Engine(StrEnum):
    """The serving engine behind a backend; selects the metrics-name mapping."""

    VLLM = "vllm"
    SGLANG = "sglang"
    TGI = "tgi"
    LLAMACPP = "llamacpp"
    UNKNOWN = "unknown"  # hosted APIs and anything else: no scrape, passive signals only


@dataclass(frozen=True, slots=True)
class BackendTarget:
    """A backend as the probe and scrape loops see it.

    ``base_url`` is the server root (``http://host:port``), without the ``/v1`` suffix.
    ``keep_warm`` lets canaries reach a serverless backend, which keeps it from scaling to
    zero: it costs money and hides cold starts, so it is off unless the operator asks.
    """

    spec: BackendSpec
    base_url: str
    engine: Engine = Engine.UNKNOWN
    keep_warm: bool = False
    canary_model: str | None = None  # default: the alphabetically first model in the spec
    headers: Mapping[str, str] = field(default_factory=dict)
    rtt: RttPolicy = field(default_factory=RttPolicy)  # what routing takes as its RTT
    # backends[].tls (its CA, a client certificate), as the relay's connections use it; True:
    # aiohttp's default verification.
    tls: ssl.SSLContext | bool = True

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def is_serverless(self) -> bool:
        return self.spec.kind is BackendKind.SERVERLESS

    @property
    def model_for_canary(self) -> str | None:
        if self.canary_model is not None:
            return self.canary_model
        return min(self.spec.models) if self.spec.models else None

    def url(self, path: str) -> str:
        return self.base_url.rstrip("/") + "/" + path.lstrip("/")
