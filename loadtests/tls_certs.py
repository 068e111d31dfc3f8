"""Throwaway certificates made with the ``openssl`` CLI (``make setup`` installs it): a CA, leaf
certificates it signs, and :func:`local_certificates` for a server on 127.0.0.1. An emulated
backend serves HTTPS with them and the gateway verifies it against the CA, as it would a
provider's endpoint; the mTLS tests between gateway hops make theirs here too."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

_EC = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2")

CertAndKey = tuple[Path, Path]


@dataclass(frozen=True)
class LocalCertificates:
    ca_file: Path
    cert_file: Path  # the server's, for IP 127.0.0.1
    key_file: Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def make_ca(where: Path, name: str) -> CertAndKey:
    """A self-signed CA, ``where/NAME.pem`` and ``where/NAME.key``."""
    cert, key = where / f"{name}.pem", where / f"{name}.key"
    _openssl("req", "-x509", *_EC, "-keyout", str(key), "-out", str(cert), "-subj", f"/CN={name}")
    return cert, key


def make_leaf(where: Path, name: str, ca: CertAndKey, *extra: str) -> CertAndKey:
    """A certificate ``ca`` signs (no CA itself); ``extra``: more ``openssl req`` arguments,
    e.g. ``"-addext", "subjectAltName=IP:127.0.0.1"``."""
    cert, key = where / f"{name}.pem", where / f"{name}.key"
    _openssl("req", "-x509", "-CA", str(ca[0]), "-CAkey", str(ca[1]), *_EC, "-keyout", str(key),
             "-out", str(cert), "-subj", f"/CN={name}", "-addext",
             "basicConstraints=critical,CA:FALSE", *extra)  # fmt: skip
    return cert, key


def local_certificates(where: Path) -> LocalCertificates:
    """A CA and the certificate of a server on 127.0.0.1 it signed."""
    ca = make_ca(where, "local-ca")
    cert, key = make_leaf(where, "server", ca, "-addext", "subjectAltName=IP:127.0.0.1")
    return LocalCertificates(ca[0], cert, key)
