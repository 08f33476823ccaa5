"""The README's nginx example ("Behind a TLS-terminating proxy"), replayed through the servers' proxy handling:
every client it forwards must keep its own address, or the loopback default of METRICS_ALLOWED_NETWORKS opens
`/metrics` to the internet through the proxy."""

import re
from pathlib import Path

import pytest
from django.conf import settings
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from core.networks import address_allowed

ROOT = Path(__file__).resolve().parents[2]
CLIENT = "203.0.113.7"
# What nginx substitutes for the variables the example uses, for an https request from CLIENT that sent no
# X-Forwarded-For of its own.
NGINX_VARIABLES = {"$host": "example.com", "$scheme": "https", "$proxy_add_x_forwarded_for": CLIENT}


def _proxied_servers() -> dict[str, list[tuple[str, str]]]:
    """server_name -> the headers its `location /` sets, for each server block of the README that proxies."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("### Behind a TLS-terminating proxy", 1)[1]
    nginx = re.search(r"```nginx\n(.*?)```", section, re.S).group(1)
    servers = {}
    for block in nginx.split("server {")[1:]:
        if "proxy_pass" not in block:
            continue
        name = re.search(r"server_name\s+([^;]+);", block).group(1)
        headers = re.findall(r"proxy_set_header\s+(\S+)\s+(\S+);", block)
        servers[name] = [(header, NGINX_VARIABLES.get(value, value)) for header, value in headers]
    return servers


def _peer_seen_by_uvicorn(headers: list[tuple[str, str]]) -> str:
    """The client address the gateway's uvicorn (proxy headers on, FORWARDED_ALLOW_IPS 127.0.0.1) hands its app
    for a request from a proxy on the same host."""
    seen = {}

    async def app(scope, receive, send):
        seen["client"] = scope["client"][0]

    scope = {
        "type": "http",
        "client": ("127.0.0.1", 50000),
        "headers": [(name.lower().encode(), value.encode()) for name, value in headers],
    }
    # Driven by hand, without an event loop (another test in this process may have one running): neither the
    # middleware nor this app awaits anything, so the coroutine finishes at its first step.
    step = ProxyHeadersMiddleware(app, trusted_hosts="127.0.0.1")(scope, None, None)
    with pytest.raises(StopIteration):
        step.send(None)
    return seen["client"]


def test_the_example_proxies_the_console_and_the_gateway():
    assert set(_proxied_servers()) == {"console.example.com", "gateway.example.com"}


@pytest.mark.parametrize("server", ["console.example.com", "gateway.example.com"])
def test_every_proxied_server_forwards_the_client_address(server):
    """The gateway block set no X-Forwarded-For: uvicorn then kept the proxy's loopback address as the client's,
    and the gateway answered `/metrics` to anyone on the internet."""
    headers = dict(_proxied_servers()[server])

    assert headers.get("X-Forwarded-For") == CLIENT
    assert headers.get("X-Forwarded-Proto") == "https"


def test_through_the_example_gateway_proxy_metrics_stay_closed():
    client = _peer_seen_by_uvicorn(_proxied_servers()["gateway.example.com"])

    assert client == CLIENT
    assert not address_allowed(client, settings.METRICS_ALLOWED_NETWORKS)
