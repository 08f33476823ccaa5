"""Deploy check: behind a TLS proxy, throttling must be told how many proxies append to X-Forwarded-For."""

from typing import Any

from django.conf import settings
from django.core.checks import Tags, Warning, register


@register(Tags.security, deploy=True)
def trusted_proxy_count_check(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    if settings.SECURE_PROXY_SSL_HEADER and settings.TRUSTED_PROXY_COUNT == 0:
        return [
            Warning(
                "SECURE_PROXY_SSL_HEADER is set (a proxy is in front) but TRUSTED_PROXY_COUNT is 0: every client "
                "has the proxy's address, so one attacker's failed sign-ins lock everyone out.",
                hint="Set TRUSTED_PROXY_COUNT to the number of proxies that append to X-Forwarded-For "
                "(1 for a single nginx or load balancer).",
                id="access.W001",
            )
        ]
    return []
