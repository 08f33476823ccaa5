from typing import Any

import uvicorn
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Serve the fake OpenAI-compatible upstream with fault injection (demo and tests only)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8001)

    def handle(self, *args: Any, host: str, port: int, **options: Any) -> None:
        self.stdout.write(f"Simulator on http://{host}:{port}/<provider>/v1 (control: /_sim/state)")
        # uvicorn traps SIGTERM/SIGINT and drains open connections before exiting.
        uvicorn.run(
            "gateway.simulator:app",
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            http="httptools",
            loop="uvloop",
            lifespan="off",
        )
