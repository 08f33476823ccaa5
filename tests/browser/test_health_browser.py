"""Provider Health in headless Chromium: an open circuit, Reset through the dialog, Configure, the audit log.

The live server runs in this process, so `use_engine` installs the engine it reads; the table's poll
interval is shortened through the view constant and the tests wait on refreshed values, never sleep.
"""

import re

import pytest
from playwright.sync_api import Page, expect

from health.breaker import Outcome, State
from health.models import BreakerOverride
from health.selectors import breaker_config_get, circuit_anchor
from tests.conftest import PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def record(engine, provider: str, model: str, outcomes: list[Outcome]) -> None:
    for outcome in outcomes:
        engine.record(engine.allow(provider, model), outcome)


def log_in(page: Page, live_server, username: str) -> None:
    page.goto(f"{live_server.url}/fallback/health/")
    expect(page).to_have_url(re.compile(r"/login/\?next=/fallback/health/"))
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("link", name="Provider Health")).to_have_attribute("aria-current", "page")


def row(page: Page, provider: str, model: str):
    return page.locator(f"#circuit-row-{circuit_anchor(provider, model)}")


def test_reset_and_configure_through_the_console(
    page: Page, live_server, admin_user, health_catalog, live_engine, console_errors
):
    page.set_default_timeout(10_000)
    record(live_engine, "openai", "gpt-4o", [Outcome.of_status(503)] * 10)
    record(live_engine, "anthropic", "claude-haiku", [Outcome.of_status(200)])
    assert live_engine.get("openai", "gpt-4o").state is State.OPEN

    log_in(page, live_server, admin_user.username)
    gpt = row(page, "openai", "gpt-4o")
    haiku = row(page, "anthropic", "claude-haiku")
    expect(gpt.locator(".pill")).to_have_text("Open")
    expect(gpt.locator("td[data-label='Last failure']")).to_contain_text("503")
    expect(gpt.locator("td[data-label='Cooldown'] time")).to_have_text(re.compile(r"^in \d+ s$"))
    expect(haiku.locator(".pill")).to_have_text("Closed")

    # The dialog names the target; Escape closes it and focus returns to the row's Reset link.
    reset_link = page.get_by_role("link", name="Reset openai / gpt-4o")
    reset_link.click()
    dialog = page.locator("#reset-dialog")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_role("heading")).to_have_text("Reset openai / gpt-4o?")
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(reset_link).to_be_focused()

    # Open again; the table keeps refreshing underneath (new traffic shows up) and the dialog stays open.
    reset_link.click()
    expect(dialog).to_be_visible()
    record(live_engine, "anthropic", "claude-haiku", [Outcome.of_status(500)] * 3)
    expect(haiku.locator("td[data-label='Failure count']")).to_have_text("3")
    expect(haiku.locator("td[data-label='Total requests']")).to_have_text("4")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_role("heading")).to_have_text("Reset openai / gpt-4o?")

    # Confirm: the row flips to Closed at once, a toast says so, focus is back on the row.
    dialog.get_by_role("button", name="Reset openai / gpt-4o").click()
    expect(dialog).to_be_hidden()
    expect(gpt.locator(".pill")).to_have_text("Closed")
    expect(gpt.locator("td[data-label='Cooldown']")).to_have_text("—")
    expect(page.get_by_role("status").get_by_text("Circuit openai / gpt-4o reset: Open → Closed.")).to_be_visible()
    expect(reset_link).to_be_focused()
    assert live_engine.get("openai", "gpt-4o").state is State.CLOSED

    # Configure: an error keeps the dialog open with the input and an inline message; a fix saves and closes.
    page.get_by_role("link", name="Configure thresholds").click()
    editor = page.locator("#configure-dialog")
    expect(editor).to_be_visible()
    global_form = editor.locator("#config-form")
    threshold = global_form.get_by_label("Failure threshold")
    expect(threshold).to_have_value("5")
    threshold.fill("0")
    editor.get_by_role("button", name="Save thresholds").click()
    expect(editor.locator("#id_failure_threshold-error")).to_have_text("Failure threshold must be at least 1.")
    expect(editor.get_by_role("alert")).to_contain_text("1 problem to fix; nothing was saved")
    expect(editor).to_be_visible()
    expect(global_form.get_by_label("Failure threshold")).to_have_value("0")
    assert breaker_config_get().failure_threshold == 5

    global_form.get_by_label("Failure threshold").fill("3")
    editor.get_by_role("button", name="Save thresholds").click()
    expect(editor).to_be_hidden()
    expect(
        page.get_by_role("status").get_by_text("Breaker thresholds saved; every circuit uses them now.")
    ).to_be_visible()
    expect(page.get_by_role("link", name="Configure thresholds")).to_be_focused()
    assert breaker_config_get().failure_threshold == 3
    assert live_engine.config.default.failure_threshold == 3

    # Reopened, the editor shows the saved value, not the earlier error.
    page.get_by_role("link", name="Configure thresholds").click()
    expect(global_form.get_by_label("Failure threshold")).to_have_value("3")
    expect(editor.get_by_role("alert")).to_have_count(0)
    page.keyboard.press("Escape")
    expect(editor).to_be_hidden()

    # The audit log has both changes, newest first.
    page.get_by_role("link", name="Audit Log").click()
    expect(page.get_by_role("heading", name="Audit Log")).to_be_visible()
    expect(page.locator("#audit-table .action-tag")).to_have_text(["breaker_config.update", "circuit.reset"])

    assert console_errors == []


def test_override_add_and_delete_in_the_dialog(
    page: Page, live_server, admin_user, health_catalog, live_engine, console_errors
):
    page.set_default_timeout(10_000)
    record(live_engine, "openai", "gpt-4o", [Outcome.of_status(200)])

    log_in(page, live_server, admin_user.username)
    page.get_by_role("link", name="Configure thresholds").click()
    editor = page.locator("#configure-dialog")
    editor.get_by_label("Provider").select_option("openai")
    editor.get_by_label("Model").select_option("gpt-4o")
    editor.locator("#id_override-failure_threshold").fill("3")  # 2 would ask "Save anyway" first
    editor.get_by_role("button", name="Save override").click()

    # The dialog stays open with the override listed; the table marks the circuit on its next refresh.
    expect(editor.locator("#override-list li")).to_have_count(1)
    expect(editor.locator("#override-list li")).to_contain_text("openai / gpt-4o")
    expect(editor).to_be_visible()
    expect(row(page, "openai", "gpt-4o").locator(".tag")).to_have_text("override")

    # Delete asks first: the first click only unfolds the button that names the override.
    editor.locator("#override-list summary").click()
    editor.get_by_role("button", name="Delete override openai / gpt-4o", exact=True).click()
    expect(editor.get_by_text("No overrides: every circuit uses the global thresholds.")).to_be_visible()
    expect(editor).to_be_visible()
    expect(row(page, "openai", "gpt-4o").locator(".tag")).to_have_count(0)

    assert console_errors == []


def test_an_error_in_one_form_keeps_what_is_typed_in_the_other(
    page: Page, live_server, admin_user, health_catalog, live_engine, console_errors
):
    page.set_default_timeout(10_000)
    log_in(page, live_server, admin_user.username)
    page.get_by_role("link", name="Configure thresholds").click()
    editor = page.locator("#configure-dialog")

    # A draft override, then a global value that is refused: the draft stays.
    editor.get_by_label("Provider").select_option("openai")
    editor.get_by_label("Model").select_option("gpt-4o")
    editor.locator("#id_override-failure_threshold").fill("7")
    editor.locator("#id_failure_threshold").fill("abc")
    editor.get_by_role("button", name="Save thresholds").click()
    expect(editor.locator("#config-error-summary")).to_be_focused()
    expect(editor.get_by_label("Provider")).to_have_value("openai")
    expect(editor.get_by_label("Model")).to_have_value("gpt-4o")
    expect(editor.locator("#id_override-failure_threshold")).to_have_value("7")

    # Now a refused override: the global form keeps its input and its error, and the keyboard goes to the
    # override's summary.
    editor.locator("#id_override-window_seconds").fill("0")
    editor.get_by_role("button", name="Save override").click()
    expect(editor.locator("#override-error-summary")).to_be_focused()
    expect(editor.locator("#id_failure_threshold")).to_have_value("abc")
    expect(editor.locator("#config-error-summary")).to_be_visible()
    expect(editor.locator("#id_override-failure_threshold")).to_have_value("7")
    assert not BreakerOverride.objects.exists()
    assert breaker_config_get().failure_threshold == 5

    assert console_errors == []
