"""TLS between hops: a ``kind: gateway`` backend may verify its downstream gateway against a
CA and present a client certificate (``backends[].tls``); a listener may serve TLS and ask for
client certificates (``listen.tls``). A request whose connection presented a certificate the
listener's client CA signed is a hop from a Meridian gateway, as one bearing a hop key is: its
tenant header is believed (``client_cert_hops``).

Imported by the config modules: pydantic and ssl only.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class HopTlsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    ca_file: str | None = Field(
        default=None,
        description="PEM file of the CA(s) the backend's server certificate must chain to; "
        "None: the system's CAs.",
    )
    cert_file: str | None = Field(
        default=None, description="PEM client certificate presented to the backend (mTLS)."
    )
    key_file: str | None = Field(
        default=None, description="PEM private key of cert_file (a file, never inline)."
    )

    @model_validator(mode="after")
    def _pair(self) -> HopTlsConfig:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError(
                "cert_file and key_file go together (a client certificate and its key)"
            )
        return self


class ListenTlsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    cert_file: str = Field(description="PEM server certificate (chain) of the public listener.")
    key_file: str = Field(description="PEM private key of cert_file.")
    client_ca_file: str | None = Field(
        default=None,
        description="PEM CA(s) client certificates are verified against; None: no client "
        "certificates asked for.",
    )
    require_client_cert: bool = Field(
        default=False,
        description="Refuse a TLS handshake without a client certificate the client CA signed "
        "(a listener only other gateways reach); false: optional, API keys still work.",
    )
    client_cert_hops: bool = Field(
        default=True,
        description="A request on a connection with a verified client certificate is a hop "
        "from a Meridian gateway: its tenant header is believed, as with a hop key.",
    )

    @model_validator(mode="after")
    def _needs_ca(self) -> ListenTlsConfig:
        if self.require_client_cert and self.client_ca_file is None:
            raise ValueError("require_client_cert needs client_ca_file")
        return self


def _readable(path: str, what: str) -> str:
    if not Path(path).is_file():
        raise ssl.SSLError(f"{what} {path}: no such file")
    return path


def client_context(config: HopTlsConfig) -> ssl.SSLContext:
    """For the connections to one backend. Raises ``ssl.SSLError``/``OSError`` on bad files."""
    context = ssl.create_default_context(
        cafile=_readable(config.ca_file, "ca_file") if config.ca_file else None
    )
    if config.cert_file and config.key_file:
        context.load_cert_chain(
            _readable(config.cert_file, "cert_file"), _readable(config.key_file, "key_file")
        )
    return context


def server_context(config: ListenTlsConfig) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(
        _readable(config.cert_file, "cert_file"), _readable(config.key_file, "key_file")
    )
    if config.client_ca_file:
        context.load_verify_locations(_readable(config.client_ca_file, "client_ca_file"))
        context.verify_mode = ssl.CERT_REQUIRED if config.require_client_cert else ssl.CERT_OPTIONAL
    return context


def backend_context(name: str, config: HopTlsConfig | None) -> ssl.SSLContext | bool:
    """``backends[].tls`` for every connection to that backend (relay, probes, scrapes,
    summary polls); True: aiohttp's default verification. ``ConfigError`` on bad files."""
    if config is None:
        return True
    try:
        return client_context(config)
    except (OSError, ssl.SSLError) as exc:
        from gateway.config_base import ConfigError

        raise ConfigError(f"backends.{name}.tls: {exc}") from None


def grpc_credentials(config: ListenTlsConfig | None) -> Any:
    """``listen.tls`` for the gRPC listener (``grpc.ServerCredentials``; None: plaintext).
    grpcio verifies client certificates only when it requires them, so a certificate is never
    taken for a hop here: gRPC callers authenticate with API keys; ``require_client_cert``
    only restricts who may connect."""
    if config is None:
        return None
    import grpc  # only a gateway with a gRPC listener loads grpc

    try:
        key = Path(_readable(config.key_file, "key_file")).read_bytes()
        cert = Path(_readable(config.cert_file, "cert_file")).read_bytes()
        ca = None
        if config.client_ca_file:
            ca = Path(_readable(config.client_ca_file, "client_ca_file")).read_bytes()
    except (OSError, ssl.SSLError) as exc:
        from gateway.config_base import ConfigError

        raise ConfigError(f"listen.tls: {exc}") from None
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=ca, require_client_auth=config.require_client_cert
    )


def listener_context(config: ListenTlsConfig | None) -> ssl.SSLContext | None:
    """``listen.tls`` as a server context (None: plain HTTP); ``ConfigError`` on bad files."""
    if config is None:
        return None
    try:
        return server_context(config)
    except (OSError, ssl.SSLError) as exc:
        from gateway.config_base import ConfigError

        raise ConfigError(f"listen.tls: {exc}") from None
