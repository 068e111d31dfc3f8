"""Which DNS answers a backend host may take. Pure: addresses in, a verdict out.

- Link-local or cloud-metadata addresses (169.254.0.0/16, fe80::/10, fd00:ec2::/32) are refused
  unless the backend says ``allow_link_local: true`` — as a literal one is at config load.
- A host pinned to public addresses only may not turn private (RFC 1918, loopback, ULA,
  CGNAT, ...): that is what DNS rebinding does to reach what sits beside the gateway.
- Otherwise the new answer replaces the pin (a backend's addresses may move within its kind).

An answer is taken or refused whole: a mixed answer is refused.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from gateway.backend_urls import IpAddress

_METADATA_V6 = ipaddress.ip_network("fd00:ec2::/32")


def is_link_local(address: IpAddress) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_link_local or address in _METADATA_V6


def is_public(address: IpAddress) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global


@dataclass(frozen=True, slots=True)
class Verdict:
    accepted: bool
    reason: str = ""  # why refused, in an operator's words (addresses are the operator's own)


def judge(
    answer: tuple[IpAddress, ...],
    pinned: tuple[IpAddress, ...] | None,
    allow_link_local: bool,
) -> Verdict:
    """May ``answer`` replace ``pinned`` (None: nothing pinned yet)?"""
    if not answer:
        return Verdict(False, "the name resolved to no address")
    if not allow_link_local:
        bad = [str(a) for a in answer if is_link_local(a)]
        if bad:
            return Verdict(False, f"resolves to link-local/metadata address {', '.join(bad)}")
    if pinned and all(is_public(a) for a in pinned):
        private = [str(a) for a in answer if not is_public(a)]
        if private:
            return Verdict(
                False, f"pinned to public addresses, now resolves to private {', '.join(private)}"
            )
    return Verdict(True)
