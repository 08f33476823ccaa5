"""Editing in place on Fallback Chains: the editor opens in a modal over the list with its own URL (linkable,
Back closes it), saves over HTMX and refreshes the list's table; validation errors stay in the modal; a
direct visit to the editor's URL still gets the full page. Screenshots of the modal (1280×800 and 390×844,
light and dark) go to $SCREENSHOT_DIR (default /tmp/shots)."""

import os
import re
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from chains.models import FallbackChain
from tests.browser.test_chains_flow import entry_models, settled
from tests.browser.test_resilience_browser import log_in
from tests.factories import ChainFactory, LlmModelFactory, ProviderFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

SHOTS = Path(os.environ.get("SCREENSHOT_DIR", "/tmp/shots"))
SIZES = {"desktop": (1280, 800), "phone": (390, 844)}


@pytest.fixture
def a_chain(transactional_db) -> FallbackChain:
    openai = ProviderFactory(name="openai")
    anthropic = ProviderFactory(name="anthropic")
    source = LlmModelFactory(name="gpt-4o", provider=openai, capabilities=["text"])
    mini = LlmModelFactory(name="gpt-4o-mini", provider=openai, capabilities=["text"])
    LlmModelFactory(name="claude-haiku", provider=anthropic, capabilities=["text"])
    chain: FallbackChain = ChainFactory(name="gpt-4o net", source_model=source, entries=[mini])
    return chain


def test_edit_a_chain_in_a_modal_over_the_list(page: Page, live_server, admin_user, a_chain, console_errors):
    page.set_default_timeout(10_000)
    log_in(page, live_server, admin_user.username)
    list_url = f"{live_server.url}/fallback/chains/"
    modal = page.locator("#chain-modal")

    # A click on the row (not on a control) opens the editor over the list, under its own URL.
    page.locator(f"#chain-row-{a_chain.pk} td[data-label='Source model']").click()
    expect(modal).to_be_visible()
    expect(modal.get_by_role("heading", name="Edit chain “gpt-4o net”")).to_be_visible()
    expect(page).to_have_url(f"{live_server.url}/fallback/chains/{a_chain.pk}/edit/")
    expect(page.get_by_role("heading", name="Fallback", exact=True)).to_be_attached()  # the list is still there
    expect(modal.get_by_label("Name")).to_be_focused()

    # Back closes it and focus returns to the row.
    page.go_back()
    expect(modal).to_be_hidden()
    expect(page).to_have_url(list_url)
    edit_link = page.get_by_role("link", name="Edit chain gpt-4o net")
    expect(edit_link).to_be_focused()

    # Edit from the Edit link: a select change, an entry added, save; the modal closes and the table follows.
    edit_link.click()
    expect(page).to_have_url(f"{live_server.url}/fallback/chains/{a_chain.pk}/edit/")
    modal.get_by_label("Name").fill("gpt-4o safety net")
    modal.get_by_role("button", name="+ Add entry").click()
    expect(entry_models(page)).to_have_count(2)
    settled(page)
    entry_models(page).nth(1).select_option("claude-haiku")
    expect(modal.locator("[data-cost-hint]")).to_have_count(2)
    settled(page)
    modal.get_by_role("button", name="Save changes").click()
    expect(modal).to_be_hidden()
    expect(page).to_have_url(list_url)
    expect(page.get_by_role("status").get_by_text("Chain “gpt-4o safety net” saved.")).to_be_visible()
    row = page.locator(f"#chain-row-{a_chain.pk}")
    expect(row.locator(".chain-cell")).to_have_text("gpt-4o-mini → claude-haiku")
    expect(row.get_by_role("link", name="Edit chain gpt-4o safety net")).to_be_focused()
    a_chain.refresh_from_db()
    assert a_chain.name == "gpt-4o safety net"
    assert [e.model.name for e in a_chain.entries.all()] == ["gpt-4o-mini", "claude-haiku"]

    # Escape closes it as well, and goes back to the list's address.
    row.get_by_role("link", name="gpt-4o safety net", exact=True).click()
    expect(modal).to_be_visible()
    page.keyboard.press("Escape")
    expect(modal).to_be_hidden()
    expect(page).to_have_url(list_url)

    assert console_errors == []


def test_add_chain_in_the_modal_with_a_validation_error(page: Page, live_server, admin_user, a_chain, console_errors):
    page.set_default_timeout(10_000)
    log_in(page, live_server, admin_user.username)
    modal = page.locator("#chain-modal")
    page.get_by_role("link", name="Add Chain").first.click()
    expect(modal.get_by_role("heading", name="Add Chain")).to_be_visible()
    expect(page).to_have_url(f"{live_server.url}/fallback/chains/new/")

    # No name, no source: the errors show in the modal, nothing is saved.
    modal.get_by_role("button", name="Create chain").click()
    expect(modal.locator("#error-summary")).to_be_visible()
    expect(modal.locator("#id_name-error")).to_be_visible()
    expect(modal.locator("#error-summary")).to_be_focused()
    expect(modal).to_be_visible()
    expect(page).to_have_url(f"{live_server.url}/fallback/chains/new/")
    assert FallbackChain.objects.count() == 1

    modal.get_by_label("Name").fill("claude net")
    modal.get_by_label("Source model").select_option("claude-haiku")
    settled(page)
    entry_models(page).nth(0).select_option("gpt-4o-mini")
    expect(modal.locator("[data-cost-hint]")).to_have_count(1)
    settled(page)
    page.evaluate("() => document.activeElement && document.activeElement.blur()")
    for theme in ("light", "dark"):
        page.emulate_media(color_scheme=theme)
        for size, (width, height) in SIZES.items():
            page.set_viewport_size({"width": width, "height": height})
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOTS / f"chain-modal-{size}-{theme}.png"), caret="initial")
    page.emulate_media(color_scheme="light")
    page.set_viewport_size({"width": 1280, "height": 800})

    modal.get_by_role("button", name="Create chain").click()
    expect(modal).to_be_hidden()
    expect(page.get_by_role("status").get_by_text("Chain “claude net” created.")).to_be_visible()
    expect(page.locator("tr", has_text="claude net").locator(".chain-cell")).to_have_text("gpt-4o-mini")
    assert FallbackChain.objects.filter(name="claude net").exists()
    assert console_errors == []


def test_a_direct_visit_to_the_edit_url_gets_the_full_page(page: Page, live_server, admin_user, a_chain):
    page.set_default_timeout(10_000)
    log_in(page, live_server, admin_user.username)
    page.goto(f"{live_server.url}/fallback/chains/{a_chain.pk}/edit/")
    expect(page.get_by_role("heading", name="Edit chain “gpt-4o net”", level=1)).to_be_visible()
    expect(page.locator("#chain-modal")).to_have_count(0)
    page.get_by_role("button", name="Save changes").click()
    expect(page).to_have_url(re.compile(r"/fallback/chains/$"))
    expect(page.get_by_text("Chain “gpt-4o net” saved.")).to_be_visible()
