"""Which backend URLs a configuration may name.

- No query string or fragment: the gateway appends ``/v1/...`` paths to the URL, so
  ``http://b1:8000/v1?key=x`` would build ``http://b1:8000/v1?key=x/v1/chat/completions``.
- No link-local or cloud-metadata address (169.254.0.0/16 — 169.254.169.254 however it is
  spelled, ``0xA9FEA9FE`` or ``2852039166`` included — fe80::/10, fd00:ec2::254,
  ``metadata.google.internal``) unless the backend says ``allow_link_local: true``: a config
  that can be edited by fewer people than can send requests must not turn the gateway into a
  way to read instance credentials.

Checked on the literal host only: resolving names here would make loading a config do I/O.
"""

from __future__ import annotations

import ipaddress
import socket

from pydantic import AnyHttpUrl

_METADATA_NAMES = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
    }
)
_METADATA_V6 = (ipaddress.ip_network("fd00:ec2::/32"),)

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def host_address(host: str) -> IpAddress | None:
    """The IP a URL host literally names, in any of the spellings resolvers accept."""
    bare = host.strip("[]").rstrip(".")
    try:
        address = ipaddress.ip_address(bare)
    except ValueError:
        try:  # inet_aton parses, without DNS, the hex, octal and short forms too
            address = ipaddress.IPv4Address(socket.inet_aton(bare))
        except OSError:
            return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def is_link_local_or_metadata(host: str) -> bool:
    if host.strip("[]").rstrip(".").lower() in _METADATA_NAMES:
        return True
    address = host_address(host)
    if address is None:
        return False
    return address.is_link_local or any(address in net for net in _METADATA_V6)


def check_backend_url(url: AnyHttpUrl, allow_link_local: bool) -> None:
    """Raise ``ValueError`` (pydantic reports it under the backend's ``url`` key)."""
    if url.query is not None or url.fragment is not None or "?" in str(url) or "#" in str(url):
        raise ValueError(
            "a backend URL takes no query string or fragment (paths are appended to it)"
        )
    host = url.host or ""
    if not allow_link_local and is_link_local_or_metadata(host):
        raise ValueError(
            f"host {host} is link-local or a cloud metadata address; set "
            "'allow_link_local: true' on this backend if that is really where it runs"
        )
