"""Keeps the current Snapshot and swaps in a new one after every configuration change.

Embedded mode: an in-process listener on the config bus. Production: a Redis
pub/sub subscriber plus a slow poll of the version key (in case a message was
missed while Redis was away). Rebuilding reads the database in a worker thread;
if the database is down the old snapshot keeps serving and the rebuild is retried.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import connections

from core.configbus import CHANNEL, VERSION_KEY, config_subscribe, config_unsubscribe
from gateway.snapshot import Snapshot, snapshot_build

log = logging.getLogger(__name__)


class ConfigHolder:
    """Holds the live snapshot. `current` is a plain attribute read: no lock on the request path."""

    def __init__(
        self,
        *,
        redis_url: str = "",
        poll_seconds: float = 5.0,
        retry_seconds: float = 2.0,
        full_rebuild_seconds: float = 60.0,
    ) -> None:
        self.current: Snapshot | None = None
        self.last_error: str = ""  # the full exception text: for the server log, never for /readyz
        self.last_error_code: str = ""  # a short code /readyz may show anyone: db_unreachable, db_error, ...
        self._redis_url = redis_url
        self._poll_seconds = poll_seconds
        self._retry_seconds = retry_seconds
        # Safety net: a change saved while Redis was unreachable never announced itself.
        self._full_rebuild_seconds = full_rebuild_seconds
        self._last_build = time.monotonic()
        self._wanted = 0  # highest version announced
        # Redis's version counter as last read. The poll compares with it, not with the snapshot's version: that one
        # is this process's own count (a wake with no version adds one to it), and the counter starts again from
        # nothing when Redis does.
        self._last_remote: int | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._version_client: Any = None  # one client (and pooled connection) for every poll of the version key

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> None:
        """Load the first snapshot (blocking, so /readyz is honest) and start listening."""
        self._wanted = self._remote_version()
        self.reload()
        if self._redis_url:
            self._spawn(self._listen_redis, "config-pubsub")
        else:
            config_subscribe(self.announce)
        self._spawn(self._rebuild_loop, "config-rebuild")

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        config_unsubscribe(self.announce)
        for thread in self._threads:
            thread.join(timeout=2)
        client, self._version_client = self._version_client, None
        if client is not None:
            client.close()

    def _spawn(self, target: Callable[[], object], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    # -- rebuilding ----------------------------------------------------------------
    def announce(self, version: int) -> None:
        """A change happened (version may be 0 when unknown): rebuild soon."""
        self._wanted = max(self._wanted, version) if version else self._wanted + 1
        self._wake.set()

    def reload(self) -> bool:
        """Rebuild now from the database; keep the old snapshot on failure."""
        target = self._wanted
        try:
            snapshot = snapshot_build(version=target)
        except Exception as exc:  # noqa: BLE001 - any database failure: keep serving the old snapshot
            message = f"{type(exc).__name__}: {exc}".strip()
            if message != self.last_error:
                log.warning(
                    "config snapshot rebuild failed, serving version %s: %s",
                    self.current.version if self.current else None,
                    message,
                )
            self.last_error = message
            self.last_error_code = _error_code(exc)
            return False
        finally:
            # Rebuilds are rare: do not hold a database connection between them.
            connections.close_all()
        self.current = snapshot  # atomic reference swap
        self._last_build = time.monotonic()
        self.last_error = ""
        self.last_error_code = ""
        return True

    def _rebuild_loop(self) -> None:
        while not self._stop.is_set():
            woke = self._wake.wait(timeout=self._poll_seconds)
            if self._stop.is_set():
                return
            self._wake.clear()
            if not woke:
                stale = time.monotonic() - self._last_build >= self._full_rebuild_seconds
                if not self._remote_changed() and not self.last_error and not stale:
                    continue
            delay = 0.05
            while not self.reload() and not self._stop.is_set():
                # Back off from 50 ms (a briefly locked table) to retry_seconds (a database outage).
                self._stop.wait(delay)
                delay = min(delay * 2, self._retry_seconds)

    # -- Redis ---------------------------------------------------------------------
    def _remote_changed(self) -> bool:
        """Whether a change was published that this process may have missed: Redis's counter moved since it was
        last read (without Redis: a version announced in-process and not yet built)."""
        if not self._redis_url:
            return self._wanted > (self.current.version if self.current else -1)
        before = self._last_remote
        self._remote_version()  # updates `_last_remote` when Redis answers
        return self._last_remote != before

    def _remote_version(self) -> int:
        """Redis's version counter (kept as the last read), or the highest version announced when it is unknown."""
        value = self._read_remote()
        if value is None:
            return self._wanted
        self._last_remote = value
        self._wanted = max(self._wanted, value)
        return value

    def _read_remote(self) -> int | None:
        if not self._redis_url:
            return None
        try:
            if self._version_client is None:
                import redis

                # Kept: a client per poll would open a connection each time and leave it to the cyclic collector.
                self._version_client = redis.Redis.from_url(self._redis_url, socket_timeout=1, socket_connect_timeout=1)
            return int(self._version_client.get(VERSION_KEY) or 0)
        except Exception:  # noqa: BLE001 - Redis away: the poll tries again
            return None

    def _listen_redis(self) -> None:
        import redis

        while not self._stop.is_set():
            try:
                client = redis.Redis.from_url(self._redis_url, socket_connect_timeout=2, health_check_interval=10)
                pubsub = client.pubsub(ignore_subscribe_messages=True)
                pubsub.subscribe(CHANNEL)
                # A change may have been published while we were not subscribed.
                self.announce(self._remote_version())
                while not self._stop.is_set():
                    message = pubsub.get_message(timeout=1.0)
                    if message and message.get("type") == "message":
                        try:
                            self.announce(int(message["data"]))
                        except (TypeError, ValueError):
                            self.announce(0)
            except Exception as exc:  # noqa: BLE001 - reconnect after any Redis failure
                log.warning("config subscriber lost Redis (%s); retrying", type(exc).__name__)
                self._stop.wait(self._retry_seconds)


def _error_code(exc: Exception) -> str:
    from django.db import DatabaseError, InterfaceError, OperationalError

    if isinstance(exc, OperationalError | InterfaceError):
        return "db_unreachable"
    if isinstance(exc, DatabaseError):
        return "db_error"
    return "rebuild_failed"


def wait_for_version(holder: ConfigHolder, version: int, timeout: float) -> bool:
    """Test and tooling helper: wait until the holder serves `version` or newer."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if holder.current is not None and holder.current.version >= version:
            return True
        time.sleep(0.01)
    return False
