"""Two config changes committed at once in one process (threaded console workers): the newer thresholds stay."""

import threading

import pytest

from health.breaker import BreakerSettings, ConfigSet, MemoryEngine, factory, use_engine

pytestmark = pytest.mark.db_independent


def test_a_reload_that_read_first_cannot_apply_its_older_thresholds_last(monkeypatch):
    older, newer = (
        ConfigSet(default=BreakerSettings(failure_threshold=5)),
        ConfigSet(default=BreakerSettings(failure_threshold=9)),
    )
    first_reading, release_first, second_read = threading.Event(), threading.Event(), threading.Event()

    def read_config() -> ConfigSet:
        if threading.current_thread().name == "first":
            first_reading.set()
            release_first.wait(10)  # the first reload is slow to read (the database, say)
            return older
        second_read.set()
        return newer

    monkeypatch.setattr(factory, "_read_config", read_config)
    with use_engine(MemoryEngine()) as engine:
        first = threading.Thread(target=factory._on_config_change, args=(1,), name="first")
        second = threading.Thread(target=factory._on_config_change, args=(2,), name="second")
        first.start()
        assert first_reading.wait(10)
        second.start()
        # Unserialised, the second reload reads and applies the newer thresholds now; serialised, it waits for
        # the first. A bounded wait for what must not happen (nothing to wait on when it does not).
        read_before_first_finished = second_read.wait(0.2)
        release_first.set()
        first.join(10)
        second.join(10)

        assert read_before_first_finished is False
        assert engine.config.default.failure_threshold == 9
