"""The image's console server (the Dockerfile's CMD) finishes a response that takes longer than gunicorn's timeout.

gunicorn's default sync worker tells its arbiter it is alive only between requests, so a response still
streaming when `--timeout` runs out (a CSV export of 100,000 rows to a slow client) is cut off by a
SIGABRT, and the client gets a truncated file with no error. The CMD's worker must not do that.
"""

import socket
import subprocess
import sys

import httpx

from tests.deploy import slow_wsgi
from tests.deploy.test_compose import ROOT, _dockerfile_cmd


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _console_command(port: int) -> list[str]:
    """The CMD with this test's app, a local port, one worker, and a timeout shorter than the slow response (4 s).

    2 s, not 1: the threaded worker tells its arbiter it is alive once per turn of its loop, which waits up to
    1 s for an event, so with a 1 s timeout an idle worker on a busy machine was itself timed out."""
    program, app, *args = _dockerfile_cmd()
    assert (program, app) == ("gunicorn", "controlplane.wsgi")
    assert args[args.index("--bind") + 1] == "0.0.0.0:8000"
    args[args.index("--bind") + 1] = f"127.0.0.1:{port}"
    args[args.index("--workers") + 1] = "1"
    return [sys.executable, "-m", "gunicorn", "tests.deploy.slow_wsgi:app", *args, "--timeout", "2"]


def test_a_response_longer_than_the_worker_timeout_arrives_whole():
    port = _free_port()
    server = subprocess.Popen(
        _console_command(port), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    log: list[str] = []
    try:
        assert server.stdout is not None
        for line in server.stdout:  # the worker is up once the arbiter says it booted it
            log.append(line)
            if "Booting worker" in line:
                break
        with httpx.Client(timeout=15) as client:
            response = client.get(f"http://127.0.0.1:{port}/export.csv")
    finally:
        server.terminate()
        rest, _ = server.communicate(timeout=30)
        log.append(rest)

    assert response.status_code == 200
    assert response.text == "".join(f"row {i}\n" for i in range(slow_wsgi.CHUNKS))
    assert "WORKER TIMEOUT" not in "".join(log)
