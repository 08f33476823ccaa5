"""Alerts fixtures: a real local webhook receiver with scripted answers, and rule helpers."""

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from alerts.selectors import alert_banner_forget
from alerts.services import RuleInput, alert_rule_create


@pytest.fixture(autouse=True)
def _no_cached_banner():
    """The banner is cached for a few seconds in the process-wide cache: no test sees another's."""
    alert_banner_forget()
    yield
    alert_banner_forget()


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict


@dataclass
class Receiver:
    """An HTTP server on 127.0.0.1:<free port> that records each POST and answers with the next scripted status
    (200 once the script is used up)."""

    server: ThreadingHTTPServer
    statuses: list[int] = field(default_factory=list)
    requests: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Set: each request waits for it before answering (to hold two senders inside the POST at once).
    gate: threading.Event | None = None
    arrived: int = 0  # POSTs received so far, counted before the gate
    # Set: called with each POST's arrival number (1, 2, ...) before it is answered: a receiver that stalls
    # while the hook runs (e.g. a second sender).
    on_arrival: Callable[[int], None] | None = None

    def wait_arrived(self, n: int, timeout: float = 10.0) -> bool:
        """Poll (with a deadline) until `n` POSTs are inside the handler: they come from other threads."""
        import time

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if self.arrived >= n:
                    return True
            time.sleep(0.01)
        return False

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/hook"

    def script(self, *statuses: int) -> None:
        with self.lock:
            self.statuses = list(statuses)

    def bodies(self) -> list[dict]:
        with self.lock:
            return [r.body for r in self.requests]


@pytest.fixture
def receiver():
    holder: dict[str, Receiver] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            rec = holder["r"]
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            with rec.lock:
                rec.arrived += 1
                number = rec.arrived
            if rec.on_arrival is not None:
                rec.on_arrival(number)
            if rec.gate is not None:
                rec.gate.wait(10)
            with rec.lock:
                rec.requests.append(Received(self.path, dict(self.headers), body))
                status = rec.statuses.pop(0) if rec.statuses else 200
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    holder["r"] = rec = Receiver(server)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield rec
    server.shutdown()
    server.server_close()


def make_rule(**fields) -> object:
    """A rule created through the service (actor: the system)."""
    data = {"name": "rule", "kind": "circuit_open", **fields}
    return alert_rule_create(actor=None, data=RuleInput(**data))
