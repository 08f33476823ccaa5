"""Configuration change notification.

Every console or API save calls `config_publish()` after commit. It bumps a
version and notifies gateway processes: in embedded mode through in-process
listeners, in production through Redis (INCR + PUBLISH), so each gateway
process rebuilds its snapshot.
"""

import logging
import threading
from collections.abc import Callable

from django.conf import settings

log = logging.getLogger(__name__)

CHANNEL = "cp:config"
VERSION_KEY = "cp:config:version"

_listeners: list[Callable[[int], None]] = []
_lock = threading.Lock()
_local_version = 0


def config_subscribe(listener: Callable[[int], None]) -> None:
    """Register an in-process listener, called with the new version after each change."""
    with _lock:
        _listeners.append(listener)


def config_unsubscribe(listener: Callable[[int], None]) -> None:
    with _lock:
        if listener in _listeners:
            _listeners.remove(listener)


def config_publish() -> int:
    """Bump the config version and notify every gateway process. Never raises."""
    global _local_version
    version = 0
    if settings.REDIS_URL:
        try:
            import redis

            client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=1, socket_connect_timeout=1)
            version = int(client.incr(VERSION_KEY))
            client.publish(CHANNEL, str(version))
        except Exception:
            log.exception("config_publish: Redis notify failed")
    with _lock:
        _local_version = max(_local_version + 1, version)
        version = _local_version
        listeners = list(_listeners)
    for listener in listeners:
        try:
            listener(version)
        except Exception:
            log.exception("config listener failed")
    return version
