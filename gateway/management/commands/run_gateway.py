import os
import shutil
import sys
import tempfile
from pathlib import Path
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
            # Every worker keeps its metrics in files here, so /metrics answered by any of them sums them all.
            "PROMETHEUS_MULTIPROC_DIR": metrics_dir(),
            "DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE", "controlplane.settings"),
        }
        argv = uvicorn_argv(host, port, workers)
        sys.stdout.flush()
        os.execve(sys.executable, argv, env)  # noqa: S606 - fixed argv, our own interpreter


def uvicorn_argv(host: str, port: int, workers: int) -> list[str]:
    """The command line of the gateway's uvicorn (bench/instructions.py runs the same one under valgrind)."""
    return [
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
        "gateway.server:CorkedHttpToolsProtocol",  # httptools, one write per response (gateway/server.py)
        "--ws",
        "none",
        "--no-server-header",
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


def metrics_dir() -> str:
    """A fresh prometheus_client multiprocess directory for this start, named after this process (uvicorn keeps
    its pid: the command execs it). Directories of earlier starts whose process is gone are removed, and one named
    after this very pid too: an earlier start of a process that had it (pid 1, in a restarted container)."""
    parent = Path(settings.VAR_DIR) / "gateway-metrics"
    try:
        parent.mkdir(parents=True, exist_ok=True)
        for old in parent.glob("run-*"):
            pid = old.name.split("-")[1]
            if pid.isdigit() and (int(pid) == os.getpid() or not _alive(int(pid))):
                shutil.rmtree(old, ignore_errors=True)
        return tempfile.mkdtemp(prefix=f"run-{os.getpid()}-", dir=parent)
    except OSError:
        return tempfile.mkdtemp(prefix="controlplane-gateway-metrics-")  # VAR_DIR not writable


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True
