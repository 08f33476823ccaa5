"""A WSGI app for test_console_server.py: one response streamed slowly, as a large export to a slow client."""

import time
from collections.abc import Iterator
from typing import Any

CHUNKS = 8
PAUSE_SECONDS = 0.5


def app(environ: dict[str, Any], start_response: Any) -> Iterator[bytes]:
    start_response("200 OK", [("Content-Type", "text/csv")])
    for i in range(CHUNKS):
        yield f"row {i}\n".encode()
        time.sleep(PAUSE_SECONDS)  # the producer is slow: this is what the test serves, not how it waits
