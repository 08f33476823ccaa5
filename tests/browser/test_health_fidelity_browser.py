"""Provider Health as documented, in headless Chromium: sorting by Failure count and Total requests, and the
threshold editor's warning with "Save anyway". Screenshots at 1280x800 and 390x844, light and dark, go to
$SCREENSHOT_DIR (default /tmp/shots)."""

import os
import re
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from health import views as health_views
from health.breaker import Outcome
from health.selectors import breaker_config_get, circuit_anchor
from tests.conftest import PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

SHOTS = Path(os.environ.get("SCREENSHOT_DIR", "/tmp/shots"))
SIZES = {"desktop": (1280, 800), "phone": (390, 844)}


def record(engine, provider: str, model: str, failures: int, successes: int) -> None:
    for outcome in [Outcome.of_status(200)] * successes + [Outcome.of_status(503)] * failures:
        engine.record(engine.allow(provider, model), outcome)


def log_in(page: Page, live_server, username: str) -> None:
    page.goto(f"{live_server.url}/fallback/health/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("link", name="Provider Health")).to_have_attribute("aria-current", "page")


def models(page: Page) -> list[str]:
    return page.locator("tr.ph-circuit td.circuit-model").evaluate_all("cells => cells.map(c => c.title)")


def column(page: Page, label: str) -> list[int]:
    cells = page.locator(f"tr.ph-circuit td[data-label='{label}']")
    return [int(text) for text in cells.evaluate_all("cells => cells.map(c => c.textContent.trim())")]


def shoot(page: Page, name: str, locator=None) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    for size, (width, height) in SIZES.items():
        page.set_viewport_size({"width": width, "height": height})
        for theme in ("light", "dark"):
            page.emulate_media(color_scheme=theme)
            path = SHOTS / f"health-fidelity-{name}-{size}-{theme}.png"
            page.screenshot(path=str(path), full_page=locator is None, caret="initial")
            assert path.stat().st_size > 0
    page.set_viewport_size({"width": 1280, "height": 800})
    page.emulate_media(color_scheme="light")


def test_sort_by_the_counts_and_save_risky_thresholds_anyway(
    page: Page, live_server, admin_user, health_catalog, live_engine, console_errors
):
    page.set_default_timeout(10_000)
    record(live_engine, "openai", "gpt-4o", failures=2, successes=18)
    record(live_engine, "openai", "gpt-4o-mini", failures=4, successes=0)
    record(live_engine, "anthropic", "claude-haiku", failures=1, successes=8)
    log_in(page, live_server, admin_user.username)

    table = page.locator("#circuit-table")
    failures = table.get_by_role("link", name="Failure count")
    expect(failures).to_have_attribute("aria-describedby", "window-help")
    expect(page.locator("#window-help")).to_have_text("Failure count and Total requests: the last 60 s.")

    # Failure count: most first; the order survives the table's polls; the URL can be shared.
    failures.click()
    expect(page).to_have_url(re.compile(r"\?sort=-failures$"))
    expect(table.locator("th[aria-sort='descending']")).to_contain_text("Failure count")
    assert models(page) == ["gpt-4o-mini", "gpt-4o", "claude-haiku"]
    record(live_engine, "anthropic", "claude-haiku", failures=4, successes=0)  # 5 failures now (it opens): first
    expect(
        page.locator(f"#circuit-row-{circuit_anchor('anthropic', 'claude-haiku')} td[data-label='Failure count']")
    ).to_have_text("5")
    assert models(page)[0] == "claude-haiku"

    # Total requests, then flipped to fewest first.
    table.get_by_role("link", name="Total requests").click()
    expect(page).to_have_url(re.compile(r"\?sort=-requests$"))
    expect(table.locator("th[aria-sort='descending']")).to_contain_text("Total requests")
    # Sorted within each provider; providers follow their first circuit (openai's 20 before anthropic's 13).
    assert models(page) == ["gpt-4o", "gpt-4o-mini", "claude-haiku"]
    assert column(page, "Total requests") == [20, 4, 13]
    table.get_by_role("link", name="Total requests").click()
    expect(table.locator("th[aria-sort='ascending']")).to_contain_text("Total requests")
    assert models(page) == ["gpt-4o-mini", "gpt-4o", "claude-haiku"]
    table.get_by_role("link", name="Failure count").click()
    expect(table.locator("th[aria-sort='descending']")).to_contain_text("Failure count")
    shoot(page, "provider-health")

    # The editor: a risky value asks first, and saves once "Save anyway" is ticked.
    page.get_by_role("link", name="Configure thresholds").click()
    editor = page.locator("#configure-dialog")
    expect(editor).to_be_visible()
    editor.get_by_text("When to tune these").click()
    expect(editor.get_by_text("Circuits open during normal latency spikes")).to_be_visible()
    form = editor.locator("#config-form")
    form.get_by_label("Minimum requests").fill("2")
    form.get_by_label("Failure threshold").fill("2")
    form.get_by_role("button", name="Save thresholds").click()
    warning = editor.locator("#config-warning")
    expect(warning).to_be_visible()
    expect(warning).to_be_focused()
    expect(warning).to_contain_text("nothing was saved yet")
    expect(warning.get_by_role("listitem")).to_have_count(2)
    expect(editor).to_be_visible()
    assert breaker_config_get().minimum_requests == 10
    shoot(page, "threshold-warning", locator=editor)

    warning.get_by_label(re.compile("Save anyway")).check()
    form.get_by_role("button", name="Save thresholds").click()
    expect(editor).to_be_hidden()
    expect(
        page.get_by_role("status").get_by_text("Breaker thresholds saved; every circuit uses them now.")
    ).to_be_visible()
    config = breaker_config_get()
    assert (config.failure_threshold, config.minimum_requests) == (2, 2)
    assert console_errors == []


def test_a_poll_during_a_sort_click_does_not_undo_it(
    page: Page, live_server, admin_user, health_catalog, live_engine, monkeypatch, console_errors
):
    """The table polls itself. A poll that answers while a sort click's request is still on its way must not
    leave the click without effect: the sort's answer is swapped in, not dropped on a table the poll replaced.
    The poll is made by hand (htmx.ajax from the table, as its timer does), so the test orders the two."""
    monkeypatch.setattr(health_views, "POLL_SECONDS", 3600)
    page.set_default_timeout(10_000)
    record(live_engine, "openai", "gpt-4o", failures=2, successes=18)
    record(live_engine, "openai", "gpt-4o-mini", failures=4, successes=0)
    log_in(page, live_server, admin_user.username)
    assert models(page) == ["gpt-4o", "gpt-4o-mini"]

    held: list = []
    page.route(re.compile(r"/fallback/health/\?sort=-failures$"), lambda route: held.append(route))
    with page.expect_request(re.compile(r"sort=-failures$")):
        page.locator("#circuit-table").get_by_role("link", name="Failure count").click()
    for _ in range(200):  # Playwright runs the route handler while the page is waited on
        if held:
            break
        page.wait_for_timeout(25)
    assert len(held) == 1
    # A poll now: it either waits for the sort (and then finds its table gone) or answers at once, in the
    # default order; either way the promise settles before the sort's answer is let through.
    page.evaluate(
        """() => htmx.ajax('GET', '/fallback/health/',
                           {source: '#circuit-table', target: '#circuit-table', swap: 'outerHTML'})"""
    )
    held[0].continue_()
    expect(page.locator("#circuit-table th[aria-sort='descending']")).to_contain_text("Failure count")
    assert models(page) == ["gpt-4o-mini", "gpt-4o"]
    expect(page).to_have_url(re.compile(r"\?sort=-failures$"))
    assert console_errors == []
