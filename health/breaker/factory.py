"""The process-wide engine for the current settings, and a way for tests to install their own.

The engine knows nothing of where its thresholds are stored: the health app registers the function
that reads them (`set_config_source`, from `HealthConfig.ready`), so this package imports none of the
app's models or selectors.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator

from health.breaker.base import DEFAULT_PROBE_TIMEOUT_SECONDS, BreakerEngine, ConfigUnreadable
from health.breaker.events import EventBuffer
from health.breaker.memory import MemoryEngine
from health.breaker.types import Clock, ConfigSet

log = logging.getLogger(__name__)

DEFAULT_NAMESPACE = "cp:breaker"

_engine: BreakerEngine | None = None
# Reads the thresholds (the health app's breaker_config_snapshot); may raise when the database is away.
_config_source: Callable[[], ConfigSet] | None = None
_lock = threading.Lock()
_listening = False
# The last configuration load error logged, so that a database outage logs one line, not one per change.
_config_error: str | None = None
_config_error_lock = threading.Lock()


def set_config_source(source: Callable[[], ConfigSet]) -> None:
    """Register the function that reads the thresholds (from the database); called once at app start."""
    global _config_source
    _config_source = source


def _read_config() -> ConfigSet | None:
    """Thresholds from the database; None when it cannot be read (logged once per distinct error)."""
    global _config_error
    try:
        source = _config_source
        if source is None:
            raise RuntimeError("no breaker configuration source registered")
        config = source()
    except Exception as exc:  # noqa: BLE001 - no database must not stop the breaker
        message = f"{type(exc).__name__}: {exc}".strip()
        with _config_error_lock:
            repeated, _config_error = message == _config_error, message
        if not repeated:
            log.warning(
                "breaker: could not load the breaker configuration (%s); using the previous/default one", message
            )
        return None
    with _config_error_lock:
        _config_error = None
    return config


def load_config() -> ConfigSet:
    """Thresholds from the database; the current (or default) ones when it cannot be read (the gateway runs on)."""
    config = _read_config()
    if config is None:
        return _engine.config if _engine is not None else ConfigSet()
    return config


def _load_config_in_subscriber(version: int) -> ConfigSet:
    """The Redis subscriber's reload on a published `version`: the thresholds and holds as the database has them.

    Every message is read, this process's own included (its listener has applied that one already: one more read
    of a rare change). Version numbers are not compared: Redis's counter starts again after an empty restart,
    and a process that saved while Redis was away numbered its changes on its own. Raises ConfigUnreadable when
    the database cannot be read, so the engine keeps what it has and tries again.
    """
    from django.db import connections

    try:
        config = _read_config()
    finally:
        connections.close_all()  # connections are per thread: this closes only the subscriber's
    if config is None:
        raise ConfigUnreadable("the breaker configuration could not be read")
    return config


def build_engine(
    *,
    redis_url: str = "",
    namespace: str = DEFAULT_NAMESPACE,
    clock: Clock | None = None,
    config: ConfigSet | None = None,
    probe_timeout_seconds: float | None = None,
    config_channel: str | None = None,
    config_loader: Callable[[int], ConfigSet | None] | None = None,
    config_lock: threading.Lock | None = None,
    events: EventBuffer | None = None,
) -> BreakerEngine:
    """A new engine: Redis when `redis_url` is set, memory otherwise. Tests pass a clock and a namespace.

    `events` is the buffer the engine appends its transitions to (default: one of its own, `engine.events`).
    """
    probe_timeout = DEFAULT_PROBE_TIMEOUT_SECONDS if probe_timeout_seconds is None else probe_timeout_seconds
    if redis_url:
        from health.breaker.redis_backend import RedisEngine

        return RedisEngine(
            url=redis_url,
            namespace=namespace,
            clock=clock,
            config=config,
            config_channel=config_channel,
            config_loader=config_loader,
            config_lock=config_lock,
            events=events,
            probe_timeout_seconds=probe_timeout,
        )
    return MemoryEngine(clock=clock, config=config, events=events, probe_timeout_seconds=probe_timeout)


# One reload at a time: a threaded server (the console's gthread workers) runs two requests' commits at once, and a
# reload that read the thresholds first but applied them last would leave the older ones in force.
_apply_lock = threading.Lock()


def _on_config_change(version: int) -> None:
    engine = _engine
    if engine is not None:
        with _apply_lock:
            config = _read_config()
            if config is not None:
                engine.configure(config)


def _listen() -> None:
    global _listening
    if not _listening:
        from core.configbus import config_subscribe

        config_subscribe(_on_config_change)
        _listening = True


def get_engine() -> BreakerEngine:
    """The process-wide engine: memory when REDIS_URL is empty (embedded mode), Redis otherwise."""
    global _engine
    engine = _engine
    if engine is not None:
        return engine
    with _lock:
        if _engine is None:
            from django.conf import settings

            from core.configbus import CHANNEL

            redis_url = getattr(settings, "REDIS_URL", "")
            _engine = build_engine(
                redis_url=redis_url,
                namespace=getattr(settings, "BREAKER_REDIS_NAMESPACE", DEFAULT_NAMESPACE),
                config=load_config(),
                probe_timeout_seconds=getattr(settings, "BREAKER_PROBE_TIMEOUT_SECONDS", None),
                config_channel=CHANNEL if redis_url else None,
                config_loader=_load_config_in_subscriber if redis_url else None,
                config_lock=_apply_lock,
            )
            _listen()
        return _engine


def peek_engine() -> BreakerEngine | None:
    """The process-wide engine if one was built, without building one."""
    return _engine


@contextlib.contextmanager
def use_engine(engine: BreakerEngine) -> Iterator[BreakerEngine]:
    """Make `engine` the process-wide one for the duration (tests)."""
    global _engine
    with _lock:
        previous, _engine = _engine, engine
        _listen()
    try:
        yield engine
    finally:
        with _lock:
            _engine = previous
