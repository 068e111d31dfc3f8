"""Which address is the client's: honour ``X-Forwarded-For`` only from trusted proxies.

Anyone can send ``X-Forwarded-For``; only hops we operate (the configured CIDRs) are believed.
Walking the chain from the right (the hop nearest us), every trusted hop is skipped and the
first untrusted one is the client: entries further left were written by the client or by
proxies we do not control, so they could say anything.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable, Sequence

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

MAX_HOPS = 64  # a longer chain is abuse or a loop; the right-most hops are the ones that count


def parse_ip(text: str | None) -> IPAddress | None:
    """An address from a header or peer string (``1.2.3.4``, ``1.2.3.4:80``, ``[::1]:80``).

    IPv4-mapped IPv6 (``::ffff:1.2.3.4``, what dual-stack sockets report) becomes IPv4, so
    IPv4 CIDRs and databases match it. Anything unparseable is ``None``.
    """
    if not text:
        return None
    candidate = text.strip().strip('"')
    if candidate.startswith("["):
        candidate = candidate[1 : candidate.find("]")] if "]" in candidate else ""
    elif candidate.count(":") == 1:
        candidate = candidate.split(":", 1)[0]  # IPv4 with a port
    candidate = candidate.split("%", 1)[0]  # IPv6 zone id
    try:
        address = ipaddress.ip_address(candidate)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


# A client sends many requests from one socket address, so the peer's address is parsed once
# (``ipaddress.ip_address`` and the checks around it were ~2 us a request). Only the peer, which
# the socket gives: header text is the client's to choose and could fill a cache with long
# strings. Addresses are immutable, so sharing them is safe.
_parse_peer = functools.lru_cache(maxsize=4096)(parse_ip)


def parse_networks(cidrs: Iterable[str]) -> tuple[IPNetwork, ...]:
    return tuple(ipaddress.ip_network(cidr, strict=False) for cidr in cidrs)


def _trusted(address: IPAddress, networks: Sequence[IPNetwork]) -> bool:
    return any(address.version == net.version and address in net for net in networks)


def client_address(
    peer: str | None,
    forwarded_for: str | Sequence[str] | None,
    trusted: Sequence[IPNetwork],
) -> IPAddress | None:
    """The client's address, or ``None`` when it cannot be told (callers use the default).

    ``forwarded_for`` is the header value, or all its values when it was sent several times
    (they form one list, in order).
    """
    peer_ip = _parse_peer(peer)
    if peer_ip is None or not forwarded_for or not _trusted(peer_ip, trusted):
        return peer_ip
    joined = forwarded_for if isinstance(forwarded_for, str) else ",".join(forwarded_for)
    hops = joined.split(",")[-MAX_HOPS:]
    for hop in reversed(hops):
        address = parse_ip(hop)
        if address is None:
            return None  # garbage where the client should be: nothing left of it is usable
        if not _trusted(address, trusted):
            return address
    return parse_ip(hops[0])  # every hop is ours: the left-most is as far as anyone saw
