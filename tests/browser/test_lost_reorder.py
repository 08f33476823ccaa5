"""No edit made in the chain editor is lost to a slow refresh, whatever the timing.

Changing an entry's model posts a refresh (cost hints, warnings, the timeline) that replaces the form when
it answers. Here the first refresh is held by route interception until the test has reordered, removed or
dragged an entry, so its answer arrives after that edit, as it would on a console with a slow round trip.
The saved order is read back through the API, and the Resilience knobs (hx-preserve, no refresh of their
own) must survive too."""

import pytest
from playwright.sync_api import Page, Route, expect

from chains.models import FallbackChain
from tests.browser.test_chains_flow import drag, settled
from tests.browser.test_resilience_browser import log_in
from tests.factories import ChainFactory, LlmModelFactory, ProviderFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


@pytest.fixture
def three_entry_chain(transactional_db) -> FallbackChain:
    openai = ProviderFactory(name="openai")
    anthropic = ProviderFactory(name="anthropic")
    source = LlmModelFactory(name="gpt-4o", provider=openai, capabilities=["text"])
    mini = LlmModelFactory(name="gpt-4o-mini", provider=openai, capabilities=["text"])
    haiku = LlmModelFactory(name="claude-haiku", provider=anthropic, capabilities=["text"])
    opus = LlmModelFactory(name="claude-opus", provider=anthropic, capabilities=["text"])
    LlmModelFactory(name="claude-sonnet", provider=anthropic, capabilities=["text"])
    chain: FallbackChain = ChainFactory(name="slow refresh", source_model=source, entries=[mini, haiku, opus])
    return chain


class HeldRefresh:
    """Holds the first refresh POST of the editor until release(): its answer comes after the next edit."""

    def __init__(self) -> None:
        self.route: Route | None = None
        self.seen = 0

    def handle(self, route: Route) -> None:
        request = route.request
        if request.method == "POST" and "op=refresh" in (request.post_data or ""):
            self.seen += 1
            if self.route is None:
                self.route = route
                return
        route.continue_()

    def release(self) -> None:
        assert self.route is not None, "the select change sent no refresh"
        self.route.continue_()


def not_busy(page: Page) -> None:
    """Every refresh answered and swapped (the editor marks itself aria-busy while one is pending)."""
    settled(page)
    page.wait_for_function("() => !document.querySelector('#chain-form[aria-busy=true]')")
    settled(page)


def saved_models(page: Page, live_server, chain: FallbackChain) -> tuple[list[str], dict]:
    response = page.request.get(f"{live_server.url}/api/chains/{chain.pk}/")
    assert response.status == 200
    body = response.json()
    return [e["model"] for e in body["entries"]], body["resilience"]


def edit_with_a_slow_refresh(page: Page, live_server, admin_user, chain: FallbackChain) -> HeldRefresh:
    page.set_default_timeout(10_000)
    log_in(page, live_server, admin_user.username)
    page.goto(f"{live_server.url}/fallback/chains/{chain.pk}/edit/")
    expect(page.locator("#entry-list > li")).to_have_count(3)
    # A knob typed first: it has no refresh of its own and must be kept by every answer.
    page.get_by_label("Request deadline").fill("30")
    page.locator("#entry-list").scroll_into_view_if_needed()
    held = HeldRefresh()
    page.route("**/fallback/chains/*/edit/", held.handle)
    page.locator("#id_entries-0-model").select_option("claude-sonnet")
    page.wait_for_function("() => document.querySelector('.htmx-request, #chain-form[aria-busy=true]')")
    return held


def finish(page: Page, held: HeldRefresh) -> None:
    held.release()
    not_busy(page)
    expect(page.get_by_label("Request deadline")).to_have_value("30")
    page.get_by_role("button", name="Save changes").click()
    expect(page.get_by_text("Chain “slow refresh” saved.")).to_be_visible()


def test_a_move_right_after_a_select_change_is_kept(page: Page, live_server, admin_user, three_entry_chain):
    held = edit_with_a_slow_refresh(page, live_server, admin_user, three_entry_chain)
    page.get_by_role("button", name="Move entry 3 up").click()
    expect(page.locator("#id_entries-1-model")).to_have_value("claude-opus")
    finish(page, held)
    models, resilience = saved_models(page, live_server, three_entry_chain)
    assert models == ["claude-sonnet", "claude-opus", "claude-haiku"]
    assert resilience["deadline_seconds"] == 30.0


def test_a_remove_right_after_a_select_change_is_kept(page: Page, live_server, admin_user, three_entry_chain):
    held = edit_with_a_slow_refresh(page, live_server, admin_user, three_entry_chain)
    page.get_by_role("button", name="Remove entry 2").click()
    expect(page.locator("#entry-list > li")).to_have_count(2)
    finish(page, held)
    models, resilience = saved_models(page, live_server, three_entry_chain)
    assert models == ["claude-sonnet", "claude-opus"]
    assert resilience["deadline_seconds"] == 30.0


def test_a_drag_right_after_a_select_change_is_kept(page: Page, live_server, admin_user, three_entry_chain):
    held = edit_with_a_slow_refresh(page, live_server, admin_user, three_entry_chain)
    rows = page.locator("#entry-list > li")
    drag(page, rows.nth(2).locator(".drag-handle"), rows.nth(0))
    expect(page.locator("#id_entries-0-model")).to_have_value("claude-opus")
    finish(page, held)
    models, resilience = saved_models(page, live_server, three_entry_chain)
    assert models == ["claude-opus", "claude-sonnet", "claude-haiku"]
    assert resilience["deadline_seconds"] == 30.0


def test_two_select_changes_during_a_slow_refresh_are_both_kept(page: Page, live_server, admin_user, three_entry_chain):
    held = edit_with_a_slow_refresh(page, live_server, admin_user, three_entry_chain)
    page.locator("#id_entries-2-model").select_option("gpt-4o-mini")
    page.get_by_role("button", name="Move entry 3 up").click()
    finish(page, held)
    models, resilience = saved_models(page, live_server, three_entry_chain)
    assert models == ["claude-sonnet", "gpt-4o-mini", "claude-haiku"]
    assert resilience["deadline_seconds"] == 30.0
