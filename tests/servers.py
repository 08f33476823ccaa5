"""Run an ASGI app on a real socket in a background thread, for tests over the network; the environment of the
product processes a test starts, and the removal of what they keep in Redis."""

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import redis
import uvicorn

# The headers of a request asking to become a websocket, which nothing here serves.
WEBSOCKET_UPGRADE = {
    "connection": "Upgrade",
    "upgrade": "websocket",
    "sec-websocket-version": "13",
    "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
}


@contextlib.contextmanager
def serve(
    app: Any, *, host: str = "127.0.0.1", lifespan: bool = False, http: Any = "h11", loop: str = "asyncio"
) -> Iterator[str]:
    """Serve `app` with uvicorn on a free port; yields the base URL; stops it on exit."""
    config = uvicorn.Config(
        app,
        host=host,
        port=0,
        log_level="warning",
        access_log=False,
        lifespan="on" if lifespan else "off",
        loop=loop,
        http=http,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    # Readiness wait for the server thread (not a synchronisation sleep on behaviour under test).
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("test server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def run_async(coroutine: Any) -> Any:
    """asyncio.run in a fresh thread: the test thread may already run a loop (Playwright's sync API)."""
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = asyncio.run(coroutine)
        except BaseException as exc:
            result["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result.get("value")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now, for a process the test starts."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def until[T](predicate: Callable[[], T], timeout: float, what: str) -> T:
    """Poll another process's observable state until `predicate()` is truthy (bounded); return that value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def within(predicate: Callable[[], object], timeout: float = 10.0) -> bool:
    """Poll another thread's or process's progress until `predicate()` is truthy or `timeout` passes; whether it
    was. For a test that still has to release what it holds (a hanging upstream, a socket) before it asserts."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return bool(predicate())


def wait_ready(
    url: str, proc: subprocess.Popen[bytes], *, path: str = "/readyz", timeout: float = 30, log: Path | None = None
) -> None:
    """Wait until a product process the test started answers `path` with 200; fail with its stderr (a pipe, or
    the file `log`) if it exits first."""

    def ready() -> bool:
        if proc.poll() is not None:
            said = log.read_text() if log else proc.stderr.read().decode() if proc.stderr else ""
            raise AssertionError(f"{url} exited with {proc.returncode}: {said[-2000:]}")
        try:
            return httpx.get(f"{url}{path}", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    until(ready, timeout, f"{url}{path} to answer 200")


def production_env(*, redis_url: str, namespace: str) -> dict[str, str]:
    """Environment for a product process (gateway, Celery worker) on this test's PostgreSQL database and Redis.

    Everything it keeps in Redis (breaker keys, the request-log stream, the Celery queue) is named under
    `namespace`, so concurrent test runs sharing one Redis never take each other's work; `delete_namespace`
    removes it afterwards.
    """
    from django.conf import settings
    from django.db import connection

    db = connection.settings_dict
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "REDIS_URL": redis_url,
        "SECRET_KEY": settings.SECRET_KEY,
        "BREAKER_REDIS_NAMESPACE": namespace,
        "REQUEST_LOG_STREAM": f"{namespace}:requestlogs",
        "CELERY_QUEUE": f"{namespace}:celery",
    }


def delete_namespace(redis_url: str, namespace: str) -> None:
    """Delete what a test kept in Redis under `namespace` (every key is `<namespace>:...`), and kombu's bindings
    of a `production_env` Celery queue (`_kombu.binding.<namespace>:celery` and its `binding_permanent`
    twin).

    kombu's shared keys (`unacked`, `unacked_index`) stay, since another run's worker may be using them, but
    the entries in them for this namespace's queues go: a worker killed mid-task leaves its message there, and
    any later worker on the same Redis would put it back, recreating `<namespace>:celery` after this ran."""
    client = redis.Redis.from_url(redis_url)
    patterns = (f"{namespace}:*", f"_kombu.binding.{namespace}:*", f"_kombu.binding_permanent.{namespace}:*")
    keys = [key for pattern in patterns for key in client.scan_iter(match=pattern, count=500)]
    if keys:
        client.delete(*keys)
    # An unacked entry is the JSON list [message, exchange, routing key]; the routing key names the queue.
    ours = [
        tag for tag, entry in client.hscan_iter("unacked") if str(json.loads(entry)[-1]).startswith(f"{namespace}:")
    ]
    if ours:
        client.hdel("unacked", *ours)
        client.zrem("unacked_index", *ours)
    client.close()
