import os
import sys
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Serve the gateway data plane (/v1/...) with uvicorn; N worker processes share Redis breakers."

    def check(self, *args: Any, **kwargs: Any) -> None:
        """The system checks run before serving include those reading stored rows (undecryptable keys)."""
        from catalog.checks import stored_data_checks

        with stored_data_checks():
            super().check(*args, **kwargs)

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8080)
        parser.add_argument("--workers", type=int, default=1)

    def handle(self, *args: Any, host: str, port: int, workers: int, **options: Any) -> None:
        if workers < 1:
            raise CommandError("--workers must be at least 1.")
        if workers > 1 and not settings.REDIS_URL:
            raise CommandError("Several workers need REDIS_URL so that they share one breaker per circuit.")
        # Replace this process with a fresh uvicorn one: the gateway loads only what it needs
        # (no Celery, no console apps). uvicorn traps SIGTERM: it stops accepting, finishes
        # in-flight requests, then runs the app's shutdown, which drains the request-log buffer.
        env = {
            **os.environ,
            "CONTROLPLANE_PROCESS": "gateway",
            "DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE", "controlplane.settings"),
        }
        argv = [
            sys.executable,
            "-m",
            "uvicorn",
            "gateway.app:create_app",
            "--factory",
            "--host",
            host,
            "--port",
            str(port),
            "--workers",
            str(workers),
            "--http",
            "httptools",
            "--loop",
            "uvloop",
            "--lifespan",
            "on",
            "--no-access-log",
            "--log-level",
            "warning",
            "--timeout-graceful-shutdown",
            "30",
        ]
        sys.stdout.flush()
        os.execve(sys.executable, argv, env)  # noqa: S606 - fixed argv, our own interpreter
