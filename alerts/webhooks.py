"""Webhook addresses: how they are shown outside the rule editor, and which targets are never contacted.

- `webhook_url_redacted(url)`: `scheme://host/… (sha256 <digest>)`, for the audit log, the sender's log lines,
  the alert page's delivery log and the API's delivery records (a Slack webhook's path is its secret).
- Link-local targets (169.254.0.0/16 with the cloud metadata address 169.254.169.254, fe80::/10, and the
  IPv6 metadata address fd00:ec2::254) are refused: when a rule is saved with an IP literal host, and when a
  delivery is sent (every address the host resolves to is checked). Private and loopback addresses stay
  allowed: internal receivers are common.
"""

from __future__ import annotations

import hashlib
import ipaddress
import socket
from urllib.parse import urlsplit

import httpx

# Besides the link-local ranges: a cloud's instance-metadata address that is not link-local (AWS, IPv6).
_METADATA = frozenset({ipaddress.ip_address("fd00:ec2::254")})


def webhook_url_redacted(url: str) -> str:
    """A webhook address without its path, query or credentials, plus a digest of the whole ("" for none)."""
    if not url:
        return ""
    try:
        host = urlsplit(url).hostname or ""
        scheme = urlsplit(url).scheme
    except ValueError:  # not parseable as a URL: nothing of it is shown
        host, scheme = "", ""
    digest = hashlib.sha256(url.encode()).hexdigest()[:10]
    return f"{scheme}://{host}/… (sha256 {digest})"


def webhook_url_sendable(url: str) -> bool:
    """True when the sender's HTTP client can send to `url` (Django's URL validator passes hosts it refuses,
    such as "☃.example.com", which is not a valid IDNA name, or "xn--a.com")."""
    try:
        httpx.URL(url).host  # noqa: B018 - decoding the host is the check (an "xn--" label is decoded lazily)
    except (httpx.InvalidURL, UnicodeError, ValueError):
        return False
    return True


def address_refused(address: str) -> bool:
    """True for an address no webhook may reach: link-local (IPv4, IPv6, IPv4-mapped) or a metadata address."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])  # an IPv6 zone ("fe80::1%eth0") is dropped
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_link_local or ip in _METADATA


def literal_host_refused(url: str) -> bool:
    """True when the URL's host is an IP literal that `address_refused` refuses, in any of the forms a resolver
    reads as one (`169.254.169.254`, `[fe80::1]`, `2852039166`, `0xa9fea9fe`). Host names are checked at send."""
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return False
    if address_refused(host):
        return True
    try:
        packed = socket.inet_aton(host)  # the legacy IPv4 forms: decimal, hex, octal, fewer dots
    except (OSError, ValueError):
        return False
    return address_refused(str(ipaddress.IPv4Address(packed)))


def target_refusal(url: str) -> str:
    """Why a delivery to `url` must not be sent ("" when it may): its host resolves to a refused address.

    A host that does not resolve is left to the POST, which fails and is retried like any connection error.
    """
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return ""
    if not host:
        return ""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        refused = literal_host_refused(url)
        return f"Refused: {host} is a link-local or metadata address." if refused else ""
    for info in infos:
        address = str(info[4][0])
        if address_refused(address):
            return f"Refused: {host} is or resolves to the link-local or metadata address {address}."
    return ""
