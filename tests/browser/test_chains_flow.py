"""The whole Fallback Chains flow in headless Chromium: login, wizard, drag reorder, toggle, delete, audit."""

import re

import pytest
from playwright.sync_api import Page, expect

from chains.models import FallbackChain
from tests.conftest import PASSWORD
from tests.factories import LlmModelFactory, ProviderFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


@pytest.fixture
def chain_flow_catalog(transactional_db):
    openai = ProviderFactory(name="openai")
    anthropic = ProviderFactory(name="anthropic")
    LlmModelFactory(
        name="gpt-4o",
        provider=openai,
        capabilities=["text", "vision"],
        input_price_per_mtok=5,
        output_price_per_mtok=15,
    )
    LlmModelFactory(
        name="gpt-4o-mini",
        provider=openai,
        capabilities=["text", "vision"],
        input_price_per_mtok=1,
        output_price_per_mtok=3,
    )
    LlmModelFactory(
        name="claude-haiku",
        provider=anthropic,
        capabilities=["text", "vision"],
        input_price_per_mtok=1,
        output_price_per_mtok=1,
    )
    LlmModelFactory(
        name="claude-opus",
        provider=anthropic,
        capabilities=["text", "vision"],
        input_price_per_mtok=15,
        output_price_per_mtok=45,
    )


def drag(page: Page, handle, target) -> None:
    """Drag with real mouse events (SortableJS runs in fallback mode, driven by pointer moves)."""
    start = handle.bounding_box()
    end = target.bounding_box()
    page.mouse.move(start["x"] + start["width"] / 2, start["y"] + start["height"] / 2)
    page.mouse.down()
    # Past the top edge of the target row, in small steps so Sortable sees the movement.
    page.mouse.move(start["x"] + start["width"] / 2, end["y"] + 4, steps=20)
    page.mouse.move(start["x"] + start["width"] / 2, end["y"] + 2, steps=5)
    page.mouse.up()


def entry_models(page: Page):
    return page.locator("#entry-list select[name$='-model']")


def settled(page: Page) -> None:
    """Wait until htmx has swapped and settled the last answer: a change fired on content it has not yet
    processed would send no request (a person cannot select that fast; a test can)."""
    page.wait_for_function("() => !document.querySelector('.htmx-request, .htmx-swapping, .htmx-settling')")


def test_chain_lifecycle_through_the_console(page: Page, live_server, admin_user, chain_flow_catalog, console_errors):
    page.set_default_timeout(10_000)

    # Log in through the form; admins land on the Fallback Chains tab.
    page.goto(f"{live_server.url}/fallback/chains/")
    expect(page).to_have_url(re.compile(r"/login/\?next=/fallback/chains/"))
    page.get_by_label("Username").fill(admin_user.username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Fallback")).to_be_visible()
    expect(page.get_by_text("No chains yet")).to_be_visible()

    # The wizard: name, source, three entries.
    page.get_by_role("link", name="Add Chain").first.click()
    expect(page.get_by_role("heading", name="Add Chain")).to_be_visible()
    page.get_by_label("Name").fill("gpt-4o safety net")
    page.get_by_label("Source model").select_option("gpt-4o")
    expect(page.get_by_text("Capabilities: text, vision")).to_be_visible()
    settled(page)
    hints = page.locator("[data-cost-hint]")
    entry_models(page).nth(0).select_option("gpt-4o-mini")
    expect(hints).to_have_count(1)
    for i, model in ((1, "claude-haiku"), (2, "claude-opus")):
        page.get_by_role("button", name="+ Add entry").click()
        expect(entry_models(page)).to_have_count(i + 1)
        settled(page)
        entry_models(page).nth(i).select_option(model)
        expect(hints).to_have_count(i + 1)
    expect(hints).to_have_text(["0.2× source cost", "0.1× source cost", "3× source cost"])
    page.get_by_role("button", name="Create chain").click()

    expect(page.get_by_text("Chain “gpt-4o safety net” created.")).to_be_visible()
    row = page.locator("tr", has_text="gpt-4o safety net")
    expect(row.locator(".chain-cell")).to_have_text("gpt-4o-mini → claude-haiku → claude-opus")

    # Edit: drag the last entry to the top, save.
    row.get_by_role("link", name="Edit").click()
    expect(entry_models(page)).to_have_count(3)
    rows = page.locator("#entry-list > li")
    drag(page, rows.nth(2).locator(".drag-handle"), rows.nth(0))
    expect(page.locator("#id_entries-0-model")).to_have_value("claude-opus")
    expect(page.locator("#id_entries-1-model")).to_have_value("gpt-4o-mini")
    expect(page.locator("#id_entries-2-model")).to_have_value("claude-haiku")
    page.get_by_role("button", name="Save changes").click()

    expect(page.get_by_text("Chain “gpt-4o safety net” saved.")).to_be_visible()
    expect(row.locator(".chain-cell")).to_have_text("claude-opus → gpt-4o-mini → claude-haiku")
    chain = FallbackChain.objects.get(name="gpt-4o safety net")
    assert [e.model.name for e in chain.entries.all()] == ["claude-opus", "gpt-4o-mini", "claude-haiku"]

    # Toggle inline: the row is swapped in place and a toast confirms.
    row.get_by_role("button", name="Disable chain gpt-4o safety net").click()
    expect(row.locator(".pill")).to_have_text("Disabled")
    expect(page.get_by_role("status").get_by_text("Chain “gpt-4o safety net” disabled.")).to_be_visible()
    expect(row.get_by_role("button", name="Enable chain gpt-4o safety net")).to_be_visible()

    # Delete through the confirm dialog; Escape first proves it cancels and returns focus.
    delete_link = row.get_by_role("link", name="Delete chain gpt-4o safety net")
    delete_link.click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(delete_link).to_be_focused()
    delete_link.click()
    dialog.get_by_role("button", name="Delete chain gpt-4o safety net").click()
    expect(page.get_by_text("No chains yet")).to_be_visible()
    expect(page.get_by_role("status").get_by_text("Chain “gpt-4o safety net” deleted.")).to_be_visible()

    # The audit log shows the four events, newest first.
    page.get_by_role("link", name="Audit Log").click()
    expect(page.get_by_role("heading", name="Audit Log")).to_be_visible()
    expect(page.locator("#audit-table .action-tag")).to_have_text(
        ["chain.delete", "chain.disable", "chain.update", "chain.create"]
    )
    page.get_by_label("Action").select_option("chain.update")
    expect(page).to_have_url(f"{live_server.url}/audit/?action=chain.update")
    expect(page.locator("#audit-table .action-tag")).to_have_text(["chain.update"])

    assert console_errors == []
