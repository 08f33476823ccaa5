"""The process-wide engine for the current settings, and a way for tests to install their own."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator

from health.breaker.base import BreakerEngine
from health.breaker.memory import MemoryEngine
from health.breaker.types import Clock, ConfigSet

log = logging.getLogger(__name__)

DEFAULT_NAMESPACE = "cp:breaker"

_engine: BreakerEngine | None = None
_lock = threading.Lock()
_listening = False


def load_config() -> ConfigSet:
    """Thresholds from the database; the defaults when it cannot be read (the gateway keeps running)."""
    from health.selectors import breaker_config_snapshot

    try:
        return breaker_config_snapshot()
    except Exception:  # no database must not stop the breaker
        log.exception("breaker: could not load the breaker configuration; using the previous/default one")
        return _engine.config if _engine is not None else ConfigSet()


def _load_config_in_subscriber() -> ConfigSet:
    """load_config for the Redis subscriber thread, which must not keep a database connection open."""
    from django.db import connections

    try:
        return load_config()
    finally:
        connections.close_all()  # connections are per thread: this closes only the subscriber's


def build_engine(
    *,
    redis_url: str = "",
    namespace: str = DEFAULT_NAMESPACE,
    clock: Clock | None = None,
    config: ConfigSet | None = None,
    probe_timeout_seconds: float | None = None,
    config_channel: str | None = None,
    config_loader: object = None,
) -> BreakerEngine:
    """A new engine: Redis when `redis_url` is set, memory otherwise. Tests pass a clock and a namespace."""
    extra = {} if probe_timeout_seconds is None else {"probe_timeout_seconds": probe_timeout_seconds}
    if redis_url:
        from health.breaker.redis_backend import RedisEngine

        return RedisEngine(
            url=redis_url,
            namespace=namespace,
            clock=clock,
            config=config,
            config_channel=config_channel,
            config_loader=config_loader,
            **extra,  # type: ignore[arg-type]
        )
    return MemoryEngine(clock=clock, config=config, **extra)  # type: ignore[arg-type]


def _on_config_change(version: int) -> None:
    engine = _engine
    if engine is not None:
        engine.configure(load_config())


def _listen() -> None:
    global _listening
    if not _listening:
        from controlplane.configbus import config_subscribe

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

            from controlplane.configbus import CHANNEL

            redis_url = getattr(settings, "REDIS_URL", "")
            _engine = build_engine(
                redis_url=redis_url,
                namespace=getattr(settings, "BREAKER_REDIS_NAMESPACE", DEFAULT_NAMESPACE),
                config=load_config(),
                config_channel=CHANNEL if redis_url else None,
                config_loader=_load_config_in_subscriber if redis_url else None,
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


def engine_apply_config() -> None:
    """Reload the thresholds into this process's engine now (services call it on commit)."""
    _on_config_change(0)
