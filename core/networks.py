"""Who may read `GET /metrics` by network (docs/metrics.md): the gateway's and the console's one rule."""

import ipaddress
from collections.abc import Iterable

# The one-line text/plain body of a refused /metrics request.
METRICS_FORBIDDEN_TEXT = "Forbidden: /metrics answers METRICS_ALLOWED_NETWORKS or an admin console API token.\n"


def address_allowed(address: str, networks: Iterable[str]) -> bool:
    """Whether an IP address lies in one of the CIDR networks (an IPv4-mapped IPv6 address as its IPv4)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip in ipaddress.ip_network(network, strict=False) for network in networks)
