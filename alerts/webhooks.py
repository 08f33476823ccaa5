"""Webhook addresses: how they are shown outside the rule editor, and which targets are never contacted.

- `webhook_url_redacted(url)`: `scheme://host/… (sha256 <digest>)`, for the audit log, the sender's log lines,
  the alert page's delivery log and the API's delivery records (a Slack webhook's path is its secret).
- Link-local targets (169.254.0.0/16 with the cloud metadata address 169.254.169.254, fe80::/10, and the
  IPv6 metadata address fd00:ec2::254) are refused: when a rule is saved with an IP literal host, and when a
  delivery is sent (`target_check`: every address the host resolves to is checked). Private and loopback
  addresses stay allowed: internal receivers are common.
"""

from __future__ import annotations

import asyncio
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


def webhook_port_usable(url: str) -> bool:
    """True when `url` names no port or one a socket can take (1-65535): Django's URL validator and httpx take
    any five digits, and a delivery to port 65616 failed outside every error the sender handles."""
    try:
        port = httpx.URL(url).port
    except (httpx.InvalidURL, UnicodeError, ValueError):
        return False
    return port is None or 0 < port < 65536


class TargetRefused(Exception):
    """A delivery that must not be sent, now or later; the message says why."""


async def target_check(url: str) -> None:
    """Raise TargetRefused when `url` may never be sent to: a URL httpx cannot send to, or a host that is or
    resolves to a refused address (every address is checked). OSError when the name does not resolve (tried
    again later). Run it under the POST's deadline, on a loop whose executor nobody waits for (the lookup runs
    there and a stalled resolver would otherwise hold the sender).

    The name looked up is the one httpx itself resolves (`URL.raw_host`, IDNA 2008). Python's socket module
    encodes a str host by IDNA 2003 rules, under which `faß.example` is `fass.example`: a check made that way
    looked at one name while httpx connected to another (`xn--fa-hia.example`)."""
    try:
        parsed = httpx.URL(url)
        parsed.host  # noqa: B018 - decoding the host is the check (an "xn--" label is decoded lazily)
        host = parsed.raw_host.decode("ascii")
    except (httpx.InvalidURL, UnicodeError, ValueError) as exc:
        raise TargetRefused(f"Not a URL the sender can use: {type(exc).__name__}: {exc}"[:500]) from None
    if parsed.scheme not in ("http", "https") or not host:
        raise TargetRefused("Not a URL the sender can use: an http:// or https:// address with a host.")
    if not webhook_port_usable(url):
        raise TargetRefused(f"Not a URL the sender can use: port {parsed.port} is not 1-65535.")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    for info in infos:
        address = str(info[4][0])
        if address_refused(address):
            raise TargetRefused(f"Refused: {host} is or resolves to the link-local or metadata address {address}.")
