"""The console keeps the operator's place across HTMX swaps and polls, in headless Chromium: the keyboard stays on
the control it was on (a sort click, a poll), a scrolled table keeps its scroll position through a poll, the
polled counts are announced outside the table, sortable headers look like links and show their direction at
rest, an override delete asks first, an error toast stays until dismissed (the stale row goes), and an error
summary takes the keyboard after a swap."""

import re

import pytest
from playwright.sync_api import Page, expect

from chains.models import FallbackChain
from health.breaker import Outcome
from health.models import BreakerOverride
from health.selectors import circuit_anchor
from tests.browser.test_health_browser import record
from tests.conftest import PASSWORD
from tests.factories import ChainFactory, LlmModelFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def log_in(page: Page, live_server, username: str, path: str) -> None:
    page.goto(f"{live_server.url}/login/?next={path}")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{live_server.url}{path}")


def active_id(page: Page) -> str:
    return page.evaluate(
        "() => document.activeElement ? document.activeElement.id || document.activeElement.tagName : ''"
    )


def wait_for_poll(page: Page) -> None:
    """Until the Provider Health table has been swapped by its poll at least once more."""
    page.evaluate(
        "() => { window.__cpSwapped = false;"
        " document.addEventListener('htmx:afterSettle', () => { window.__cpSwapped = true; }, {once: true}); }"
    )
    page.wait_for_function("() => window.__cpSwapped === true", timeout=10_000)


def test_the_keyboard_stays_on_a_sort_link_after_the_sort_and_after_a_poll(
    page: Page, live_server, admin_user, health_catalog, live_engine, console_errors
):
    page.set_default_timeout(10_000)
    record(live_engine, "openai", "gpt-4o", [Outcome.of_status(503)] * 10)
    record(live_engine, "anthropic", "claude-haiku", [Outcome.of_status(200)])
    log_in(page, live_server, admin_user.username, "/fallback/health/")

    failures = page.locator("#sort-failure-count")
    failures.focus()
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"sort="))
    expect(page.locator("#sort-failure-count").locator("xpath=..")).to_have_attribute("aria-sort", re.compile("."))
    assert active_id(page) == "sort-failure-count"

    wait_for_poll(page)
    wait_for_poll(page)
    assert active_id(page) == "sort-failure-count"  # not <body>

    # A control without a stable id in the table is found again too: the Events summary of a circuit.
    summary = page.locator(f"#events-summary-{circuit_anchor('openai', 'gpt-4o')}")
    summary.focus()
    wait_for_poll(page)
    assert active_id(page) == f"events-summary-{circuit_anchor('openai', 'gpt-4o')}"
    assert console_errors == []


def test_a_scrolled_table_keeps_its_place_through_a_poll_and_counts_are_announced(
    page: Page, live_server, admin_user, health_catalog, live_engine, console_errors
):
    page.set_default_timeout(10_000)
    page.set_viewport_size({"width": 1280, "height": 300})  # the table is taller than its 75vh box
    record(live_engine, "anthropic", "claude-haiku", [Outcome.of_status(200)])
    record(live_engine, "openai", "gpt-4o", [Outcome.of_status(200)])
    log_in(page, live_server, admin_user.username, "/fallback/health/")
    wrap = page.locator("#circuit-table-wrap")
    assert wrap.evaluate("(w) => w.scrollHeight > w.clientHeight + 40")
    expect(page.locator("#health-live")).to_have_text("0 circuits open, 0 half-open.")

    wrap.evaluate("(w) => { w.scrollTop = 40; }")
    wait_for_poll(page)
    wait_for_poll(page)
    assert page.locator("#circuit-table-wrap").evaluate("(w) => w.scrollTop") == 40

    # The role="status" region outside the table takes the new counts once they change.
    record(live_engine, "openai", "gpt-4o", [Outcome.of_status(503)] * 10)
    expect(page.locator("#health-live")).to_have_text("1 circuit open, 0 half-open.")
    assert page.locator("#health-live").evaluate("(el) => !el.closest('#circuit-table')")
    assert page.locator("#health-live").get_attribute("role") == "status"

    # The table fits its column at 1280 px: nothing (Force open…, Events) is cut off sideways.
    assert wrap.evaluate("(w) => w.scrollWidth <= w.clientWidth")
    assert console_errors == []


def test_sortable_headers_look_like_links_and_show_their_direction_at_rest(
    page: Page, live_server, admin_user, health_catalog, live_engine, console_errors
):
    page.set_default_timeout(10_000)
    record(live_engine, "openai", "gpt-4o", [Outcome.of_status(200)])
    log_in(page, live_server, admin_user.username, "/fallback/health/")
    page.mouse.move(0, 0)

    for sort_id in ("sort-failure-count", "sort-total-requests"):
        look = page.locator(f"#{sort_id}").evaluate(
            """(a) => { const icon = a.querySelector('span'); const s = getComputedStyle(a);
              return {color: s.color, th: getComputedStyle(a.closest('th')).color, line: s.textDecorationLine,
                      icon: icon.textContent, opacity: getComputedStyle(icon).opacity,
                      visibility: getComputedStyle(icon).visibility}; }"""
        )
        assert look["color"] != look["th"], "a sort link has the link colour, not the header's"
        assert look["line"] == "underline"
        assert (look["icon"], look["opacity"], look["visibility"]) == ("↕", "1", "visible")
    expect(page.locator("#sort-model")).to_have_text("Model ▲")
    assert console_errors == []


def test_deleting_an_override_asks_first(page: Page, live_server, admin_user, health_catalog, live_engine):
    page.set_default_timeout(10_000)
    BreakerOverride.objects.create(provider="openai", model="gpt-4o", failure_threshold=3)
    log_in(page, live_server, admin_user.username, "/fallback/health/")
    page.get_by_role("link", name="Configure thresholds").click()
    editor = page.locator("#configure-dialog")
    confirm = editor.get_by_role("button", name="Delete override openai / gpt-4o", exact=True)

    expect(confirm).to_be_hidden()  # nothing deletes on the first click
    editor.locator("#override-list summary").click()
    expect(confirm).to_be_visible()
    assert BreakerOverride.objects.count() == 1

    editor.locator("#override-list summary").click()  # "Cancel": folds it again
    expect(confirm).to_be_hidden()
    editor.locator("#override-list summary").click()
    confirm.click()
    expect(editor.get_by_text("No overrides: every circuit uses the global thresholds.")).to_be_visible()
    assert BreakerOverride.objects.count() == 0


def test_an_error_toast_stays_and_the_stale_row_goes(page: Page, live_server, admin_user, console_errors):
    page.set_default_timeout(10_000)
    alpha, beta = LlmModelFactory(name="alpha"), LlmModelFactory(name="beta")
    ChainFactory(name="keep", entries=[alpha, beta])
    gone = ChainFactory(name="zz gone", entries=[beta, alpha])
    page.clock.install()
    log_in(page, live_server, admin_user.username, "/fallback/chains/")
    toggle = page.locator(f"#chain-toggle-{gone.pk}")
    expect(toggle).to_be_visible()

    FallbackChain.objects.filter(pk=gone.pk).delete()  # deleted elsewhere meanwhile
    toggle.click()
    toast = page.locator("#toasts .toast-error")
    expect(toast).to_have_text(re.compile("That item no longer exists."))
    expect(page.locator(f"#chain-row-{gone.pk}")).to_have_count(0)  # the stale row is gone
    assert active_id(page) != "BODY"

    page.clock.run_for(20_000)
    expect(toast).to_have_count(1)  # an error waits for the operator
    toast.get_by_role("button", name="Dismiss").click()
    expect(page.locator("#toasts .toast")).to_have_count(0)
    assert [e for e in console_errors if "404" not in e] == []


def test_an_error_summary_takes_the_keyboard_after_a_swap(page: Page, live_server, admin_user, console_errors):
    page.set_default_timeout(10_000)
    log_in(page, live_server, admin_user.username, "/alerts/rules/new/")
    page.fill("#id_minutes", "-5")
    page.locator("#rule-save").focus()
    page.keyboard.press("Enter")

    expect(page.locator("#error-summary")).to_be_visible()
    expect(page.locator("#error-summary")).to_be_focused()
    assert console_errors == []
