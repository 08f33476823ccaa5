"""The chain editor's Resilience step in headless Chromium: turn the policy on, set knobs, watch the timeline
preview follow through the HTMX refresh without losing what was typed, save, and read it back from the API;
then the global defaults page. Screenshots of the form (1280×800 and 390×844, light and dark) go to
$SCREENSHOT_DIR (default /tmp/shots)."""

import os
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from audit.models import AuditEvent
from chains.models import FallbackChain, ResilienceDefaults
from tests.browser.test_chains_flow import entry_models, settled
from tests.conftest import PASSWORD
from tests.factories import LlmModelFactory, ProviderFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

SHOTS = Path(os.environ.get("SCREENSHOT_DIR", "/tmp/shots"))
SIZES = {"desktop": (1280, 800), "phone": (390, 844)}


@pytest.fixture
def resilience_catalog(transactional_db):
    openai = ProviderFactory(name="openai")
    anthropic = ProviderFactory(name="anthropic")
    LlmModelFactory(name="gpt-4o", provider=openai, capabilities=["text", "vision"])
    LlmModelFactory(name="gpt-4o-mini", provider=openai, capabilities=["text"])
    LlmModelFactory(name="claude-haiku", provider=anthropic, capabilities=["text", "assistant_prefill"])


def shoot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True, caret="initial")


def log_in(page: Page, live_server, username: str) -> None:
    page.goto(f"{live_server.url}/fallback/chains/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Fallback")).to_be_visible()


def test_create_a_chain_with_the_policy_on_through_the_console(
    page: Page, live_server, admin_user, resilience_catalog, console_errors
):
    page.set_default_timeout(10_000)
    log_in(page, live_server, admin_user.username)
    page.get_by_role("link", name="Add Chain").first.click()
    page.get_by_label("Name").fill("gpt-4o resilient")
    page.get_by_label("Source model").select_option("gpt-4o")
    settled(page)
    entry_models(page).nth(0).select_option("gpt-4o-mini")
    settled(page)
    page.get_by_role("button", name="+ Add entry").click()
    expect(entry_models(page)).to_have_count(2)
    settled(page)
    entry_models(page).nth(1).select_option("claude-haiku")
    settled(page)

    preview = page.locator("#resilience-timeline")
    expect(preview).to_contain_text("the client gets the 503: nothing is retried")

    # On: the preview now retries and moves down the chain.
    page.get_by_label("Enable resilience policy").check()
    expect(preview).to_contain_text("retry gpt-4o once")
    expect(preview).to_contain_text("move to gpt-4o-mini (entry 1) → 503")
    expect(preview).to_contain_text("continues on claude-haiku (entry 2)")

    retries = page.get_by_label("Retries per target")
    expect(retries).to_have_attribute("placeholder", "1")
    retries.fill("2")
    page.get_by_label("Most calls per request").fill("5")
    page.get_by_role("button", name="Update preview").click()
    expect(preview).to_contain_text("retry gpt-4o (2 of 2;")
    expect(preview).to_contain_text("stop: 5 calls made, the attempt cap")
    settled(page)
    # Knobs typed before another field's refresh are kept by it, and the preview follows them.
    page.get_by_label("Request deadline").fill("30")
    page.get_by_label("Backoff base").fill("100")
    entry_models(page).nth(1).select_option("gpt-4o")
    expect(preview).to_contain_text("gives up at 30 s")
    expect(preview).to_contain_text("≤ 0.1 s later retry gpt-4o (1 of 2;")
    expect(preview).to_contain_text("ends with an error event: no entry's model supports assistant prefill")
    settled(page)
    entry_models(page).nth(1).select_option("claude-haiku")
    expect(preview).to_contain_text("continues on claude-haiku (entry 2)")
    expect(page.get_by_label("Request deadline")).to_have_value("30")
    expect(page.get_by_label("Backoff base")).to_have_value("100")
    expect(page.get_by_label("Retries per target")).to_have_value("2")
    expect(page.get_by_label("Name")).to_have_value("gpt-4o resilient")
    expect(page.get_by_label("Enable resilience policy")).to_be_checked()
    settled(page)

    page.evaluate("() => document.activeElement && document.activeElement.blur()")
    for theme in ("light", "dark"):
        page.emulate_media(color_scheme=theme)
        for size, (width, height) in SIZES.items():
            page.set_viewport_size({"width": width, "height": height})
            shoot(page, f"resilience-form-{size}-{theme}")
            page.locator("#resilience").screenshot(path=str(SHOTS / f"resilience-step-{size}-{theme}.png"))
    page.emulate_media(color_scheme="light")
    page.set_viewport_size({"width": 1280, "height": 800})

    # Out of range: the message is next to the knob, nothing is saved, and every field is kept.
    page.get_by_label("Most calls per request").fill("50")
    page.get_by_role("button", name="Create chain").click()
    expect(page.locator("#id_resilience-max_attempts-error")).to_have_text("Must be between 1 and 20 (got 50).")
    expect(page.locator("#error-summary")).to_contain_text("Must be between 1 and 20 (got 50).")
    expect(page.get_by_label("Request deadline")).to_have_value("30")
    expect(page.get_by_label("Enable resilience policy")).to_be_checked()
    assert not FallbackChain.objects.exists()
    page.locator("#resilience").screenshot(path=str(SHOTS / "resilience-step-error-desktop-light.png"))
    page.get_by_label("Most calls per request").fill("5")

    page.get_by_role("button", name="Create chain").click()
    expect(page.get_by_text("Chain “gpt-4o resilient” created.")).to_be_visible()
    shoot(page, "resilience-list-desktop-light")

    chain = FallbackChain.objects.get(name="gpt-4o resilient")
    response = page.request.get(f"{live_server.url}/api/chains/{chain.pk}/")
    assert response.status == 200
    assert response.json()["resilience"] == {
        "enabled": True,
        "max_retries": 2,
        "backoff_base_ms": 100,
        "max_attempts": 5,
        "deadline_seconds": 30.0,
    }
    assert list(AuditEvent.objects.values_list("action", flat=True)) == ["chain.create"]

    # The edit page shows the knobs again.
    page.locator("tr", has_text="gpt-4o resilient").get_by_role("link", name="Edit").click()
    expect(page.get_by_label("Retries per target")).to_have_value("2")
    expect(page.get_by_label("Request deadline")).to_have_value("30")
    expect(page.get_by_label("Connect timeout")).to_have_value("")

    # The global defaults, linked from the list.
    page.get_by_role("link", name="← Fallback Chains").click()
    page.get_by_role("link", name="Resilience defaults").first.click()
    expect(page.get_by_role("heading", name="Resilience defaults")).to_be_visible()
    page.get_by_label("Connect timeout").fill("2.5")
    page.evaluate("() => document.activeElement && document.activeElement.blur()")
    for theme in ("light", "dark"):
        page.emulate_media(color_scheme=theme)
        for size, (width, height) in SIZES.items():
            page.set_viewport_size({"width": width, "height": height})
            shoot(page, f"resilience-defaults-{size}-{theme}")
    page.get_by_role("button", name="Save defaults").click()
    expect(page.get_by_text("Default resilience policy saved.")).to_be_visible()
    expect(page.get_by_label("Connect timeout")).to_have_value("2.5")
    row = ResilienceDefaults.objects.get()
    assert (row.policy, row.version) == ({"connect_timeout_seconds": 2.5}, 2)
    defaults = page.request.get(f"{live_server.url}/api/resilience/defaults/").json()
    assert defaults["set"] == {"connect_timeout_seconds": 2.5}

    assert console_errors == []
