"""Request Logs in headless Chromium, fed by real traffic through the gateway with its primary failing.

The gateway runs on a real socket against the simulator and writes its log rows through the embedded
writer into the test database; the console is Django's live server. Screenshots of the list and the
drawer land in screenshots/ (git-ignored) at 1280×800 and 390×844.
"""

import os
import re
from pathlib import Path

import httpx
import pytest
from django.contrib.auth.models import Group
from playwright.sync_api import Page, expect

from health.breaker.types import State
from requestlogs import views as log_views
from requestlogs.models import RequestLog
from tests.conftest import PASSWORD
from tests.factories.keys import make_key
from tests.factories.requestlogs import fallback, insert_logs, log_record
from tests.gateway.conftest import gateway, sim, world  # noqa: F401 - the gateway test fixtures
from tests.requestlogs.test_attempt_reasons import RESILIENT_ATTEMPTS

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

SHOTS = Path(__file__).resolve().parents[2] / "screenshots"
BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}


def send(gw, w, n: int) -> list[httpx.Response]:
    url = f"{gw.url}/v1/chat/completions"
    return [httpx.post(url, json=BODY, headers=gw.headers(w.secret), timeout=10) for _ in range(n)]


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(exist_ok=True)
    # The drawer slides in: take the picture once its animation has finished.
    page.evaluate("Promise.all(document.getAnimations().map((a) => a.finished))")
    # caret="initial": Playwright's caret hiding injects a <style> the strict CSP refuses (a console error).
    page.screenshot(path=str(SHOTS / f"{name}.png"), caret="initial")


def log_in(page: Page, live_server, username: str) -> None:
    page.goto(f"{live_server.url}/logs/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Request Logs", level=1)).to_be_visible()


@pytest.fixture
def traffic(gateway, world):  # noqa: F811 - pytest fixtures by name
    """Two healthy requests, three failures that open openai's circuit, four served by the chain."""
    healthy = send(gateway, world, 2)
    world.sim.behaviours["openai"] = world.sim.behaviour("openai").updated({"mode": "status", "status": 503})
    failed = send(gateway, world, 3)
    assert gateway.app.engine.get("openai", "gpt-4o").state is State.OPEN
    rescued = send(gateway, world, 4)
    assert [r.status_code for r in healthy + failed + rescued] == [200] * 2 + [503] * 3 + [200] * 4
    assert {r.headers["x-vidai-fallback-from"] for r in rescued} == {"openai"}
    assert gateway.sink.flush(timeout=10)
    assert RequestLog.objects.count() == 9
    return gateway, world, rescued


def test_fallback_requests_through_the_list_and_the_drawer(
    page: Page, live_server, traffic, console_errors, monkeypatch
):
    gw, w, rescued = traffic
    # The key's owner signs in as an admin.
    w.user.set_password(PASSWORD)
    w.user.save()
    w.user.groups.add(Group.objects.get_or_create(name="admin")[0])
    page.set_default_timeout(10_000)
    monkeypatch.setattr(log_views, "FOLLOW_SECONDS", 1)
    page.set_viewport_size({"width": 1280, "height": 800})
    log_in(page, live_server, w.user.username)
    rows = page.locator("#log-table tbody tr")
    expect(rows).to_have_count(9)
    expect(page.locator(".log-meta")).to_contain_text("9 requests in the last 24 h")

    # Fallback = yes: the four requests the chain served, newest first, each naming its step and origin.
    page.get_by_label("Fallback", exact=True).select_option("yes")
    expect(page).to_have_url(re.compile(r"/logs/\?fallback=yes$"))
    expect(rows).to_have_count(4)
    expect(page.locator("#log-table .badge-fallback")).to_have_text(["chain step 1 · from openai"] * 4)
    expect(rows.locator("td[data-label='Served by']")).to_have_text(["claude via backup"] * 4)
    shot(page, "request-logs-list-1280x800")

    # A click on the row (not on its link) opens the drawer with the request's own URL.
    newest = rescued[-1].headers["x-vidai-request-id"]
    rows.first.locator("td[data-label='Latency']").click()
    drawer = page.locator("#log-drawer")
    expect(drawer).to_be_visible()
    expect(page).to_have_url(re.compile(rf"/logs/{newest}/$"))
    expect(drawer.get_by_role("heading", level=2)).to_contain_text(newest)
    fallback = drawer.locator("section[aria-labelledby='log-detail-fallback']")
    expect(fallback).to_contain_text(re.compile(r"Step that served\s*1\s"))
    expect(fallback).to_contain_text(re.compile(r"From provider\s*openai\s"))
    expect(fallback.get_by_role("link", name="gpt-4o chain")).to_be_visible()
    attempts = drawer.locator(".timeline li")
    expect(attempts).to_have_count(1)
    expect(attempts.first).to_contain_text("claude via backup")
    expect(attempts.first).to_contain_text("200")
    expect(attempts.first.locator(".pill")).to_have_text("served")
    # Focus is inside the drawer, and Tab keeps it there (a modal dialog).
    assert page.evaluate("document.getElementById('log-drawer').contains(document.activeElement)")
    shot(page, "request-logs-drawer-1280x800")

    # Escape closes it: back on the filtered list, focus on the row that opened it.
    page.keyboard.press("Escape")
    expect(drawer).to_be_hidden()
    expect(page).to_have_url(re.compile(r"/logs/\?fallback=yes$"))
    expect(page.get_by_label("Fallback", exact=True)).to_have_value("yes")
    expect(page.locator(f"#log-link-{newest}")).to_be_focused()
    expect(rows).to_have_count(4)

    # The browser's Back and Forward close and reopen it the same way.
    page.locator(f"#log-link-{newest}").click()
    expect(drawer).to_be_visible()
    page.go_back()
    expect(drawer).to_be_hidden()
    expect(page).to_have_url(re.compile(r"/logs/\?fallback=yes$"))
    expect(page.locator(f"#log-link-{newest}")).to_be_focused()
    page.go_forward()
    expect(drawer).to_be_visible()
    expect(page).to_have_url(re.compile(rf"/logs/{newest}/$"))
    page.keyboard.press("Escape")
    expect(drawer).to_be_hidden()
    expect(page).to_have_url(re.compile(r"/logs/\?fallback=yes$"))
    expect(page.locator(f"#log-link-{newest}")).to_be_focused()

    # Follow: a new rescued request appears at the top without a reload.
    page.get_by_label("Follow new requests").check()
    expect(page).to_have_url(re.compile(r"/logs/\?fallback=yes&follow=1$"))
    later = send(gw, w, 1)[0]
    assert gw.sink.flush(timeout=10)
    expect(rows).to_have_count(5)
    expect(rows.first).to_have_id(f"log-row-{later.headers['x-vidai-request-id']}")

    # A phone: the filters fold away, rows become cards, the drawer covers the screen.
    page.get_by_label("Follow new requests").uncheck()
    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    expect(page.locator("details.filter-panel")).not_to_have_attribute("open", "")
    expect(rows).to_have_count(5)
    shot(page, "request-logs-list-390x844")
    rows.first.locator("td[data-label='Status']").click()
    expect(drawer).to_be_visible()
    box = drawer.bounding_box()
    assert box is not None and round(box["width"]) == 390  # the whole width of the phone
    shot(page, "request-logs-drawer-390x844")
    drawer.get_by_role("button", name="Close details").click()
    expect(drawer).to_be_hidden()

    assert console_errors == []


def test_drawer_explains_a_retried_moved_on_and_continued_request(page: Page, live_server, admin_user, console_errors):
    """Issue 10: each attempt says why it ended and what followed; shots in light and dark ($SCREENSHOT_DIR)."""
    key = make_key(user=admin_user, name="alice ops").key
    log = insert_logs(
        log_record(
            key=key, **fallback(step=2), stream=True, tokens_in=2440, tokens_out=345, attempts=RESILIENT_ATTEMPTS
        )
    )[0]
    page.set_default_timeout(10_000)
    page.set_viewport_size({"width": 1280, "height": 800})
    log_in(page, live_server, admin_user.username)
    page.locator(f"#log-row-{log.request_id} td[data-label='Latency']").click()
    drawer = page.locator("#log-drawer")
    expect(drawer).to_be_visible()
    attempts = drawer.locator(".timeline li")
    expect(attempts).to_have_count(5)
    expect(attempts.nth(0).locator(".attempt-outcome")).to_have_text(
        re.compile(r"429 · rate limit · Retry-After 1 s\s*→")
    )
    expect(attempts.nth(0).locator(".attempt-next")).to_contain_text("retried")
    expect(attempts.nth(1).locator(".attempt-next")).to_contain_text("moved on to the next entry")
    expect(attempts.nth(3).locator(".attempt-next")).to_contain_text("continued on claude")
    expect(attempts.nth(4).locator(".attempt-continuation")).to_have_text("continuation")
    expect(drawer.locator(".attempt-note")).to_contain_text("Continued stream")
    # The attempts at the top of the drawer's scroll area, so the picture shows all five.
    drawer.locator("#log-detail-attempts").evaluate("(h) => h.scrollIntoView({block: 'start'})")
    shots = Path(os.environ.get("SCREENSHOT_DIR", "/tmp/shots"))
    shots.mkdir(parents=True, exist_ok=True)
    for theme in ("light", "dark"):
        page.emulate_media(color_scheme=theme)
        page.evaluate("Promise.all(document.getAnimations().map((a) => a.finished))")
        page.screenshot(path=str(shots / f"request-log-attempt-reasons-1280x800-{theme}.png"), caret="initial")
    assert console_errors == []
