"""`make run`: the simulator, then ONE process serving the console and the gateway (embedded mode)."""

import errno
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from gateway.server import QuietUpgradeHttpToolsProtocol

ROOT = Path(__file__).resolve().parents[3]
# How long the simulator may take to answer before `make run` gives up on it (it starts in about a second).
SIMULATOR_START_TIMEOUT = 30.0
DEFAULT_PORT = 8000
DEFAULT_SIMULATOR_PORT = 8001


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
        parser.add_argument("--port", type=int, default=DEFAULT_PORT)
        parser.add_argument("--simulator-port", type=int, default=DEFAULT_SIMULATOR_PORT)

    def handle(self, *args: Any, host: str, port: int, simulator_port: int, **options: Any) -> None:
        if not settings.EMBEDDED:
            raise CommandError("run_embedded is for embedded mode (REDIS_URL unset); use run_gateway in production.")
        _refuse_taken(simulator_port)
        simulator = subprocess.Popen(  # noqa: S603 - our own interpreter and command
            [sys.executable, "manage.py", "run_simulator", "--host", "127.0.0.1", "--port", str(simulator_port)],
            cwd=ROOT,
            preexec_fn=_die_with_parent,
        )
        try:
            _wait_answering(simulator, simulator_port)
            self._serve(host, port, simulator_port)
        finally:
            simulator.terminate()
            simulator.wait(timeout=10)

    def _serve(self, host: str, port: int, simulator_port: int) -> None:
        """The banner, then the console and the gateway until stopped."""
        key_file = settings.VAR_DIR / "demo_gateway_key"
        key = key_file.read_text().strip() if key_file.exists() else "<your gateway key>"
        base = f"http://{host}:{port}"
        simulator_url = f"http://127.0.0.1:{simulator_port}"
        traffic = ".venv/bin/python manage.py demo_traffic"
        if port != DEFAULT_PORT or host != "127.0.0.1":
            traffic += f" --base-url {base}"
        if simulator_port != DEFAULT_SIMULATOR_PORT:
            traffic += f" --simulator {simulator_url}"
        self.stdout.write(
            f"\nControl Plane (embedded) on {base}\n"
            f"  console:   {base}/   (admin password: {settings.VAR_DIR / 'admin_password'})\n"
            f"  gateway:   {base}/v1/chat/completions\n"
            f"  simulator: {simulator_url}/_sim/state\n\n"
            f"Try it:\n"
            f"  curl -s {base}/v1/chat/completions -H 'Authorization: Bearer {key}' "
            "-H 'Content-Type: application/json' "
            """-d '{"model": "gpt-4o", "messages": [{"role": "user", "content": "Hello"}]}'\n"""
            f"Watch circuits open and fallbacks fire: {traffic}\n"
        )
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


def _refuse_taken(port: int) -> None:
    """CommandError when something listens on 127.0.0.1:`port` already: the simulator could not start there,
    and whatever answers on it would be taken for the simulator."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        probe.bind(("127.0.0.1", port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise CommandError(f"Simulator port {port} in use. {_pick_another(port)}") from None
        raise CommandError(f"The simulator cannot listen on 127.0.0.1:{port}: {exc}") from None
    finally:
        probe.close()


def _wait_answering(simulator: subprocess.Popen[bytes], port: int) -> None:
    """Return once the simulator answers its control endpoint; CommandError if it exits first or stays silent
    for SIMULATOR_START_TIMEOUT seconds."""
    url = f"http://127.0.0.1:{port}/_sim/state"
    deadline = time.monotonic() + SIMULATOR_START_TIMEOUT
    with httpx.Client(timeout=1.0, trust_env=False) as client:
        while True:
            code = simulator.poll()
            if code is not None:
                raise CommandError(
                    f"The simulator exited (code {code}) before answering; its error is above (usually: port {port} "
                    f"in use). {_pick_another(port)}"
                )
            try:
                if client.get(url).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise CommandError(f"The simulator did not answer on {url} within {SIMULATOR_START_TIMEOUT:.0f} s.")
            try:
                simulator.wait(timeout=0.1)  # the pause between attempts, cut short if it exits
            except subprocess.TimeoutExpired:
                pass


def _pick_another(port: int) -> str:
    return (
        f"Stop what listens on {port}, or move the simulator: `make run SIM_PORT=<port>` "
        "(or `run_embedded --simulator-port <port>` with SIMULATOR_URL to match when seeding)."
    )
