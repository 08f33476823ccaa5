"""ASGI entry point.

Embedded mode (no REDIS_URL): ONE process serves the console and the gateway —
`/v1/...`, `/healthz`, `/readyz` and `/metrics` go to the gateway, the rest to Django — so the
in-memory breaker the gateway uses is the one the Provider Health tab shows.
Production: the console only; gateways run under `manage.py run_gateway`.
"""

import os
from typing import Any

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
django_app = get_asgi_application()

from django.conf import settings  # noqa: E402

GATEWAY_PATHS = ("/v1/", "/healthz", "/readyz", "/metrics")


class EmbeddedRouter:
    """Sends gateway paths to the gateway app and everything else to Django; owns the lifespan.

    With `scheduler`, the periodic jobs (controlplane.periodic) run in this process for the app's lifetime.
    """

    def __init__(self, django: Any, gateway: Any, scheduler: Any = None) -> None:
        self.django = django
        self.gateway = gateway
        self.scheduler = scheduler

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            if self.scheduler is not None:
                self.scheduler.start()
            try:
                await self.gateway(scope, receive, send)
            finally:
                if self.scheduler is not None:
                    self.scheduler.stop()
        elif scope["type"] == "http" and scope["path"].startswith(GATEWAY_PATHS):
            await self.gateway(scope, receive, send)
        else:
            await self.django(scope, receive, send)


def _application() -> Any:
    if settings.EMBEDDED:
        from gateway.app import GatewayApp
        from gateway.bodies import BodyLimits
        from gateway.config import ConfigHolder
        from gateway.logsink import LogSink

        gateway = GatewayApp(
            config=ConfigHolder(),
            sink=LogSink(spill_dir=settings.REQUEST_LOG_SPILL_DIR),
            # The same request limits as run_gateway's workers.
            max_body=settings.GATEWAY_MAX_BODY_BYTES,
            deadline_seconds=settings.GATEWAY_DEADLINE_SECONDS,
            limits=BodyLimits.from_settings(settings),
            body_buffer=settings.GATEWAY_BODY_BUFFER_BYTES,
            body_read_timeout=settings.GATEWAY_BODY_READ_TIMEOUT_SECONDS,
            gc_young_threshold=settings.GATEWAY_GC_YOUNG_THRESHOLD,
            # /metrics is the gateway's here: it serves the console's metrics too.
            console_metrics=True,
        )
        from controlplane.periodic import EmbeddedScheduler

        scheduler = EmbeddedScheduler() if settings.EMBEDDED_PERIODIC_JOBS else None
        return EmbeddedRouter(django_app, gateway, scheduler)
    return django_app


application = _application()
