from typing import Any

import uvicorn
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Serve the gateway data plane (/v1/...) with uvicorn; N worker processes share Redis breakers."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8080)
        parser.add_argument("--workers", type=int, default=1)

    def handle(self, *args: Any, host: str, port: int, workers: int, **options: Any) -> None:
        if workers > 1 and not settings.REDIS_URL:
            raise CommandError("Several workers need REDIS_URL so that they share one breaker per circuit.")
        # uvicorn traps SIGTERM: it stops accepting, finishes in-flight requests, then runs the
        # app's shutdown (which drains the request-log buffer).
        uvicorn.run(
            "gateway.app:create_app",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            http="httptools",
            loop="uvloop",
            lifespan="on",
            access_log=False,
            log_level="warning",
            timeout_graceful_shutdown=30,
        )
