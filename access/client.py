"""The client address that throttling counts failures against."""

import ipaddress

from django.conf import settings
from django.http import HttpRequest


def client_ip(request: HttpRequest) -> str:
    """REMOTE_ADDR, or with TRUSTED_PROXY_COUNT = N > 0 the address N entries from the right of X-Forwarded-For
    (the one the outermost trusted proxy saw), as sent: may be empty or not an address."""
    address: str = request.META.get("REMOTE_ADDR", "")
    count = settings.TRUSTED_PROXY_COUNT
    if count > 0:
        forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
        forwarded = [part for part in forwarded if part]
        # Fewer entries than proxies: the request did not come through all of them; keep the peer address.
        if len(forwarded) >= count:
            address = forwarded[-count]
    return address


def client_address(request: HttpRequest) -> str:
    """client_ip() as throttling counts it: an IPv6 address as its /64 (one host owns a whole /64)."""
    address = client_ip(request)
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return (address or "unknown")[:150]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)
