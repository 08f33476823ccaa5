"""Issue 14, accessibility: every console page passes axe-core (0 serious or critical violations) in light and
dark themes, and keyboard-only use reaches the main actions with a visible focus indicator.

The data is realistic: three providers, chains whose entries raise the editor's warnings, an open circuit, a
firing alert (its banner is on every admin page), request logs with a fallback, audit events written by the
services. axe is vendored (tests/browser/vendor) and runs in the page; see tests/browser/axe.py.
"""

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone
from playwright.sync_api import Page, expect

from alerts.selectors import alert_banner_forget
from alerts.services import RuleInput, alert_open, alert_rule_create
from chains.models import FallbackChain
from chains.services import ChainInput, EntryInput, chain_create
from health import views as health_views
from health.breaker import ManualClock, MemoryEngine, Outcome, use_engine
from health.selectors import circuit_anchor
from tests.browser.axe import AxeAudit, install_axe
from tests.conftest import PASSWORD
from tests.factories import LlmModelFactory, ProviderFactory, RoutingRuleFactory
from tests.factories.keys import make_key
from tests.factories.requestlogs import fallback, insert_logs, log_record

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


@pytest.fixture
def console_data(transactional_db: None, admin_user: Any) -> dict[str, Any]:
    """A small but complete console: what each page shows when it is in use, not its empty state."""
    openai = ProviderFactory(name="openai")
    anthropic = ProviderFactory(name="anthropic", protocol="anthropic")
    mistral = ProviderFactory(name="mistral")
    caps = ["text", "vision", "tools"]
    LlmModelFactory(name="gpt-4o", provider=openai, capabilities=caps)
    LlmModelFactory(name="gpt-4o-mini", provider=openai, capabilities=caps)
    LlmModelFactory(name="claude-haiku", provider=anthropic, capabilities=["text"], context_window=200000)
    LlmModelFactory(name="mistral-small", provider=mistral, capabilities=["text"], context_window=32000)
    # The editor warns about a routing rule that rewrites the source away (and the entries' gaps).
    RoutingRuleFactory(name="cheap gpt", source_model=LlmModelFactory(name="gpt-4o-mini"))
    chain = chain_create(
        actor=admin_user,
        data=ChainInput(
            name="GPT-4o safety net",
            source_model="gpt-4o",
            entries=[EntryInput("claude-haiku"), EntryInput("mistral-small")],
        ),
    )
    chain_create(
        actor=admin_user,
        data=ChainInput(
            name="Haiku backup", source_model="claude-haiku", entries=[EntryInput("gpt-4o-mini")], enabled=False
        ),
    )
    rule = alert_rule_create(actor=admin_user, data=RuleInput(name="Circuit open over 5 min", kind="circuit_open"))
    with transaction.atomic():
        alert = alert_open(
            rule=rule, subject="openai/gpt-4o", figures={"open_minutes": 6}, summary="Open 6 min.", now=timezone.now()
        )
    alert_banner_forget()
    key = make_key(user=admin_user, name="ops key").key
    logs = insert_logs(
        log_record(key=key),
        log_record(key=key, **fallback(served_provider="anthropic", served_model="claude-haiku")),
        log_record(key=key, status=504, error_kind="timeout"),
    )
    return {"chain": chain, "alert": alert, "log": logs[1]}


@pytest.fixture
def live_engine(monkeypatch: pytest.MonkeyPatch) -> Iterator[MemoryEngine]:
    """One open circuit and one healthy; the table's poll is slowed so axe reads a DOM that is not swapped."""
    engine = MemoryEngine(clock=ManualClock(round(time.time(), 3)))
    monkeypatch.setattr(health_views, "POLL_SECONDS", 3600)
    with use_engine(engine):
        for provider, model, status, n in (("openai", "gpt-4o", 503, 10), ("anthropic", "claude-haiku", 200, 3)):
            for _ in range(n):
                engine.record(engine.allow(provider, model), Outcome.of_status(status))
        yield engine


def log_in(page: Page, base: str, username: str) -> None:
    page.goto(f"{base}/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()


def settled(page: Page) -> None:
    """htmx has swapped and settled its last answer."""
    page.wait_for_function("() => !document.querySelector('.htmx-request, .htmx-swapping, .htmx-settling')")


def visit(page: Page, audit: AxeAudit, url: str, label: str, heading: str | re.Pattern[str]) -> None:
    page.goto(url)
    expect(page.get_by_role("heading", name=heading, level=1)).to_be_visible()
    audit.check(page, label)


def _chains_pages(page: Page, base: str, audit: AxeAudit, chain: FallbackChain) -> None:
    visit(page, audit, f"{base}/fallback/chains/", "Fallback Chains list", "Fallback")
    page.get_by_role("link", name=f"Delete chain {chain.name}").click()
    expect(page.get_by_role("dialog")).to_be_visible()
    audit.check(page, "Fallback Chains delete dialog")
    page.keyboard.press("Escape")
    # The editor in its modal over the list (Add Chain, and a chain's Edit).
    page.get_by_role("link", name="Add Chain").first.click()
    expect(page.locator("#chain-modal").get_by_role("heading", name="Add Chain")).to_be_visible()
    settled(page)
    audit.check(page, "Chain editor (modal, create)")
    page.keyboard.press("Escape")
    expect(page.locator("#chain-modal")).to_be_hidden()
    # Closing the modal goes Back to the list's entry; a navigation started before that lands is aborted by it.
    expect(page).to_have_url(f"{base}/fallback/chains/")

    # Create: a source and an entry with a smaller context window; the refresh shows the warnings.
    visit(page, audit, f"{base}/fallback/chains/new/", "Chain editor (create)", "Add Chain")
    page.get_by_label("Name").fill("Mini net")
    page.get_by_label("Source model").select_option("gpt-4o")
    settled(page)
    page.locator("#entry-list select[name$='-model']").first.select_option("mistral-small")
    expect(page.locator("#chain-warnings")).to_be_visible()
    settled(page)
    audit.check(page, "Chain editor (create, warnings)")
    # Submitted without a name: the error state.
    page.get_by_label("Name").fill("")
    page.get_by_role("button", name="Create chain").click()
    expect(page.locator(".error, [role='alert']").first).to_be_visible()
    audit.check(page, "Chain editor (create, errors)")

    page.goto(f"{base}/fallback/chains/{chain.pk}/edit/")
    expect(page.locator("#chain-warnings")).to_be_visible()
    audit.check(page, "Chain editor (edit, warnings)")
    visit(page, audit, f"{base}/fallback/chains/resilience/", "Resilience defaults", re.compile("Resilience"))


def _health_pages(page: Page, base: str, audit: AxeAudit) -> None:
    visit(page, audit, f"{base}/fallback/health/", "Provider Health", "Fallback")
    gpt = "openai / gpt-4o"

    page.get_by_role("link", name=f"Reset {gpt}").click()
    expect(page.locator("#reset-dialog")).to_be_visible()
    audit.check(page, "Provider Health · Reset dialog")
    page.keyboard.press("Escape")

    page.get_by_role("link", name="Configure thresholds").click()
    editor = page.locator("#configure-dialog")
    expect(editor.locator("#config-form")).to_be_visible()
    settled(page)
    audit.check(page, "Provider Health · Configure thresholds dialog")
    editor.locator("#config-form").get_by_label("Failure threshold").fill("0")
    editor.get_by_role("button", name="Save thresholds").click()
    expect(editor.get_by_role("alert")).to_be_visible()
    audit.check(page, "Provider Health · Configure thresholds (errors)")
    # A value that would open the breaker on a handful of requests: the warning and its "Save anyway".
    editor.locator("#config-form").get_by_label("Failure threshold").fill("1")
    editor.get_by_role("button", name="Save thresholds").click()
    expect(editor.get_by_text("Save anyway")).to_be_visible()
    audit.check(page, "Provider Health · Configure thresholds (warning)")
    page.keyboard.press("Escape")

    page.get_by_role("link", name=f"Force open {gpt}").click()
    hold = page.locator("#hold-dialog")
    expect(hold.get_by_role("heading")).to_contain_text(gpt)
    settled(page)
    audit.check(page, "Provider Health · Force open dialog")
    hold.get_by_role("button", name=f"Force open {gpt}").click()
    expect(hold.get_by_role("alert")).to_contain_text("nothing was changed")
    audit.check(page, "Provider Health · Force open (errors)")
    page.keyboard.press("Escape")

    page.get_by_role("link", name="Drain provider openai").first.click()
    expect(hold.get_by_role("heading")).to_contain_text("openai")
    settled(page)
    audit.check(page, "Provider Health · Drain dialog")
    page.keyboard.press("Escape")

    events = page.locator(f"#events-{circuit_anchor('openai', 'gpt-4o')}")
    events.locator("summary").click()
    settled(page)
    audit.check(page, "Provider Health · Events (expanded)")
    page.goto(f"{base}/fallback/health/events/?provider=openai&model=gpt-4o")
    audit.check(page, "Provider Health · Events page")


def _other_pages(page: Page, base: str, audit: AxeAudit, data: dict[str, Any]) -> None:
    visit(page, audit, f"{base}/", "Dashboard", "Dashboard")
    visit(page, audit, f"{base}/audit/", "Audit Log", "Audit Log")
    chain = data["chain"]
    page.goto(f"{base}/audit/?object_type=chain&object_id={chain.pk}")
    expect(page.locator("#audit-table")).to_be_visible()
    audit.check(page, "Audit Log (one object's events)")

    log = data["log"]
    visit(page, audit, f"{base}/logs/", "Request Logs", "Request Logs")
    page.locator(f"#log-row-{log.request_id} td[data-label='Latency']").click()
    expect(page.locator("#log-drawer")).to_be_visible()
    settled(page)
    audit.check(page, "Request Logs · drawer")
    page.goto(f"{base}/logs/{log.request_id}/")
    audit.check(page, "Request Log detail page")

    visit(page, audit, f"{base}/alerts/", "Alerts", "Alerts")
    page.goto(f"{base}/alerts/{data['alert'].pk}/")
    audit.check(page, "Alert detail")
    page.goto(f"{base}/alerts/rules/new/")
    audit.check(page, "Alert rule editor")
    page.get_by_role("button", name="Create rule").click()
    expect(page.locator(".error, [role='alert']").first).to_be_visible()
    audit.check(page, "Alert rule editor (errors)")

    page.goto(f"{base}/no-such-page/")
    audit.check(page, "404 page")


def test_every_console_page_passes_axe_in_both_themes(
    page: Page, live_server: Any, admin_user: Any, bi_user: Any, console_data: dict[str, Any], live_engine: MemoryEngine
) -> None:
    page.set_default_timeout(10_000)
    install_axe(page.context)
    audit = AxeAudit()
    base = live_server.url

    page.goto(f"{base}/login/")
    audit.check(page, "Login")
    page.get_by_label("Username").fill(admin_user.username)
    page.get_by_label("Password").fill("not the password")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_be_visible()
    audit.check(page, "Login (error)")

    log_in(page, base, admin_user.username)
    _chains_pages(page, base, audit, console_data["chain"])
    _health_pages(page, base, audit)
    _other_pages(page, base, audit, console_data)

    # A read-only role: its Dashboard, and the 403 page of an admin-only page.
    page.get_by_role("button", name="Sign out").click()
    log_in(page, base, bi_user.username)
    visit(page, audit, f"{base}/", "Dashboard (bi_read_only)", "Dashboard")
    response = page.goto(f"{base}/alerts/")
    assert response is not None and response.status == 403
    audit.check(page, "403 page")

    assert len(audit.checked) >= 2 * 30, audit.checked
    assert audit.problems == [], audit.report()


# Focus is visible when focusing the element (or, for a control drawn inside its label, that label) adds an
# outline or changes its box shadow, the two ways the stylesheet marks :focus-visible. Compared with the same
# element blurred, so a shadow that is always there does not count; focus is put back before the next Tab.
_FOCUS_STATE = """() => {
  const el = document.activeElement;
  if (!el || el === document.body) return null;
  const look = (node) => {
    const s = getComputedStyle(node);
    const outline = s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) > 0;
    return {outline: outline ? `${s.outlineStyle} ${s.outlineWidth} ${s.outlineColor}` : '', shadow: s.boxShadow};
  };
  const label = el.closest('label');
  const focused = [look(el), label ? look(label) : null];
  el.blur();
  const blurred = [look(el), label ? look(label) : null];
  el.focus();
  const marks = (f, b) => f !== null && ((f.outline !== '' && f.outline !== b.outline) || f.shadow !== b.shadow);
  const field = ['INPUT', 'SELECT', 'TEXTAREA'].includes(el.tagName);
  const name = ((field ? el.name : el.getAttribute('aria-label') || el.innerText) || el.id || el.tagName).trim();
  return {
    name: name.slice(0, 60), tag: el.tagName, id: el.id,
    visible: marks(focused[0], blurred[0]) || marks(focused[1], blurred[1]),
  };
}"""


def tab_through(page: Page, limit: int = 250) -> list[dict[str, Any]]:
    """Press Tab from the top of the page until focus comes back round (or leaves the page): what was focused."""
    page.locator("body").focus()
    page.evaluate("() => document.activeElement && document.activeElement.blur()")
    seen: list[dict[str, Any]] = []
    first: str | None = None
    for _ in range(limit):
        page.keyboard.press("Tab")
        state = page.evaluate(_FOCUS_STATE)
        if state is None:
            break
        marker = page.evaluate("() => { const e = document.activeElement; return e.outerHTML.slice(0, 200); }")
        if marker == first:
            break
        first = first or marker
        seen.append(state)
    return seen


def names(stops: list[dict[str, Any]]) -> list[str]:
    return [s["name"] for s in stops]


def assert_focus_visible(stops: list[dict[str, Any]]) -> None:
    hidden = [f"{s['tag']}#{s['id']} “{s['name']}”" for s in stops if not s["visible"]]
    assert hidden == [], f"focused without a visible indicator: {hidden}"


def test_keyboard_reaches_the_chain_actions_with_visible_focus(
    page: Page, live_server: Any, admin_user: Any, console_data: dict[str, Any]
) -> None:
    page.set_default_timeout(10_000)
    base = live_server.url
    log_in(page, base, admin_user.username)
    chain = console_data["chain"]

    page.goto(f"{base}/fallback/chains/")
    expect(page.get_by_role("heading", name="Fallback", level=1)).to_be_visible()
    stops = tab_through(page)
    assert stops[0]["name"] == "Skip to content"
    reached = names(stops)
    for action in (
        "Add Chain",
        f"Disable chain {chain.name}",
        f"Delete chain {chain.name}",
        "Enable chain Haiku backup",
        "Provider Health",
        "Audit Log",
        "Sign out",
    ):
        assert any(action in name for name in reached), f"{action!r} not reachable by Tab: {reached}"
    assert any(name.startswith("Edit") for name in reached), reached
    assert_focus_visible(stops)

    # Enter on the focused Add Chain opens the editor; Tab reaches every control and the submit.
    page.get_by_role("link", name="Add Chain").first.focus()
    page.keyboard.press("Enter")
    expect(page.locator("#chain-modal").get_by_role("heading", name="Add Chain")).to_be_visible()  # the modal
    opened = page.evaluate(_FOCUS_STATE)  # the modal puts focus on its first field
    stops = tab_through(page)
    reached = [opened["name"], *names(stops)] if opened else names(stops)
    for control in ("name", "source_model", "+ Add entry", "Create chain"):
        assert any(control in name for name in reached), f"{control!r} not reachable by Tab: {reached}"
    assert_focus_visible(stops)

    page.goto(f"{base}/fallback/chains/{chain.pk}/edit/")
    expect(page.locator("#chain-warnings")).to_be_visible()
    stops = tab_through(page)
    reached = names(stops)
    for control in ("Save changes", "+ Add entry"):
        assert any(control in name for name in reached), f"{control!r} not reachable by Tab: {reached}"
    # Each entry can be moved and removed from the keyboard (the drag handle has button alternatives).
    assert sum("Move" in name or "↑" in name or "↓" in name for name in reached) >= 2, reached
    assert any("Remove" in name for name in reached), reached
    assert_focus_visible(stops)
