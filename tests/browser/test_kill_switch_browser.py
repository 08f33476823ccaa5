"""The kill switch in headless Chromium: Force open… with a validation error that keeps what was typed, the
held row, the engine refusing the circuit, then Release…; both actions in the audit log."""

import re

import pytest
from playwright.sync_api import Page, expect

from audit.models import AuditEvent
from health.breaker import Outcome
from health.models import CircuitControl, CircuitEvent
from health.selectors import circuit_anchor
from tests.browser.test_health_browser import log_in, record
from tests.servers import until

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def test_force_open_then_release_through_the_console(
    page: Page, live_server, admin_user, health_catalog, live_engine, console_errors
):
    page.set_default_timeout(10_000)
    record(live_engine, "openai", "gpt-4o", [Outcome.of_status(200)] * 3)
    log_in(page, live_server, admin_user.username)
    row = page.locator(f"#circuit-row-{circuit_anchor('openai', 'gpt-4o')}")
    expect(row.locator(".pill").first).to_have_text("Closed")

    opener = page.get_by_role("link", name="Force open openai / gpt-4o")
    opener.click()
    dialog = page.locator("#hold-dialog")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_role("heading")).to_contain_text("openai / gpt-4o")
    # No reason: the dialog stays open with the error, and the chosen expiry is kept.
    dialog.get_by_label("15 min").check()
    dialog.get_by_role("button", name="Force open openai / gpt-4o").click()
    expect(dialog.get_by_role("alert")).to_contain_text("nothing was changed")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_label("15 min")).to_be_checked()
    assert not CircuitControl.objects.exists()

    dialog.get_by_label(re.compile("^Reason")).fill("INC-142 provider migration")
    dialog.get_by_role("button", name="Force open openai / gpt-4o").click()
    expect(dialog).to_be_hidden()
    expect(row.locator(".ph-pill-held")).to_have_text("Forced open")
    expect(row).to_contain_text("INC-142 provider migration")
    hold = CircuitControl.objects.get()
    assert (hold.kind, hold.provider, hold.model, hold.created_by) == ("forced_open", "openai", "gpt-4o", "alice")
    assert hold.expires_at is not None
    until(lambda: not live_engine.allow("openai", "gpt-4o").allowed, 5, "the engine to refuse the forced-open circuit")

    page.get_by_role("link", name="Release openai / gpt-4o").click()
    expect(dialog).to_be_visible()
    dialog.get_by_role("button", name="Release openai / gpt-4o").click()
    expect(dialog).to_be_hidden()
    expect(row.locator(".ph-pill-held")).to_have_count(0)
    expect(page.get_by_role("link", name="Force open openai / gpt-4o")).to_be_visible()
    assert not CircuitControl.objects.exists()
    until(lambda: live_engine.allow("openai", "gpt-4o").allowed, 5, "the engine to allow the released circuit")

    actions = list(AuditEvent.objects.order_by("id").values_list("action", flat=True))
    assert actions[-2:] == ["circuit.force_open", "circuit.release"]
    events = list(CircuitEvent.objects.order_by("id").values_list("kind", "actor", "reason"))
    assert [e[:2] for e in events] == [("forced_open", "alice"), ("released", "alice")]
    assert events[0][2] == "INC-142 provider migration"
    assert console_errors == []
