"""Playwright drives Debian's Chromium (never a downloaded browser)."""

import time
from collections.abc import Iterator
from typing import Any

import pytest

from health import views as health_views
from health.breaker import ManualClock, MemoryEngine, use_engine

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    return {**browser_type_launch_args, "executable_path": "/usr/bin/chromium", "args": CHROMIUM_ARGS}


@pytest.fixture(scope="session")
def base_url(pytestconfig: pytest.Config) -> str | None:
    """pytest-playwright's fallback `base_url` is a fixture method of a plugin class, which pytest deprecates
    (a warning in every run); this is the same value from a plain function. The tests pass absolute URLs."""
    return pytestconfig.getoption("--base-url", default=None)


@pytest.fixture
def console_errors(page):
    """Console errors (CSP violations show up here) collected during the test."""
    errors: list[str] = []

    def on_console(message: Any) -> None:
        if message.type == "error":
            where = message.location or {}
            errors.append(f"{message.text} [{where.get('url', '')}:{where.get('lineNumber', '')}]")

    page.on("console", on_console)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    return errors


@pytest.fixture
def live_engine(monkeypatch: pytest.MonkeyPatch) -> Iterator[MemoryEngine]:
    """The breaker the console reads: in memory, on the wall clock's current time (fixed, so cooldowns and "ago"
    read naturally against Django's clock), with the Provider Health table polled every second."""
    engine = MemoryEngine(clock=ManualClock(round(time.time(), 3)))
    monkeypatch.setattr(health_views, "POLL_SECONDS", 1)
    with use_engine(engine):
        yield engine
