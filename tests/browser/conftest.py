"""Playwright drives Debian's Chromium (never a downloaded browser)."""

from typing import Any

import pytest

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
