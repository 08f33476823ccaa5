"""Issue 12's end-to-end check: real traffic through a live gateway (an outage of the primary, fallback, recovery),
then the Dashboard shows the fallback period and Provider Health shows the open period in the circuit's strip.

The gateway, the console's live server and this test share one in-memory breaker (as in embedded mode), whose
clock the test moves past the cooldown instead of waiting. Screenshots go to $SCREENSHOT_DIR (default
/tmp/shots) for a person to look at.
"""

import os
import re
import time
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from gateway.app import GatewayApp
from gateway.config import ConfigHolder
from gateway.logsink import LogSink
from health.breaker import ManualClock, State, build_engine, use_engine
from health.breaker.types import ConfigSet
from health.events import circuit_events_flush_local
from health.models import CircuitEvent
from health.selectors import circuit_anchor
from requestlogs.models import RequestLog
from tests.conftest import PASSWORD
from tests.gateway.conftest import TEST_BREAKER, sim, world  # noqa: F401 - fixtures
from tests.servers import serve

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

SHOTS = Path(os.environ.get("SCREENSHOT_DIR", "/tmp/shots"))
BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Summarise the incident in one line."}]}
SIZES = {"desktop": (1280, 800), "phone": (390, 844)}


@pytest.fixture
def outage_and_recovery(world):  # noqa: F811 - the fixture imported above
    """Healthy traffic, openai answering 503 until its circuit opens and the chain serves, then recovery."""
    # The breaker's clock starts a few minutes back so the whole incident lies in the past of the wall clock.
    clock = ManualClock(round(time.time() - 300, 3))
    engine = build_engine(clock=clock, config=ConfigSet(default=TEST_BREAKER))
    sink = LogSink(flush_seconds=0.05)
    app = GatewayApp(config=ConfigHolder(), engine=engine, sink=sink)
    headers = {"authorization": f"Bearer {world.secret}"}
    with use_engine(engine), serve(app, lifespan=True) as url, httpx.Client(base_url=url, timeout=10) as client:

        def send(n: int) -> list[httpx.Response]:
            return [client.post("/v1/chat/completions", json=BODY, headers=headers) for _ in range(n)]

        assert {r.headers.get("x-vidai-fallback") for r in send(10)} == {None}
        world.sim.behaviours["openai"] = world.sim.behaviour("openai").updated({"mode": "status", "status": 503})
        assert [r.status_code for r in send(3)] == [503, 503, 503]
        assert engine.get("openai", "gpt-4o").state is State.OPEN
        clock.advance(5)
        during = send(20)
        assert {(r.status_code, r.headers.get("x-vidai-fallback")) for r in during} == {(200, "true")}
        world.sim.behaviours.pop("openai")
        clock.advance(TEST_BREAKER.initial_cooldown_seconds)  # the cooldown is over: the next call probes
        after = send(10)
        assert {r.headers.get("x-vidai-fallback") for r in after} == {None}
        assert engine.get("openai", "gpt-4o").state is State.CLOSED
        assert sink.flush()
        circuit_events_flush_local(engine)
        yield engine


def log_in(page: Page, live_server, username: str) -> None:
    page.goto(f"{live_server.url}/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Dashboard", level=1)).to_be_visible()


def shoot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True, caret="initial")


def test_dashboard_and_provider_health_show_the_outage(
    page: Page, live_server, admin_user, outage_and_recovery, console_errors
):
    page.set_default_timeout(10_000)
    # What the gateway wrote: 43 requests, 20 of them served by chain step 1; opened, half-open, closed.
    assert RequestLog.objects.count() == 43
    assert RequestLog.objects.filter(fallback_triggered=True, chain_step=1).count() == 20
    kinds = list(
        CircuitEvent.objects.filter(provider="openai", model="gpt-4o").order_by("at", "id").values_list("kind")
    )
    assert kinds == [("opened",), ("half_open",), ("closed",)]

    log_in(page, live_server, admin_user.username)
    for theme in ("light", "dark"):
        page.emulate_media(color_scheme=theme)
        for size, (width, height) in SIZES.items():
            page.set_viewport_size({"width": width, "height": height})

            page.goto(f"{live_server.url}/?range=1h")
            requests_panel = page.locator("#dash-requests")
            # The fallback period: bars of chain-step-1 traffic beside the primary's, and the legend names them.
            expect(requests_panel.locator("rect.dash-bar.dash-c-step1").first).to_be_attached()
            expect(requests_panel.locator("rect.dash-bar.dash-c-primary").first).to_be_attached()
            expect(requests_panel.locator(".dash-legend")).to_contain_text("Chain step 1")
            expect(page.locator("#dash-fallback")).to_contain_text("gpt-4o")
            circuits = page.locator("#dash-circuits")
            expect(circuits.locator("title", has_text=re.compile(r"openai / gpt-4o: Open \d\d:\d\d"))).to_have_count(
                2  # the chart is drawn wide and narrow; CSS shows one
            )
            expect(page.locator(".dash-counters")).to_contain_text(re.compile(r"20\s*fallbacks in the last hour"))
            shoot(page, f"reliability-dashboard-{size}-{theme}")

            page.goto(f"{live_server.url}/fallback/health/")
            key = circuit_anchor("openai", "gpt-4o")
            expect(page.locator(f"#circuit-row-{key} .pill").first).to_have_text("Closed")
            strip = page.locator(f"svg.ph-strip[data-strip='{key}']")
            # The open period is a segment of the 24-hour strip, with its times in its title.
            open_part = strip.locator("rect.ph-seg-open")
            expect(open_part).to_have_count(1)
            expect(open_part.locator("title")).to_have_text(re.compile(r"^open \d\d:\d\d"))
            shoot(page, f"reliability-health-{size}-{theme}")
    assert console_errors == []
