"""State in the URL (search, sort, tabs survive reload and Back) and keyboard reordering in the editor."""

import pytest
from playwright.sync_api import Page, expect

from chains.models import FallbackChain
from tests.conftest import PASSWORD
from tests.factories import ChainFactory, LlmModelFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def login(page: Page, base: str, username: str) -> None:
    page.goto(f"{base}/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()


def test_search_sort_and_tabs_live_in_the_url(page: Page, live_server, admin_user, console_errors):
    page.set_default_timeout(10_000)
    for name in ("bravo payments", "alpha payments", "charlie search"):
        ChainFactory(name=name)
    login(page, live_server.url, admin_user.username)
    # Admins land on the Dashboard; the Fallback link opens the chains list.
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Fallback").click()
    names = page.locator("#chain-table tbody tr td:first-child a")
    expect(names).to_have_text(["charlie search", "alpha payments", "bravo payments"])

    page.get_by_label("Search", exact=True).fill("payments")
    expect(page).to_have_url(f"{live_server.url}/fallback/chains/?q=payments")
    expect(names).to_have_text(["alpha payments", "bravo payments"])

    page.get_by_role("link", name="Name").click()
    expect(page).to_have_url(f"{live_server.url}/fallback/chains/?q=payments&sort=name")
    expect(names).to_have_text(["alpha payments", "bravo payments"])
    page.get_by_role("link", name="Name").click()  # the arrow is aria-hidden; th carries aria-sort
    expect(page).to_have_url(f"{live_server.url}/fallback/chains/?q=payments&sort=-name")
    expect(names).to_have_text(["bravo payments", "alpha payments"])

    page.reload()
    expect(names).to_have_text(["bravo payments", "alpha payments"])
    expect(page.get_by_label("Search", exact=True)).to_have_value("payments")

    page.go_back()
    expect(page).to_have_url(f"{live_server.url}/fallback/chains/?q=payments&sort=name")
    expect(names).to_have_text(["alpha payments", "bravo payments"])

    page.get_by_role("link", name="Provider Health").click()
    expect(page).to_have_url(f"{live_server.url}/fallback/health/")
    expect(page.get_by_text("No circuits tracked yet")).to_be_visible()
    expect(page.get_by_role("link", name="Provider Health")).to_have_attribute("aria-current", "page")
    page.go_back()
    expect(page).to_have_url(f"{live_server.url}/fallback/chains/?q=payments&sort=name")
    expect(names).to_have_text(["alpha payments", "bravo payments"])

    assert console_errors == []


def test_entries_reorder_with_keyboard_buttons(page: Page, live_server, admin_user, console_errors):
    page.set_default_timeout(10_000)
    a, b, c = (LlmModelFactory(name=n) for n in ("model-a", "model-b", "model-c"))
    chain = ChainFactory(name="keyboard", source_model=LlmModelFactory(name="source"), entries=[a, b, c])
    login(page, live_server.url, admin_user.username)

    page.goto(f"{live_server.url}/fallback/chains/{chain.pk}/edit/")
    move_up = page.get_by_role("button", name="Move entry 3 up")
    form = page.locator("#chain-form")
    move_up.focus()
    page.keyboard.press("Enter")
    # The moved entry is now second, and the keyboard stays on its "up" button, also once the refresh the move
    # asked for has replaced the form (the form is aria-busy until then).
    expect(page.locator("#id_entries-1-model")).to_have_value("model-c")
    expect(form).not_to_have_attribute("aria-busy", "true")
    expect(page.get_by_role("button", name="Move entry 2 up")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("#id_entries-0-model")).to_have_value("model-c")
    expect(form).not_to_have_attribute("aria-busy", "true")
    # At the top "up" is disabled, so focus moves to the same row's "down" button.
    expect(page.get_by_role("button", name="Move entry 1 up")).to_be_disabled()
    expect(page.get_by_role("button", name="Move entry 1 down")).to_be_focused()
    # A click whose press and release straddle a swap reaches neither button (a user would click again): the
    # form has settled above, so this one cannot.
    page.get_by_role("button", name="Remove entry 3").click()
    expect(page.locator("#entry-list > li")).to_have_count(2)
    page.get_by_role("button", name="Save changes").click()

    expect(page.get_by_text("Chain “keyboard” saved.")).to_be_visible()
    chain = FallbackChain.objects.get(pk=chain.pk)
    assert [e.model.name for e in chain.entries.all()] == ["model-c", "model-a"]
    assert console_errors == []
