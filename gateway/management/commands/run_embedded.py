"""`make run`: the simulator, then ONE process serving the console and the gateway (embedded mode)."""

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import uvicorn
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from gateway.server import QuietUpgradeHttpToolsProtocol

ROOT = Path(__file__).resolve().parents[3]


def _die_with_parent() -> None:
    """Linux: the simulator gets SIGTERM when this process dies, however it dies (uvicorn re-raises
    SIGTERM after its graceful shutdown, which skips `finally` blocks)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class Command(BaseCommand):
    help = "Serve console + gateway in one process on --port, with the simulator on --simulator-port."

    def check(self, *args: Any, **kwargs: Any) -> None:
        """The system checks run before serving include those reading stored rows (undecryptable keys)."""
        from catalog.checks import stored_data_checks

        with stored_data_checks():
            super().check(*args, **kwargs)

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--simulator-port", type=int, default=8001)

    def handle(self, *args: Any, host: str, port: int, simulator_port: int, **options: Any) -> None:
        if not settings.EMBEDDED:
            raise CommandError("run_embedded is for embedded mode (REDIS_URL unset); use run_gateway in production.")
        simulator = subprocess.Popen(  # noqa: S603 - our own interpreter and command
            [sys.executable, "manage.py", "run_simulator", "--host", "127.0.0.1", "--port", str(simulator_port)],
            cwd=ROOT,
            preexec_fn=_die_with_parent,
        )
        key_file = settings.VAR_DIR / "demo_gateway_key"
        key = key_file.read_text().strip() if key_file.exists() else "<your gateway key>"
        base = f"http://{host}:{port}"
        self.stdout.write(
            f"\nControl Plane (embedded) on {base}\n"
            f"  console:   {base}/   (admin password: {settings.VAR_DIR / 'admin_password'})\n"
            f"  gateway:   {base}/v1/chat/completions\n"
            f"  simulator: http://127.0.0.1:{simulator_port}/_sim/state\n\n"
            f"Try it:\n"
            f"  curl -s {base}/v1/chat/completions -H 'Authorization: Bearer {key}' "
            "-H 'Content-Type: application/json' "
            """-d '{"model": "gpt-4o", "messages": [{"role": "user", "content": "Hello"}]}'\n"""
            f"Watch circuits open and fallbacks fire: .venv/bin/python manage.py demo_traffic\n"
        )
        try:
            uvicorn.run(
                "controlplane.asgi:application",
                host=host,
                port=port,
                http=QuietUpgradeHttpToolsProtocol,
                loop="uvloop",
                lifespan="on",
                access_log=False,
                log_level="warning",
                # As run_gateway: no `Server: uvicorn` on any answer; an Upgrade header is an ordinary request
                # (nothing here serves websockets), not two warnings in the log for every client that sends one.
                server_header=False,
                ws="none",
            )
        finally:
            simulator.terminate()
            simulator.wait(timeout=10)
