"""Issue 14 in headless Chromium: the Fallback Chains notice on how a chain picks an entry (dismissed per user,
remembered after a reload and for a new session) and sortable headers that look sortable (link-coloured and
underlined, a muted ↕ always on inactive columns, ▲/▼ on the active one, aria-sort kept). Screenshots at 1280x800
and 390x844, light and dark, go to
$SCREENSHOT_DIR (default /tmp/shots)."""

import os
from pathlib import Path

import pytest
from django.contrib.auth.models import Group
from playwright.sync_api import Browser, Locator, Page, expect

from access.models import DismissedNotice
from tests.conftest import PASSWORD
from tests.factories import ChainFactory, LlmModelFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

SHOTS = Path(os.environ.get("SCREENSHOT_DIR", "/tmp/shots"))
VIEWPORTS = {"1280x800": {"width": 1280, "height": 800}, "390x844": {"width": 390, "height": 844}}


@pytest.fixture
def listed_chains(transactional_db):
    alpha, beta, gamma = (LlmModelFactory(name=n) for n in ("alpha", "beta", "gamma"))
    ChainFactory(name="c-one", entries=[gamma, alpha])
    ChainFactory(name="c-two", entries=[alpha, beta], enabled=False)
    ChainFactory(name="c-three", entries=[beta, gamma])


@pytest.fixture
def second_admin(transactional_db, django_user_model):
    user = django_user_model.objects.create_user(username="bob", password=PASSWORD)
    user.groups.add(Group.objects.get_or_create(name="admin")[0])
    return user


def log_in(page: Page, live_server, username: str) -> None:
    page.goto(f"{live_server.url}/login/?next=/fallback/chains/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Fallback", exact=True)).to_be_visible()


def shoot(page: Page, name: str) -> None:
    """The page at both sizes in both themes."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    for size, viewport in VIEWPORTS.items():
        page.set_viewport_size(viewport)
        for theme in ("light", "dark"):
            page.emulate_media(color_scheme=theme)
            page.screenshot(path=str(SHOTS / f"{name}-{size}-{theme}.png"), caret="initial")
    page.set_viewport_size(VIEWPORTS["1280x800"])
    page.emulate_media(color_scheme="light")


def icon_opacity(link: Locator) -> str:
    return link.locator("span[aria-hidden='true']").evaluate("(el) => getComputedStyle(el).opacity")


def tab_to(page: Page, link: Locator) -> None:
    """Reach `link` with the keyboard only (so :focus-visible applies, as for a keyboard user)."""
    target = link.element_handle()
    page.locator("body").focus()
    for _ in range(60):
        page.keyboard.press("Tab")
        if page.evaluate("(el) => document.activeElement === el", target):
            return
    raise AssertionError("the sort link is not reachable with Tab")


def test_selection_notice_is_dismissed_per_user_and_remembered(
    page: Page, browser: Browser, live_server, admin_user, second_admin, listed_chains, console_errors
):
    page.set_default_timeout(10_000)
    page.set_viewport_size(VIEWPORTS["1280x800"])
    log_in(page, live_server, admin_user.username)

    notice = page.get_by_role("region", name="How a chain picks an entry")
    expect(notice).to_be_visible()
    expect(notice).to_contain_text("First healthy entry wins.")
    expect(notice).to_contain_text("No round-robin, no weighting.")
    expect(notice).to_contain_text("“optimistic primary”")
    expect(notice.get_by_role("link", name="Resilience defaults")).to_have_attribute(
        "href", "/fallback/chains/resilience/"
    )
    expect(page.locator("tbody tr").first.locator(".pill")).to_have_text("Enabled")
    expect(page.locator("tbody .pill-disabled")).to_have_text("Disabled")
    shoot(page, "fallback-notice")

    # The inline toggle names the status in the same words.
    row = page.locator("tbody tr", has_text="c-one")
    row.get_by_role("button", name="Disable chain c-one (now Enabled)").click()
    expect(row.locator(".pill")).to_have_text("Disabled")
    expect(row.get_by_role("button", name="Enable chain c-one (now Disabled)")).to_be_visible()

    url_before = page.url
    notice.get_by_role("button", name="Dismiss").click()
    expect(notice).to_have_count(0)  # htmx removed it in place: no reload, same address
    assert page.url == url_before
    assert DismissedNotice.objects.filter(user=admin_user).count() == 1

    page.reload()
    expect(page.get_by_role("heading", name="Fallback", exact=True)).to_be_visible()
    expect(page.locator("#selection-notice")).to_have_count(0)
    shoot(page, "fallback-notice-dismissed")

    # Another admin, in a browser of their own, still sees it.
    other_context = browser.new_context()
    try:
        other = other_context.new_page()
        other.set_default_timeout(10_000)
        log_in(other, live_server, second_admin.username)
        expect(other.get_by_role("region", name="How a chain picks an entry")).to_be_visible()
    finally:
        other_context.close()

    # The first admin on a new device (a fresh session): still gone.
    fresh_context = browser.new_context()
    try:
        fresh = fresh_context.new_page()
        fresh.set_default_timeout(10_000)
        log_in(fresh, live_server, admin_user.username)
        expect(fresh.locator("#selection-notice")).to_have_count(0)
    finally:
        fresh_context.close()

    assert console_errors == []


def test_sortable_headers_look_like_links_and_always_show_an_icon_and_the_active_direction(
    page: Page, live_server, admin_user, listed_chains, console_errors
):
    page.set_default_timeout(10_000)
    page.set_viewport_size(VIEWPORTS["1280x800"])
    log_in(page, live_server, admin_user.username)
    page.get_by_role("region", name="How a chain picks an entry").get_by_role("button", name="Dismiss").click()
    expect(page.locator("#selection-notice")).to_have_count(0)

    headers = page.locator("#chain-table thead th")
    links = page.locator("#chain-table thead th a.sort-link")
    expect(links).to_have_text(["Name ↕", "Source model ↕", "Chain ↕", "Scope ↕", "Status ↕"])
    chain = links.nth(2)
    name = links.nth(0)
    # At rest, without hover or focus: every sortable header is visibly a link and shows its ↕.
    assert icon_opacity(chain) == "1" and icon_opacity(name) == "1"
    look = chain.evaluate(
        "(a) => ({link: getComputedStyle(a).color, th: getComputedStyle(a.closest('th')).color,"
        " line: getComputedStyle(a).textDecorationLine})"
    )
    assert look["link"] != look["th"] and look["line"] == "underline"
    expect(page.locator("#chain-order")).to_have_text("Sorted by: newest first (a column heading sorts by that column)")

    tab_to(page, name)
    assert icon_opacity(name) == "1"
    shoot(page, "fallback-sort-focus")

    # Sort by Chain: the first entry's model decides (alpha, beta, gamma).
    chain.click()
    expect(page).to_have_url(f"{live_server.url}/fallback/chains/?sort=chain")
    names = page.locator("#chain-table tbody td[data-label='Name']")
    expect(names).to_have_text(["c-two", "c-three", "c-one"])
    active = headers.nth(2)
    expect(active).to_have_attribute("aria-sort", "ascending")
    expect(page.locator("#chain-table thead th[aria-sort]")).to_have_count(1)
    expect(links.nth(2)).to_have_text("Chain ▲")
    page.mouse.move(0, 0)
    assert icon_opacity(links.nth(2)) == "1"  # the active one shows its direction without hover
    shoot(page, "fallback-sort-active")

    links.nth(2).click()
    expect(page).to_have_url(f"{live_server.url}/fallback/chains/?sort=-chain")
    expect(names).to_have_text(["c-one", "c-three", "c-two"])
    expect(headers.nth(2)).to_have_attribute("aria-sort", "descending")
    expect(links.nth(2)).to_have_text("Chain ▼")

    assert console_errors == []
