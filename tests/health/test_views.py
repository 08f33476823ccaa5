"""Provider Health tab: circuit table, polling partial, Reset, threshold editor; roles, CSRF, escaping, queries."""

import html
import json
import re
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from audit.models import AuditEvent
from catalog.models import LlmModel
from health import views as health_views
from health.breaker import BreakerSettings, ConfigSet, ManualClock, MemoryEngine, Outcome, State, use_engine
from health.models import BreakerConfig, BreakerOverride, CircuitControl, CircuitEvent
from health.selectors import breaker_config_get, circuit_anchor
from health.services import circuit_force_open, provider_drain
from tests.factories import ChainFactory

pytestmark = pytest.mark.django_db

T0 = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC
HX = {"HX-Request": "true"}
INDEX_URL = "/fallback/health/"
RESET_URL = "/fallback/health/reset/"
CONFIGURE_URL = "/fallback/health/configure/"
OVERRIDE_URL = "/fallback/health/configure/override/"
OVERRIDE_DELETE_URL = "/fallback/health/configure/override/delete/"


class Frozen:
    """The engine's clock and Django's clock moved together."""

    def __init__(self, clock: ManualClock, traveller) -> None:
        self.clock = clock
        self.traveller = traveller

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.traveller.shift(seconds)


@pytest.fixture
def frozen():
    clock = ManualClock(T0)
    with time_machine.travel(datetime.fromtimestamp(T0, UTC), tick=False) as traveller:
        yield Frozen(clock, traveller)


@pytest.fixture
def frozen_engine(frozen):
    engine = MemoryEngine(clock=frozen.clock)
    with use_engine(engine):
        yield engine


def record(engine, provider: str, model: str, outcomes: list[Outcome]) -> None:
    for outcome in outcomes:
        engine.record(engine.allow(provider, model), outcome)


def open_circuit(engine, provider: str = "openai", model: str = "gpt-4o", status: int = 503) -> None:
    """Ten failures: past the default threshold (5) and minimum requests (10)."""
    record(engine, provider, model, [Outcome.of_status(status)] * 10)


def is_full_page(response) -> bool:
    text = response.content.decode()
    return text.lstrip().startswith("<!doctype html>") and 'class="topbar"' in text


def row_html(response, provider: str = "openai", model: str = "gpt-4o") -> str:
    key = circuit_anchor(provider, model)
    match = re.search(rf'<tr id="circuit-row-{re.escape(key)}".*?</tr>', response.content.decode(), re.S)
    assert match, f"no row for {provider}/{model}"
    return match.group(0)


def cells(row: str) -> dict[str, str]:
    """Visible text of each cell, by its data-label."""
    out = {}
    for label, inner in re.findall(r'<td[^>]*data-label="([^"]+)"[^>]*>(.*?)</td>', row, re.S):
        out[label] = html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", inner))).strip()
    return out


def field_errors(response, field_id: str) -> list[str]:
    found = re.findall(rf'<span class="error" id="{re.escape(field_id)}-error">(.*?)</span>', response.content.decode())
    return [html.unescape(m) for m in found]


def summary(response) -> list[str]:
    return [html.unescape(m) for m in re.findall(r'<li><a href="#[^"]+">(.*?)</a></li>', response.content.decode())]


def triggers(response) -> dict:
    return json.loads(response.get("HX-Trigger", "{}"))


def config_data(**overrides) -> dict[str, str]:
    data = {
        "failure_threshold": "5",
        "window_seconds": "60",
        "minimum_requests": "10",
        "initial_cooldown_seconds": "60",
        "cooldown_cap_seconds": "300",
        "failure_status_codes": "429, 500, 502, 503, 504",
    }
    data.update(overrides)
    return data


# ---------- The table ----------


def test_index_full_page_shows_every_column_of_an_open_circuit(admin_client, frozen_engine):
    open_circuit(frozen_engine)

    response = admin_client.get(INDEX_URL)

    assert response.status_code == 200
    assert is_full_page(response)
    assert cells(row_html(response)) == {
        "Provider": "openai",
        "Model": "gpt-4o",
        "State": "Open server errors · 503",
        "Failure count": "10",
        "Total requests": "10",
        "Cooldown": "in 60 s",
        "Last failure": "just now · 503",
        "Opens": "1",
        "Last hour": "—",
    }
    row = row_html(response)
    assert '<span class="pill pill-open">Open</span>' in row
    assert 'title="Half-open at 2023-11-14 22:14:20 UTC"' in row
    assert 'title="2023-11-14 22:13:20 UTC"' in row


def test_index_closed_circuit_has_no_cooldown_and_green_pill(admin_client, frozen_engine):
    record(frozen_engine, "anthropic", "claude-haiku", [Outcome.of_status(200)] * 7 + [Outcome.timeout()] * 3)

    response = admin_client.get(INDEX_URL)

    row = row_html(response, "anthropic", "claude-haiku")
    assert cells(row) == {
        "Provider": "anthropic",
        "Model": "claude-haiku",
        "State": "Closed",
        "Failure count": "3",
        "Total requests": "10",
        "Cooldown": "—",
        "Last failure": "just now · timeout",
        "Opens": "0",
        "Last hour": "—",
    }
    assert '<span class="pill pill-closed">Closed</span>' in row


def test_index_half_open_after_cooldown_says_a_request_will_probe_it_then_that_one_is(
    admin_client, frozen_engine, frozen
):
    """Probes are made by requests: a chain entry no request reaches stays half-open after an outage, and the row
    says that is all it is waiting for."""
    open_circuit(frozen_engine)
    frozen.advance(61)

    row = row_html(admin_client.get(INDEX_URL))
    probe = frozen_engine.allow("openai", "gpt-4o")
    probing = row_html(admin_client.get(INDEX_URL))

    assert '<span class="pill pill-half-open">HalfOpen</span>' in row
    assert cells(row)["Cooldown"] == "awaiting probe"
    assert "(cooldown ended 2023-11-14 22:14:20 UTC)" in row
    assert cells(row)["Last failure"] == "1 min ago · 503"
    assert probe.probe is True
    assert cells(probing)["Cooldown"] == "probing"


def test_index_lists_circuits_by_provider_then_model(admin_client, frozen_engine):
    for provider, model in [("openai", "gpt-4o"), ("anthropic", "claude-opus"), ("anthropic", "claude-haiku")]:
        record(frozen_engine, provider, model, [Outcome.of_status(200)])

    response = admin_client.get(INDEX_URL)

    keys = re.findall(r'<tr id="circuit-row-([^"]+)"', response.content.decode())
    assert keys == [
        circuit_anchor("anthropic", "claude-haiku"),
        circuit_anchor("anthropic", "claude-opus"),
        circuit_anchor("openai", "gpt-4o"),
    ]


def test_index_empty_state(admin_client, frozen_engine):
    response = admin_client.get(INDEX_URL)

    text = response.content.decode()
    assert "No circuits tracked yet — circuits appear when the gateway sends traffic." in text
    assert "<table" not in text


def test_index_poll_returns_only_the_table(admin_client, frozen_engine):
    open_circuit(frozen_engine)

    response = admin_client.get(INDEX_URL, headers={**HX, "HX-Target": "circuit-table"})

    text = response.content.decode()
    assert response.status_code == 200
    assert text.lstrip().startswith('<div id="circuit-table" hx-get="/fallback/health/" hx-trigger="every 5s"')
    assert "<html" not in text and "<dialog" not in text and 'id="fallback-page"' not in text
    assert cells(row_html(response))["State"] == "Open server errors · 503"
    assert response["Vary"] == "HX-Request, HX-Target, Cookie"


def test_index_tab_switch_returns_the_fallback_page_with_dialogs_outside_the_table(admin_client, frozen_engine):
    open_circuit(frozen_engine)

    response = admin_client.get(INDEX_URL, headers={**HX, "HX-Target": "fallback-page"})

    text = response.content.decode()
    assert text.lstrip().startswith('<div id="fallback-page"')
    assert "<html" not in text
    assert 'aria-current="page">Provider Health</a>' in text
    table_start = text.index('<div id="circuit-table"')
    # The polled region ends before either dialog starts, so a refresh never replaces an open dialog.
    table_html = re.search(r'<div id="circuit-table".*?</table>\s*</div>\s*</div>', text, re.S).group(0)
    assert "<dialog" not in table_html
    assert text.index('<dialog id="reset-dialog"') > table_start + len(table_html)
    assert text.index('<dialog id="configure-dialog"') > table_start + len(table_html)


def test_history_restore_gets_the_full_page(admin_client, frozen_engine):
    response = admin_client.get(INDEX_URL, headers={**HX, "HX-History-Restore-Request": "true"})

    assert is_full_page(response)


def test_countdown_moves_on_each_refresh(admin_client, frozen_engine, frozen):
    open_circuit(frozen_engine)
    poll = {**HX, "HX-Target": "circuit-table"}

    first = cells(row_html(admin_client.get(INDEX_URL, headers=poll)))["Cooldown"]
    frozen.advance(42)
    second = cells(row_html(admin_client.get(INDEX_URL, headers=poll)))["Cooldown"]
    frozen.advance(17)
    third = cells(row_html(admin_client.get(INDEX_URL, headers=poll)))["Cooldown"]

    assert (first, second, third) == ("in 60 s", "in 18 s", "in 1 s")


def test_long_cooldowns_read_in_minutes_and_hours(admin_client, frozen):
    config = ConfigSet(default=BreakerSettings(initial_cooldown_seconds=3 * 3600 + 300, cooldown_cap_seconds=86400))
    engine = MemoryEngine(clock=frozen.clock, config=config)
    with use_engine(engine):
        open_circuit(engine)
        response = admin_client.get(INDEX_URL)

    assert cells(row_html(response))["Cooldown"] == "in 3 h 5 min"
    assert health_views._until(datetime.fromtimestamp(T0 + 252, UTC), datetime.fromtimestamp(T0, UTC)) == (
        "in 4 min 12 s"
    )


def test_poll_interval_comes_from_the_view_constant(admin_client, frozen_engine, monkeypatch):
    monkeypatch.setattr(health_views, "POLL_SECONDS", 1)

    response = admin_client.get(INDEX_URL)

    assert 'hx-trigger="every 1s"' in response.content.decode()
    assert "refreshes every 1 s" in response.content.decode()


def test_summary_line_counts_open_and_half_open(admin_client, frozen_engine, frozen):
    open_circuit(frozen_engine, "openai", "gpt-4o")
    frozen.advance(61)  # gpt-4o is half-open now
    open_circuit(frozen_engine, "openai", "gpt-4o-mini")
    record(frozen_engine, "anthropic", "claude-haiku", [Outcome.of_status(200)])

    response = admin_client.get(INDEX_URL, headers={**HX, "HX-Target": "circuit-table"})

    meta = re.search(r'<p class="table-meta">(.*?)</p>', response.content.decode(), re.S).group(1)
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", meta)).strip()
    assert text == "3 circuits 1 open 1 half-open · Updated 22:14:21 UTC; refreshes every 5 s"


def test_page_uses_no_inline_script_style_or_hx_on(admin_client, frozen_engine):
    open_circuit(frozen_engine)

    text = admin_client.get(INDEX_URL).content.decode()

    assert re.findall(r"<script(?![^>]*\bsrc=)[^>]*>", text) == []
    assert " style=" not in text and "<style" not in text
    assert "hx-on" not in text


def test_names_are_escaped_everywhere(admin_client, frozen_engine, health_catalog):
    evil_provider, evil_model = '<b>prov</b>"', "<script>alert(1)</script>"
    open_circuit(frozen_engine, evil_provider, evil_model)

    full = admin_client.get(INDEX_URL).content.decode()
    confirm = admin_client.get(RESET_URL, {"provider": evil_provider, "model": evil_model}).content.decode()
    reset = admin_client.post(RESET_URL, {"provider": evil_provider, "model": evil_model}, headers=HX)

    for text in (full, confirm, reset.content.decode()):
        assert "<b>prov</b>" not in text and "<script>alert(1)</script>" not in text
    assert "&lt;b&gt;prov&lt;/b&gt;&quot;" in full and "&lt;script&gt;alert(1)&lt;/script&gt;" in full
    assert 'data-reset-provider="&lt;b&gt;prov&lt;/b&gt;&quot;"' in full
    assert "Reset &lt;b&gt;prov&lt;/b&gt;&quot; / &lt;script&gt;alert(1)&lt;/script&gt;" in confirm
    # The toast travels as JSON and is shown with textContent.
    assert triggers(reset)["messages"][0]["message"] == f"Circuit {evil_provider} / {evil_model} reset: Open → Closed."


@pytest.mark.parametrize("circuits", [1, 3])
def test_query_count_does_not_grow_with_circuits(
    admin_client, frozen_engine, health_catalog, django_assert_num_queries, circuits
):
    for i in range(circuits):
        open_circuit(frozen_engine, "openai", f"model-{i}")
    BreakerOverride.objects.create(provider="openai", model="gpt-4o", failure_threshold=3)
    admin_client.get(INDEX_URL)  # warm the session

    # session, user, roles; holds, events (state at the start of the strips, then during them), last-hour
    # figures, chains (sources, entries), providers' protocols (the badges)
    with django_assert_num_queries(10):
        poll = admin_client.get(INDEX_URL, headers={**HX, "HX-Target": "circuit-table"})
    # + config, config and overrides (override list), providers, models; not counting the alerts banner that
    # every console page may show
    with CaptureQueriesContext(connection) as full_queries:
        full = admin_client.get(INDEX_URL)

    assert len([q for q in full_queries.captured_queries if '"alerts_' not in q["sql"]]) == 15
    assert len(re.findall(r'<tr id="circuit-row-', poll.content.decode())) == circuits
    assert len(re.findall(r'<tr id="circuit-row-', full.content.decode())) == circuits


# ---------- Reset ----------


def test_reset_over_htmx_flips_the_row_and_audits(admin_client, frozen_engine):
    open_circuit(frozen_engine)

    response = admin_client.post(RESET_URL, {"provider": "openai", "model": "gpt-4o"}, headers=HX)

    assert response.status_code == 200
    assert response.content.decode().lstrip().startswith('<div id="circuit-table"')
    assert cells(row_html(response))["State"] == "Closed"
    assert (cells(row_html(response))["Failure count"], cells(row_html(response))["Total requests"]) == ("0", "0")
    assert frozen_engine.get("openai", "gpt-4o").state is State.CLOSED
    event = AuditEvent.objects.get()
    assert (event.action, event.object_id, event.actor_name) == ("circuit.reset", "openai/gpt-4o", "alice")
    assert event.before["state"] == "open"
    assert triggers(response) == {
        "messages": [{"message": "Circuit openai / gpt-4o reset: Open → Closed.", "level": "success"}]
    }


def test_reset_without_htmx_redirects_with_a_message(admin_client, frozen_engine):
    open_circuit(frozen_engine)

    response = admin_client.post(RESET_URL, {"provider": "openai", "model": "gpt-4o"})
    page = admin_client.get(response.url)

    assert response.status_code == 302 and response.url == INDEX_URL
    assert "Circuit openai / gpt-4o reset: Open → Closed." in page.content.decode()
    assert cells(row_html(page))["State"] == "Closed"


def test_reset_confirm_page_without_javascript(admin_client, frozen_engine):
    open_circuit(frozen_engine)

    response = admin_client.get(RESET_URL, {"provider": "openai", "model": "gpt-4o"})

    text = response.content.decode()
    assert is_full_page(response)
    assert '<button type="submit" class="btn-danger-solid">Reset openai / gpt-4o</button>' in text
    assert '<input type="hidden" name="provider" value="openai">' in text


def test_reset_link_points_at_the_confirm_page_and_the_dialog(admin_client, frozen_engine):
    open_circuit(frozen_engine)

    row = row_html(admin_client.get(INDEX_URL))

    assert 'href="/fallback/health/reset/?provider=openai&amp;model=gpt-4o"' in row
    assert 'data-dialog-open="reset-dialog"' in row
    assert 'aria-label="Reset openai / gpt-4o"' in row


def test_reset_confirm_page_of_an_untracked_circuit_is_404(admin_client, frozen_engine):
    response = admin_client.get(RESET_URL, {"provider": "openai", "model": "gpt-4o"})

    assert response.status_code == 404


def test_reset_confirm_page_while_redis_is_unreachable_says_so(admin_client, single_model_catalog):
    """Without Redis this process sees only its own circuits: one it does not track may be open on every
    gateway, so the page says Reset is unavailable (as the POST does) rather than "not tracked"."""
    from health.breaker.redis_backend import RedisEngine
    from health.services import RESET_UNAVAILABLE
    from tests.health.conftest import closed_port_url

    engine = RedisEngine(url=closed_port_url(), namespace="test:reset-confirm")
    try:
        with use_engine(engine):
            response = admin_client.get(RESET_URL, {"provider": "openai", "model": "gpt-4o"}, follow=True)
    finally:
        engine.close()

    assert response.redirect_chain == [(reverse("health:index"), 302)]
    assert RESET_UNAVAILABLE in [str(m) for m in response.context["messages"]]


def test_reset_of_an_untracked_circuit_says_so_and_audits_nothing(admin_client, frozen_engine):
    response = admin_client.post(RESET_URL, {"provider": "openai", "model": "nope"}, headers=HX)

    assert response.status_code == 200
    assert triggers(response)["messages"] == [{"message": "No circuit is tracked for openai/nope.", "level": "error"}]
    assert AuditEvent.objects.count() == 0


# ---------- Threshold editor ----------


def test_configure_dialog_is_on_the_page_with_current_values(admin_client, frozen_engine, health_catalog):
    response = admin_client.get(INDEX_URL)

    text = response.content.decode()
    dialog = re.search(r'<dialog id="configure-dialog".*?</dialog>', text, re.S).group(0)
    assert "data-dialog-managed" in dialog
    assert 'id="configure-body"' in dialog
    assert 'name="failure_threshold" value="5"' in dialog
    assert 'name="failure_status_codes" value="429, 500, 502, 503, 504"' in dialog
    assert '<option value="openai">openai</option>' in dialog
    assert '<option value="gpt-4o">gpt-4o (openai)</option>' in dialog
    assert 'href="/fallback/health/configure/" data-dialog-open="configure-dialog"' in text


def test_configure_full_page_and_partial(admin_client, frozen_engine):
    full = admin_client.get(CONFIGURE_URL)
    partial = admin_client.get(CONFIGURE_URL, headers={**HX, "HX-Target": "configure-body"})

    assert is_full_page(full)
    assert "<h1>Breaker thresholds</h1>" in full.content.decode()
    assert partial.content.decode().lstrip().startswith('<div id="configure-body"')
    assert "<html" not in partial.content.decode()


def test_configure_save_over_htmx_closes_the_dialog_and_audits(
    admin_client, frozen_engine, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(
            CONFIGURE_URL, config_data(failure_threshold="3", failure_status_codes="500 503,429"), headers=HX
        )

    assert response.status_code == 200
    assert response.content.decode().lstrip().startswith('<div id="configure-body"')
    assert triggers(response) == {
        "closeDialog": "configure-dialog",
        "messages": [{"message": "Breaker thresholds saved; every circuit uses them now.", "level": "success"}],
    }
    config = breaker_config_get()
    assert (config.failure_threshold, config.failure_status_codes) == (3, (500, 503, 429))
    event = AuditEvent.objects.get()
    assert event.action == "breaker_config.update"
    assert event.before == {"failure_threshold": 5, "failure_status_codes": [429, 500, 502, 503, 504]}
    assert event.after == {"failure_threshold": 3, "failure_status_codes": [500, 503, 429]}
    # Applied at once to the engine of this process.
    assert frozen_engine.config.default.failure_threshold == 3


def test_configure_save_without_htmx_redirects(admin_client, frozen_engine):
    response = admin_client.post(CONFIGURE_URL, config_data(minimum_requests="20"))

    assert response.status_code == 302 and response.url == INDEX_URL
    assert breaker_config_get().minimum_requests == 20


def test_configure_save_with_nothing_changed_says_so(admin_client, frozen_engine):
    response = admin_client.post(CONFIGURE_URL, config_data(), headers=HX)

    assert triggers(response)["messages"] == [{"message": "Breaker thresholds unchanged.", "level": "info"}]
    assert AuditEvent.objects.count() == 0


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("failure_threshold", "0", "Failure threshold must be at least 1."),
        ("failure_threshold", "2.5", "Failure threshold must be a whole number (got '2.5')."),
        ("failure_threshold", "", "Failure threshold is required."),
        ("minimum_requests", "0", "Minimum requests must be at least 1."),
        ("minimum_requests", "ten", "Minimum requests must be a whole number (got 'ten')."),
        ("window_seconds", "0", "Failure window must be between 1 and 3600 seconds (1 hour)."),
        ("window_seconds", "3601", "Failure window must be between 1 and 3600 seconds (1 hour)."),
        ("initial_cooldown_seconds", "29", "Initial cooldown must be at least 30 seconds."),
        ("cooldown_cap_seconds", "59", "Cooldown cap (59 s) must be at least the initial cooldown (60 s)."),
        ("cooldown_cap_seconds", "86401", "Cooldown cap must be at most 86400 seconds (24 hours)."),
        ("failure_status_codes", "500, 503, 500", "Status code 500 is listed more than once."),
        ("failure_status_codes", "99", "Status code 99 is outside 100–599."),
        ("failure_status_codes", "600", "Status code 600 is outside 100–599."),
        ("failure_status_codes", "5xx", "'5xx' is not a whole number."),
    ],
)
def test_configure_errors_inline_and_nothing_saved(admin_client, frozen_engine, field, value, message):
    response = admin_client.post(CONFIGURE_URL, config_data(**{field: value}), headers=HX)

    text = response.content.decode()
    assert response.status_code == 200
    assert text.lstrip().startswith('<div id="configure-body"')
    assert field_errors(response, f"id_{field}") == [message]
    assert summary(response) == [message]
    assert f'<a href="#id_{field}">' in text
    assert "nothing was saved" in text
    # The user's input stays in the field; the dialog stays open (no closeDialog trigger).
    assert f'name="{field}" value="{html.escape(value)}"' in text.replace("&#x27;", "'")
    assert "closeDialog" not in triggers(response)
    assert BreakerConfig.objects.count() == 0
    assert AuditEvent.objects.count() == 0


def test_configure_several_errors_are_all_summarised(admin_client, frozen_engine):
    response = admin_client.post(
        CONFIGURE_URL,
        config_data(failure_threshold="0", window_seconds="9999", failure_status_codes="1, 2"),
        headers=HX,
    )

    assert summary(response) == [
        "Failure threshold must be at least 1.",
        "Failure window must be between 1 and 3600 seconds (1 hour).",
        "Status code 1 is outside 100–599.",
        "Status code 2 is outside 100–599.",
    ]
    assert field_errors(response, "id_failure_status_codes") == [
        "Status code 1 is outside 100–599. Status code 2 is outside 100–599."
    ]
    assert "4 problems to fix" in response.content.decode()


def test_configure_errors_without_htmx_render_the_full_page(admin_client, frozen_engine):
    response = admin_client.post(CONFIGURE_URL, config_data(failure_threshold="0"))

    assert response.status_code == 200
    assert is_full_page(response)
    assert field_errors(response, "id_failure_threshold") == ["Failure threshold must be at least 1."]


def test_override_add_over_htmx_lists_it_and_keeps_the_dialog_open(admin_client, frozen_engine, health_catalog):
    response = admin_client.post(
        OVERRIDE_URL,
        {
            "override-provider": "openai",
            "override-model": "gpt-4o",
            "override-failure_threshold": "3",
            "override-failure_status_codes": "500, 503",
            "override-window_seconds": "",
        },
        headers=HX,
    )

    text = response.content.decode()
    override = BreakerOverride.objects.get()
    assert (override.failure_threshold, override.failure_status_codes, override.window_seconds) == (3, [500, 503], None)
    assert text.lstrip().startswith('<div id="configure-body"')
    item = re.search(r'<li id="override-openai-gpt-4o-[0-9a-f]{8}">.*?</li>', text, re.S).group(0)
    assert "openai / gpt-4o" in item
    assert "Failure threshold 3 · Failure status codes 500, 503" in item
    assert triggers(response) == {"messages": [{"message": "Override for openai / gpt-4o saved.", "level": "success"}]}
    assert AuditEvent.objects.get().action == "breaker_override.set"


def test_override_shows_on_the_circuit_row(admin_client, frozen_engine, health_catalog):
    BreakerOverride.objects.create(provider="openai", model="gpt-4o", failure_threshold=3)
    frozen_engine.configure(ConfigSet(overrides={("openai", "gpt-4o"): BreakerSettings(failure_threshold=3)}))
    record(frozen_engine, "openai", "gpt-4o", [Outcome.of_status(200)])

    row = row_html(admin_client.get(INDEX_URL))

    assert '<span class="tag" title="This circuit has its own thresholds">override</span>' in row
    assert "opens at 3 failures with at least 10 requests (override)" in row


def test_override_edit_loads_its_values(admin_client, frozen_engine, health_catalog):
    BreakerOverride.objects.create(provider="openai", model="gpt-4o", failure_threshold=3, failure_status_codes=[500])

    response = admin_client.get(
        CONFIGURE_URL, {"provider": "openai", "model": "gpt-4o"}, headers={**HX, "HX-Target": "configure-body"}
    )

    text = response.content.decode()
    assert "Edit the override for openai / gpt-4o" in text
    assert 'name="override-failure_threshold" value="3"' in text
    assert 'name="override-failure_status_codes" value="500"' in text
    assert 'name="override-window_seconds" value=""' in text
    assert '<option value="openai" selected>openai</option>' in text


@pytest.mark.parametrize(
    ("data", "field_id", "message"),
    [
        (
            {"override-provider": "nope", "override-failure_threshold": "3"},
            "id_override-provider",
            "Unknown provider “nope”.",
        ),
        ({"override-provider": "", "override-failure_threshold": "3"}, "id_override-provider", "Provider is required."),
        ({"override-failure_threshold": "0"}, "id_override-failure_threshold", "Failure threshold must be at least 1."),
        (
            {"override-initial_cooldown_seconds": "10"},
            "id_override-initial_cooldown_seconds",
            "Initial cooldown must be at least 30 seconds.",
        ),
        (
            {"override-failure_status_codes": "700"},
            "id_override-failure_status_codes",
            "Status code 700 is outside 100–599.",
        ),
    ],
)
def test_override_errors_inline_and_nothing_saved(admin_client, frozen_engine, health_catalog, data, field_id, message):
    post = {"override-provider": "openai", "override-model": "gpt-4o", **data}

    response = admin_client.post(OVERRIDE_URL, post, headers=HX)

    assert field_errors(response, field_id) == [message]
    assert message in summary(response)
    assert BreakerOverride.objects.count() == 0
    assert AuditEvent.objects.count() == 0


def test_override_with_every_field_empty_is_refused(admin_client, frozen_engine, health_catalog):
    response = admin_client.post(OVERRIDE_URL, {"override-provider": "openai", "override-model": "gpt-4o"}, headers=HX)

    assert summary(response) == ["Set at least one field; an override with every field empty changes nothing."]
    assert '<option value="gpt-4o" selected>gpt-4o (openai)</option>' in response.content.decode()
    assert BreakerOverride.objects.count() == 0


def test_override_delete_over_htmx_and_without(admin_client, frozen_engine, health_catalog):
    BreakerOverride.objects.create(provider="openai", model="gpt-4o", failure_threshold=3)
    BreakerOverride.objects.create(provider="anthropic", model="claude-haiku", window_seconds=30)

    hx = admin_client.post(OVERRIDE_DELETE_URL, {"provider": "openai", "model": "gpt-4o"}, headers=HX)
    plain = admin_client.post(OVERRIDE_DELETE_URL, {"provider": "anthropic", "model": "claude-haiku"})

    assert BreakerOverride.objects.count() == 0
    assert "openai / gpt-4o" not in hx.content.decode().split('id="override-form"')[0]
    assert triggers(hx)["messages"] == [
        {"message": "Override for openai / gpt-4o removed; the global thresholds apply.", "level": "success"}
    ]
    assert plain.status_code == 302 and plain.url == CONFIGURE_URL
    assert [e.action for e in AuditEvent.objects.order_by("id")] == ["breaker_override.delete"] * 2


def test_override_delete_of_a_missing_override_says_so(admin_client, frozen_engine, health_catalog):
    response = admin_client.post(OVERRIDE_DELETE_URL, {"provider": "openai", "model": "gpt-4o"}, headers=HX)

    assert triggers(response)["messages"] == [
        {"message": "No breaker override exists for openai/gpt-4o.", "level": "error"}
    ]


# ---------- Roles and CSRF ----------


def _requests() -> list[tuple[str, str, dict]]:
    pair = {"provider": "openai", "model": "gpt-4o"}
    return [
        ("get", INDEX_URL, {}),
        ("get", RESET_URL, pair),
        ("post", RESET_URL, pair),
        ("get", CONFIGURE_URL, {}),
        ("post", CONFIGURE_URL, config_data(failure_threshold="3")),
        (
            "post",
            OVERRIDE_URL,
            {"override-provider": "openai", "override-model": "gpt-4o", "override-failure_threshold": "2"},
        ),
        ("post", OVERRIDE_DELETE_URL, pair),
    ]


@pytest.mark.parametrize("index", range(len(_requests())))
@pytest.mark.parametrize("htmx", [False, True], ids=["plain", "htmx"])
def test_role_matrix(role_client, frozen_engine, health_catalog, index, htmx):
    role, client = role_client
    open_circuit(frozen_engine)
    BreakerOverride.objects.create(provider="openai", model="gpt-4o", failure_threshold=4)
    method, url, data = _requests()[index]

    response = getattr(client, method)(url, data, headers=HX if htmx else {})

    if role == "admin":
        assert response.status_code in (200, 302)
    elif role == "anonymous" and htmx:
        assert response.status_code == 204
        assert response["HX-Redirect"].startswith("/login/?next=")
    elif role == "anonymous":
        assert response.status_code == 302
        assert response.url.startswith("/login/?next=")
    else:
        assert response.status_code == 403
    if role != "admin":
        assert frozen_engine.get("openai", "gpt-4o").state is State.OPEN
        assert BreakerConfig.objects.count() == 0
        assert list(BreakerOverride.objects.values_list("failure_threshold", flat=True)) == [4]
        assert AuditEvent.objects.count() == 0


@pytest.mark.parametrize(
    ("url", "data"),
    [
        (RESET_URL, {"provider": "openai", "model": "gpt-4o"}),
        (CONFIGURE_URL, config_data(failure_threshold="3")),
        (OVERRIDE_URL, {"override-provider": "openai", "override-model": "gpt-4o", "override-failure_threshold": "2"}),
        (OVERRIDE_DELETE_URL, {"provider": "openai", "model": "gpt-4o"}),
    ],
)
def test_posts_without_csrf_token_are_refused(admin_user, frozen_engine, health_catalog, url, data):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    open_circuit(frozen_engine)
    BreakerOverride.objects.create(provider="openai", model="gpt-4o", failure_threshold=4)

    response = client.post(url, data, headers=HX)

    assert response.status_code == 403
    assert frozen_engine.get("openai", "gpt-4o").state is State.OPEN
    assert BreakerConfig.objects.count() == 0
    assert AuditEvent.objects.count() == 0


def test_reset_with_the_csrf_header_from_the_page_succeeds(admin_user, frozen_engine):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    open_circuit(frozen_engine)
    page = client.get(INDEX_URL).content.decode()
    token = re.search(r'hx-headers=\'\{"X-CSRFToken": "([^"]+)"\}\'', page).group(1)

    response = client.post(RESET_URL, {"provider": "openai", "model": "gpt-4o"}, headers={**HX, "X-CSRFToken": token})

    assert response.status_code == 200
    assert frozen_engine.get("openai", "gpt-4o").state is State.CLOSED


def test_reset_urls_named(frozen_engine):
    assert reverse("health:index") == INDEX_URL
    assert reverse("health:reset") == RESET_URL
    assert reverse("health:configure") == CONFIGURE_URL


def test_override_form_for_a_new_pair_says_add(admin_client, frozen_engine, health_catalog):
    response = admin_client.post(
        OVERRIDE_URL,
        {"override-provider": "openai", "override-model": "gpt-4o", "override-initial_cooldown_seconds": "10"},
        headers=HX,
    )

    assert "<h4>Add an override</h4>" in response.content.decode()
    assert "Edit the override" not in response.content.decode()


# ---------- Reasons, strips, figures, chains, events (issue 12) ----------

EVENTS_URL = "/fallback/health/events/"
FORCE_URL = "/fallback/health/force-open/"
DRAIN_URL = "/fallback/health/drain/"
RELEASE_URL = "/fallback/health/release/"
NOW = datetime.fromtimestamp(T0, UTC)


def detail_html(response, provider: str = "openai", model: str = "gpt-4o") -> str:
    key = circuit_anchor(provider, model)
    match = re.search(
        rf'<tr class="ph-detail" id="circuit-detail-{re.escape(key)}".*?</tr>', response.content.decode(), re.S
    )
    assert match, f"no detail row for {provider}/{model}"
    return match.group(0)


def text_of(fragment: str) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", fragment))).strip()


def minutes_ago(minutes: float) -> datetime:
    return NOW - timedelta(minutes=minutes)


def hold_data(**overrides) -> dict[str, str]:
    data = {
        "hold-provider": "openai",
        "hold-model": "gpt-4o",
        "hold-reason": "vendor incident INC-7",
        "hold-expiry": "30",
    }
    data.update(overrides)
    return {k: v for k, v in data.items() if v is not None}


@pytest.mark.parametrize(
    ("outcome", "state", "reason"),
    [
        (Outcome.of_status(429), "Open", "rate limited · 429"),
        (Outcome.of_status(502), "Open", "server errors · 502"),
        (Outcome.timeout(), "Open", "timing out"),
        (Outcome.connection_error(), "Open", "connection refused"),
    ],
)
def test_open_circuit_says_why_in_words(admin_client, frozen_engine, outcome, state, reason):
    record(frozen_engine, "openai", "gpt-4o", [outcome] * 10)

    row = row_html(admin_client.get(INDEX_URL))

    assert cells(row)["State"] == f"{state} {reason}"
    assert '<span class="ph-reason"' in row and f">{html.escape(reason)}</span>" in row


def test_half_open_circuit_keeps_the_reason_and_a_closed_one_has_none(admin_client, frozen_engine, frozen):
    record(frozen_engine, "openai", "gpt-4o", [Outcome.timeout()] * 10)
    record(frozen_engine, "anthropic", "claude-haiku", [Outcome.of_status(200)] * 9 + [Outcome.of_status(503)])
    frozen.advance(61)

    response = admin_client.get(INDEX_URL)

    assert cells(row_html(response))["State"] == "HalfOpen timing out"
    assert cells(row_html(response, "anthropic", "claude-haiku"))["State"] == "Closed"


def test_strip_shows_the_open_period_with_its_times(admin_client, frozen_engine):
    record(frozen_engine, "openai", "gpt-4o", [Outcome.of_status(200)])
    CircuitEvent.objects.create(
        provider="openai", model="gpt-4o", kind="opened", at=minutes_ago(130), failures=5, total=10, last_status="503"
    )
    CircuitEvent.objects.create(provider="openai", model="gpt-4o", kind="half_open", at=minutes_ago(124))
    CircuitEvent.objects.create(provider="openai", model="gpt-4o", kind="closed", at=minutes_ago(123.5))

    detail = detail_html(admin_client.get(INDEX_URL))

    rects = re.findall(
        r'<rect class="ph-seg ph-seg-([a-z-]+)" x="([\d.]+)%" y="2" width="([\d.]+)%"[^>]*><title>(.*?)</title>', detail
    )
    assert [(css, title) for css, _, _, title in rects] == [
        ("closed", "closed 22:13–20:03 UTC (21 h 50 min)"),
        ("open", "open 20:03–20:09 UTC (6 min)"),
        ("half-open", "half-open 20:09–20:09 UTC (30 s)"),
        ("closed", "closed 20:09–now UTC (2 h 3 min)"),
    ]
    x_open, width_open = float(rects[1][1]), float(rects[1][2])
    assert round(x_open, 2) == round((24 * 60 - 130) / (24 * 60) * 100, 2)
    assert round(width_open, 3) == round(6 / (24 * 60) * 100, 3)
    assert 'aria-label="Last 24 hours: open 1 time (6 min), half-open 1 time (30 s)"' in detail
    # Hour ticks, labelled every three hours: 00:00 ... 21:00 (the strip runs 22:13 → 22:13).
    labels = re.findall(r'<text class="ph-tick-label[^"]*"[^>]*>(\d\d:00)</text>', detail)
    assert labels == ["00:00", "03:00", "06:00", "09:00", "12:00", "15:00", "18:00", "21:00"]
    assert len(re.findall(r'<line class="ph-tick', detail)) == 24


def test_strip_of_a_circuit_without_history_is_closed_throughout(admin_client, frozen_engine):
    record(frozen_engine, "openai", "gpt-4o", [Outcome.of_status(200)])

    detail = detail_html(admin_client.get(INDEX_URL))

    assert re.findall(r"<title>(.*?)</title>", detail) == ["closed 22:13–now UTC (24 h)"]
    assert 'aria-label="Last 24 hours: closed throughout"' in detail


def test_last_hour_figures_come_from_the_request_log_aggregates(admin_client, frozen_engine):
    from requestlogs.models import AttemptMinute

    record(frozen_engine, "openai", "gpt-4o", [Outcome.of_status(200)])
    record(frozen_engine, "anthropic", "claude-haiku", [Outcome.of_status(200)])
    for minute in (5, 20):
        AttemptMinute.objects.create(
            start=minutes_ago(minute).replace(second=0),
            provider="openai",
            model="gpt-4o",
            attempts=20,
            errors=3,
            duration_sum_ms=20 * 400,
            dur_08=20,
        )
    AttemptMinute.objects.create(  # older than an hour: not counted
        start=minutes_ago(90).replace(second=0), provider="openai", model="gpt-4o", attempts=50, errors=50
    )

    response = admin_client.get(INDEX_URL)

    last_hour = cells(row_html(response))["Last hour"]
    assert re.fullmatch(r"15% errors p50 \d+ ms", last_hour), last_hour
    assert 'title="6 of 40 upstream attempts failed in the last hour; median attempt' in row_html(response)
    assert cells(row_html(response, "anthropic", "claude-haiku"))["Last hour"] == "—"


def test_row_lists_the_chains_that_use_the_circuit_with_links(admin_client, frozen_engine, health_catalog):
    gpt, haiku = LlmModel.objects.get(name="gpt-4o"), LlmModel.objects.get(name="claude-haiku")
    own = ChainFactory(name="gpt default", source_model=gpt, entries=[haiku])
    backup = ChainFactory(name="haiku backup", source_model=haiku, entries=[gpt], enabled=False)
    ChainFactory(name="unrelated", source_model=haiku, entries=[haiku], scope_type="team", scope_id=1)
    record(frozen_engine, "openai", "gpt-4o", [Outcome.of_status(200)])
    record(frozen_engine, "anthropic", "claude-haiku", [Outcome.of_status(200)])

    response = admin_client.get(INDEX_URL)

    links = re.findall(
        r'<li><a href="([^"]+)"[^>]*>([^<]+)</a> <span class="muted">([^<]+)</span></li>', detail_html(response)
    )
    assert links == [
        (f"/fallback/chains/{own.pk}/edit/", "gpt default", "source"),
        (f"/fallback/chains/{backup.pk}/edit/", "haiku backup", "step 1 · disabled"),
    ]
    haiku_links = re.findall(
        r'<li><a href="[^"]+"[^>]*>([^<]+)</a>', detail_html(response, "anthropic", "claude-haiku")
    )
    assert haiku_links == ["gpt default", "haiku backup", "unrelated", "unrelated"]


def test_events_expander_loads_the_last_50_newest_first(admin_client, frozen_engine):
    record(frozen_engine, "openai", "gpt-4o", [Outcome.of_status(200)])
    for i in range(55):
        CircuitEvent.objects.create(
            provider="openai",
            model="gpt-4o",
            kind="opened" if i % 2 == 0 else "closed",
            at=minutes_ago(100 - i),
            failures=5 if i % 2 == 0 else None,
            total=10 if i % 2 == 0 else None,
            last_status="429" if i % 2 == 0 else "",
            cooldown_seconds=60 if i % 2 == 0 else None,
        )
    CircuitEvent.objects.create(
        provider="openai", model="", kind="drained", at=minutes_ago(1), actor="alice", reason="vendor incident"
    )
    CircuitEvent.objects.create(provider="openai", model="gpt-4o-mini", kind="opened", at=minutes_ago(0.5))

    row = detail_html(admin_client.get(INDEX_URL))
    url = re.search(r'<details class="ph-events" id="events-[^"]+" hx-preserve\s+hx-get="([^"]+)"', row).group(1)
    response = admin_client.get(html.unescape(url), headers=HX)

    text = response.content.decode()
    assert html.unescape(url) == f"{EVENTS_URL}?provider=openai&model=gpt-4o"
    assert text.lstrip().startswith('<div class="ph-event-box"')
    items = [text_of(li) for li in re.findall(r'<li class="ph-event">(.*?)</li>', text, re.S)]
    assert len(items) == 50
    assert items[0] == "22:12:20 UTC Provider drained until released · by alice “vendor incident”".replace(
        "“", ""
    ).replace("”", "")
    assert items[1] == "21:27:20 UTC Opened 5 failures / 10 requests · rate limited · 429 · cooldown 1 min"
    assert items[2] == "21:26:20 UTC Closed: probe succeeded"
    times = re.findall(r'<time datetime="([^"]+)"', text)[:50]
    assert times == sorted(times, reverse=True)


def test_events_page_without_javascript_and_for_no_events(admin_client, frozen_engine):
    response = admin_client.get(EVENTS_URL, {"provider": "openai", "model": "gpt-4o"})

    assert is_full_page(response)
    assert "<h1>Events of openai / gpt-4o</h1>" in response.content.decode()
    assert "No events yet" in response.content.decode()
    assert admin_client.get(EVENTS_URL, {"provider": "openai"}).status_code == 404


def test_engine_transitions_show_in_the_events_once_flushed(admin_client, frozen_engine):
    from health.events import circuit_events_flush_local

    open_circuit(frozen_engine)
    circuit_events_flush_local(frozen_engine)

    response = admin_client.get(EVENTS_URL, {"provider": "openai", "model": "gpt-4o"}, headers=HX)

    items = [text_of(li) for li in re.findall(r'<li class="ph-event">(.*?)</li>', response.content.decode(), re.S)]
    assert items == ["22:13:20 UTC Opened 10 failures / 10 requests · server errors · 503 · cooldown 1 min"]


# ---------- Holds on the rows ----------


def test_forced_circuit_shows_a_held_pill_with_reason_and_expiry(
    admin_client, frozen_engine, health_catalog, admin_user
):
    open_circuit(frozen_engine)
    circuit_force_open(actor=admin_user, provider="openai", model="gpt-4o", reason="vendor incident INC-7", minutes=30)

    row = row_html(admin_client.get(INDEX_URL))

    assert 'data-held="forced"' in row
    assert (
        cells(row)["State"]
        == "Forced open Open server errors · 503 vendor incident INC-7 · until 22:43 UTC · in 30 min"
    )
    pill = re.search(r'<span class="pill ph-pill-held ph-pill-forced" title="([^"]+)">Forced open</span>', row)
    assert html.unescape(pill.group(1)) == (
        "Forced open: openai / gpt-4o, by alice at 2023-11-14 22:13:20 UTC; expires 2023-11-14 22:43:20 UTC. "
        "Reason: vendor incident INC-7"
    )
    assert 'aria-label="Release openai / gpt-4o"' in row
    assert 'aria-label="Force open openai / gpt-4o"' not in row


def test_a_held_half_open_circuit_does_not_say_a_request_will_probe_it(
    admin_client, frozen_engine, frozen, health_catalog, admin_user
):
    """A hold lets no request through, so no probe comes: its pill says why the circuit waits, not the cooldown."""
    open_circuit(frozen_engine)
    frozen.advance(61)
    circuit_force_open(actor=admin_user, provider="openai", model="gpt-4o", reason="vendor incident", minutes=30)

    row = row_html(admin_client.get(INDEX_URL))

    assert 'data-held="forced"' in row
    assert '<span class="pill pill-half-open">HalfOpen</span>' in row
    assert cells(row)["Cooldown"] == "—"


def test_held_circuit_the_engine_never_tracked_gets_a_row(admin_client, frozen_engine, health_catalog, admin_user):
    circuit_force_open(actor=admin_user, provider="anthropic", model="claude-haiku", reason="quota", minutes=None)

    response = admin_client.get(INDEX_URL)

    row = row_html(response, "anthropic", "claude-haiku")
    assert cells(row)["State"] == "Forced open quota · until released"
    assert 'id="reset-open-' not in row  # nothing to reset on an untracked circuit
    assert "1 held" in response.content.decode()


def test_drain_shows_on_every_row_of_the_provider_and_its_header(
    admin_client, frozen_engine, health_catalog, admin_user
):
    record(frozen_engine, "openai", "gpt-4o", [Outcome.of_status(200)])
    record(frozen_engine, "openai", "gpt-4o-mini", [Outcome.of_status(200)])
    record(frozen_engine, "anthropic", "claude-haiku", [Outcome.of_status(200)])
    provider_drain(actor=admin_user, provider="openai", reason="keys suspended", minutes=None)

    response = admin_client.get(INDEX_URL)

    for model in ("gpt-4o", "gpt-4o-mini"):
        assert cells(row_html(response, "openai", model))["State"] == "Drained keys suspended · until released"
    assert cells(row_html(response, "anthropic", "claude-haiku"))["State"] == "Closed"
    headers = re.findall(r'<tr class="ph-provider-row".*?</tr>', response.content.decode(), re.S)
    openai_header = next(h for h in headers if ">openai<" in h)
    anthropic_header = next(h for h in headers if ">anthropic<" in h)
    assert "Drained" in openai_header and 'aria-label="Release the drain of openai"' in openai_header
    assert "Drained" not in anthropic_header and 'aria-label="Drain provider anthropic"' in anthropic_header


def test_drained_provider_without_tracked_circuits_still_shows(admin_client, frozen_engine, health_catalog, admin_user):
    provider_drain(actor=admin_user, provider="anthropic", reason="keys suspended", minutes=15)

    text = admin_client.get(INDEX_URL).content.decode()

    assert "No circuit of anthropic is tracked yet" in text
    assert "keys suspended · until 22:28 UTC · in 15 min" in text_of(text)


def test_expired_hold_is_not_shown(admin_client, frozen_engine, health_catalog, admin_user, frozen):
    record(frozen_engine, "openai", "gpt-4o", [Outcome.of_status(200)])
    circuit_force_open(actor=admin_user, provider="openai", model="gpt-4o", reason="short", minutes=1)
    frozen.advance(61)

    row = row_html(admin_client.get(INDEX_URL))

    assert "data-held" not in row and cells(row)["State"] == "Closed"


# ---------- The kill-switch dialogs ----------


def test_force_open_dialog_body_names_the_target(admin_client, frozen_engine):
    response = admin_client.get(
        FORCE_URL, {"provider": "openai", "model": "gpt-4o"}, headers={**HX, "HX-Target": "hold-body"}
    )

    text = response.content.decode()
    assert text.lstrip().startswith('<div id="hold-body"')
    assert '<h2 id="hold-title">Force open openai / gpt-4o?</h2>' in text
    assert '<button type="submit" class="btn-danger-solid">Force open openai / gpt-4o</button>' in text
    assert 'name="hold-expiry" value="60" checked' in text
    assert "<html" not in text


def test_force_open_page_without_javascript(admin_client, frozen_engine):
    response = admin_client.get(FORCE_URL, {"provider": "openai", "model": "gpt-4o"})

    assert is_full_page(response)
    assert '<form id="hold-form" method="post" action="/fallback/health/force-open/"' in response.content.decode()


def test_row_links_open_the_hold_dialog(admin_client, frozen_engine):
    record(frozen_engine, "openai", "gpt-4o", [Outcome.of_status(200)])

    text = admin_client.get(INDEX_URL).content.decode()

    row = row_html_text = row_html(admin_client.get(INDEX_URL))
    assert 'href="/fallback/health/force-open/?provider=openai&amp;model=gpt-4o"' in row_html_text
    assert 'hx-target="#hold-body"' in row and 'data-dialog-open="hold-dialog"' in row
    assert 'aria-label="Drain provider openai"' in text
    assert '<dialog id="hold-dialog"' in text
    assert text.index('<dialog id="hold-dialog"') > text.index("</table>")


def test_force_open_over_htmx_creates_the_hold_and_refreshes_the_table(
    admin_client, frozen_engine, health_catalog, django_capture_on_commit_callbacks
):
    open_circuit(frozen_engine)

    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(FORCE_URL, hold_data(), headers=HX)

    control = CircuitControl.objects.get()
    assert (control.provider, control.model, control.kind, control.reason) == (
        "openai",
        "gpt-4o",
        "forced_open",
        "vendor incident INC-7",
    )
    assert control.expires_at == NOW + timedelta(minutes=30)
    assert response["HX-Retarget"] == "#circuit-table" and response["HX-Reswap"] == "outerHTML"
    assert json.loads(response["HX-Trigger-After-Settle"]) == {"closeDialog": "hold-dialog"}
    assert response.content.decode().lstrip().startswith('<div id="circuit-table"')
    assert cells(row_html(response))["State"].startswith("Forced open")
    assert triggers(response)["messages"][0]["message"] == (
        "openai / gpt-4o forced open: its traffic goes to its fallback chains."
    )
    assert AuditEvent.objects.filter(action__contains="force").count() == 1
    assert frozen_engine.config.control_for("openai", "gpt-4o", T0) is not None


@pytest.mark.parametrize(
    ("expiry", "minutes", "expected"),
    [("15", "", 15), ("", "", None), ("other", "90", 90)],
)
def test_force_open_expiry_presets(admin_client, frozen_engine, health_catalog, expiry, minutes, expected):
    admin_client.post(FORCE_URL, hold_data(**{"hold-expiry": expiry, "hold-minutes": minutes}), headers=HX)

    control = CircuitControl.objects.get()
    assert control.expires_at == (None if expected is None else NOW + timedelta(minutes=expected))


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"hold-reason": "  "}, "reason", "Reason is required: say why traffic is held off this target."),
        (
            {"hold-expiry": "other", "hold-minutes": "ten"},
            "minutes",
            "Minutes must be a whole number (got 'ten'); leave it empty to hold until released.",
        ),
        (
            {"hold-expiry": "other", "hold-minutes": ""},
            "minutes",
            "Enter the number of minutes, or choose “Until released”.",
        ),
    ],
)
def test_force_open_errors_stay_in_the_dialog_with_the_input(
    admin_client, frozen_engine, health_catalog, data, field, message
):
    response = admin_client.post(FORCE_URL, hold_data(**data), headers=HX)

    text = response.content.decode()
    assert text.lstrip().startswith('<div id="hold-body"')
    assert field_errors(response, f"id_hold-{field}") == [message]
    assert message in summary(response)
    assert "HX-Retarget" not in response and "HX-Trigger-After-Settle" not in response
    typed = hold_data(**data)["hold-reason"]
    assert f">{html.escape(typed)}</textarea>" in text
    if data.get("hold-minutes"):
        assert f'name="hold-minutes" value="{data["hold-minutes"]}"' in text
    assert 'name="hold-expiry" value="{}" checked'.format(data.get("hold-expiry", "30")) in text
    assert CircuitControl.objects.count() == 0


def test_force_open_unknown_model_is_refused(admin_client, frozen_engine, health_catalog):
    response = admin_client.post(FORCE_URL, hold_data(**{"hold-model": "nope"}), headers=HX)

    assert "Unknown model “nope”." in summary(response)
    assert CircuitControl.objects.count() == 0


def test_force_open_without_htmx_redirects_with_a_message(admin_client, frozen_engine, health_catalog):
    response = admin_client.post(FORCE_URL, hold_data())

    assert response.status_code == 302 and response.url == INDEX_URL
    assert CircuitControl.objects.count() == 1


def test_drain_dialog_and_post(admin_client, frozen_engine, health_catalog):
    body = admin_client.get(DRAIN_URL, {"provider": "openai"}, headers=HX).content.decode()
    error = admin_client.post(DRAIN_URL, hold_data(**{"hold-model": None, "hold-reason": ""}), headers=HX)
    done = admin_client.post(DRAIN_URL, hold_data(**{"hold-model": None, "hold-expiry": ""}), headers=HX)

    assert '<h2 id="hold-title">Drain openai?</h2>' in body
    assert '<button type="submit" class="btn-danger-solid">Drain openai</button>' in body
    assert field_errors(error, "id_hold-reason") == ["Reason is required: say why traffic is held off this target."]
    control = CircuitControl.objects.get()
    assert (control.provider, control.model, control.kind, control.expires_at) == ("openai", "", "drained", None)
    assert done["HX-Retarget"] == "#circuit-table"


def test_release_confirm_and_post(admin_client, frozen_engine, health_catalog, admin_user):
    open_circuit(frozen_engine)
    circuit_force_open(actor=admin_user, provider="openai", model="gpt-4o", reason="incident", minutes=None)

    body = admin_client.get(RELEASE_URL, {"provider": "openai", "model": "gpt-4o"}, headers=HX).content.decode()
    response = admin_client.post(RELEASE_URL, {"hold-provider": "openai", "hold-model": "gpt-4o"}, headers=HX)
    again = admin_client.post(RELEASE_URL, {"hold-provider": "openai", "hold-model": "gpt-4o"}, headers=HX)

    assert '<h2 id="hold-title">Release openai / gpt-4o?</h2>' in body
    assert '<button type="submit" class="btn-primary">Release openai / gpt-4o</button>' in body
    assert CircuitControl.objects.count() == 0
    assert response["HX-Retarget"] == "#circuit-table"
    assert cells(row_html(response))["State"] == "Open server errors · 503"
    assert summary(again) == ["openai/gpt-4o has no hold to release."]


def test_release_of_a_drain(admin_client, frozen_engine, health_catalog, admin_user):
    provider_drain(actor=admin_user, provider="openai", reason="incident", minutes=None)

    body = admin_client.get(RELEASE_URL, {"provider": "openai"}, headers=HX).content.decode()
    plain = admin_client.post(RELEASE_URL, {"hold-provider": "openai", "hold-model": ""})

    assert '<h2 id="hold-title">Release the drain of openai?</h2>' in body
    assert plain.status_code == 302 and CircuitControl.objects.count() == 0


def test_hold_views_escape_names_and_reasons(admin_client, frozen_engine, health_catalog, admin_user):
    circuit_force_open(actor=admin_user, provider="openai", model="gpt-4o", reason="<script>x</script>", minutes=None)

    text = admin_client.get(INDEX_URL).content.decode()
    body = admin_client.get(FORCE_URL, {"provider": "<b>p</b>", "model": "m"}, headers=HX).content.decode()

    assert "<script>x</script>" not in text and "&lt;script&gt;x&lt;/script&gt;" in text
    assert "<b>p</b>" not in body and "&lt;b&gt;p&lt;/b&gt;" in body


def _new_requests() -> list[tuple[str, str, dict]]:
    pair = {"provider": "openai", "model": "gpt-4o"}
    return [
        ("get", EVENTS_URL, pair),
        ("get", FORCE_URL, pair),
        ("post", FORCE_URL, hold_data()),
        ("get", DRAIN_URL, {"provider": "openai"}),
        ("post", DRAIN_URL, hold_data(**{"hold-model": None})),
        ("get", RELEASE_URL, pair),
        ("post", RELEASE_URL, {"hold-provider": "anthropic", "hold-model": "claude-haiku"}),
    ]


@pytest.mark.parametrize("index", range(len(_new_requests())))
@pytest.mark.parametrize("role", ["bi_read_only", "user"])
def test_new_views_refuse_other_roles(bi_client, user_client, frozen_engine, health_catalog, admin_user, index, role):
    circuit_force_open(actor=admin_user, provider="anthropic", model="claude-haiku", reason="held", minutes=None)
    client = bi_client if role == "bi_read_only" else user_client
    method, url, data = _new_requests()[index]

    plain = getattr(client, method)(url, data)
    htmx = getattr(client, method)(url, data, headers=HX)

    assert (plain.status_code, htmx.status_code) == (403, 403)
    assert list(CircuitControl.objects.values_list("provider", "model")) == [("anthropic", "claude-haiku")]


@pytest.mark.parametrize("index", range(len(_new_requests())))
def test_new_views_admin_gets_them(admin_client, frozen_engine, health_catalog, admin_user, index):
    circuit_force_open(actor=admin_user, provider="anthropic", model="claude-haiku", reason="held", minutes=None)
    method, url, data = _new_requests()[index]

    response = getattr(admin_client, method)(url, data, headers=HX)

    assert response.status_code == 200


@pytest.mark.parametrize(
    ("url", "data"),
    [
        (FORCE_URL, hold_data()),
        (DRAIN_URL, hold_data(**{"hold-model": None})),
        (RELEASE_URL, {"hold-provider": "openai"}),
    ],
)
def test_hold_posts_without_csrf_token_are_refused(admin_user, frozen_engine, health_catalog, url, data):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)

    response = client.post(url, data, headers=HX)

    assert response.status_code == 403
    assert CircuitControl.objects.count() == 0


@pytest.mark.parametrize("circuits", [1, 3])
def test_query_count_with_holds_and_history_does_not_grow(
    admin_client, frozen_engine, health_catalog, admin_user, django_assert_num_queries, circuits
):
    for i in range(circuits):
        open_circuit(frozen_engine, "openai", f"model-{i}")
        CircuitEvent.objects.create(provider="openai", model=f"model-{i}", kind="opened", at=minutes_ago(10))
    provider_drain(actor=admin_user, provider="anthropic", reason="held", minutes=None)
    circuit_force_open(actor=admin_user, provider="openai", model="gpt-4o", reason="held", minutes=None)
    admin_client.get(INDEX_URL)

    with django_assert_num_queries(10):
        poll = admin_client.get(INDEX_URL, headers={**HX, "HX-Target": "circuit-table"})

    assert len(re.findall(r'<tr id="circuit-row-', poll.content.decode())) == circuits + 1


# The threshold editor's two forms swap only themselves (HX-Target), so an error in one keeps what is typed in the
# other; a saved global form answers with the whole body (retargeted) and closes the dialog.


def test_configure_error_answers_with_the_global_form_alone(admin_client, frozen_engine):
    response = admin_client.post(
        CONFIGURE_URL, config_data(failure_threshold="abc"), headers={**HX, "HX-Target": "config-form"}
    )

    text = response.content.decode()
    assert text.lstrip().startswith('<form id="config-form"')
    assert 'id="overrides"' not in text and 'id="override-form"' not in text
    assert field_errors(response, "id_failure_threshold") == ["Failure threshold must be a whole number (got 'abc')."]
    assert "HX-Retarget" not in response
    assert response["Vary"] == "HX-Request, HX-Target, Cookie"


def test_configure_save_from_the_global_form_answers_with_the_whole_body(admin_client, frozen_engine):
    response = admin_client.post(
        CONFIGURE_URL, config_data(failure_threshold="8"), headers={**HX, "HX-Target": "config-form"}
    )

    assert response.content.decode().lstrip().startswith('<div id="configure-body"')
    assert response["HX-Retarget"] == "#configure-body"
    assert "closeDialog" in response["HX-Trigger"]
    assert breaker_config_get().failure_threshold == 8


def test_override_error_answers_with_the_overrides_alone(admin_client, frozen_engine, health_catalog):
    response = admin_client.post(
        OVERRIDE_URL,
        {"override-provider": "openai", "override-model": "gpt-4o", "override-failure_threshold": "0"},
        headers={**HX, "HX-Target": "overrides"},
    )

    text = response.content.decode()
    assert text.lstrip().startswith('<section class="overrides" id="overrides"')
    assert 'id="config-form"' not in text
    assert "problem to fix; nothing was saved" in text
    assert BreakerOverride.objects.count() == 0


def test_override_edit_and_delete_answer_with_the_overrides_alone(admin_client, frozen_engine, health_catalog):
    BreakerOverride.objects.create(provider="openai", model="gpt-4o", failure_threshold=3)
    target = {**HX, "HX-Target": "overrides"}

    edit = admin_client.get(CONFIGURE_URL + "?provider=openai&model=gpt-4o", headers=target).content.decode()
    deleted = admin_client.post(OVERRIDE_DELETE_URL, {"provider": "openai", "model": "gpt-4o"}, headers=target)

    assert edit.lstrip().startswith('<section class="overrides" id="overrides"')
    assert "Edit the override for openai / gpt-4o" in edit and 'id="config-form"' not in edit
    assert deleted.content.decode().lstrip().startswith('<section class="overrides" id="overrides"')
    assert BreakerOverride.objects.count() == 0
