"""Provider Health tab: circuit table, polling partial, Reset, threshold editor; roles, CSRF, escaping, queries."""

import html
import json
import re
from datetime import UTC, datetime

import pytest
import time_machine
from django.test import Client
from django.urls import reverse

from audit.models import AuditEvent
from health import views as health_views
from health.breaker import BreakerSettings, ConfigSet, ManualClock, MemoryEngine, Outcome, State, use_engine
from health.models import BreakerConfig, BreakerOverride
from health.selectors import breaker_config_get, circuit_anchor

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
        "State": "Open",
        "Failures": "10 / 10 in window",
        "Cooldown": "in 60 s",
        "Last failure": "just now · 503",
        "Opens": "1",
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
        "Failures": "3 / 10 in window",
        "Cooldown": "—",
        "Last failure": "just now · timeout",
        "Opens": "0",
    }
    assert '<span class="pill pill-closed">Closed</span>' in row


def test_index_half_open_after_cooldown(admin_client, frozen_engine, frozen):
    open_circuit(frozen_engine)
    frozen.advance(61)

    response = admin_client.get(INDEX_URL)

    row = row_html(response)
    assert '<span class="pill pill-half-open">HalfOpen</span>' in row
    assert cells(row)["Cooldown"] == "—"
    assert cells(row)["Last failure"] == "1 min ago · 503"


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
    assert cells(row_html(response))["State"] == "Open"
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

    # session, user, roles; the table reads only the engine
    with django_assert_num_queries(3):
        poll = admin_client.get(INDEX_URL, headers={**HX, "HX-Target": "circuit-table"})
    # + config, config and overrides (override list), providers, models
    with django_assert_num_queries(8):
        full = admin_client.get(INDEX_URL)

    assert len(re.findall(r'<tr id="circuit-row-', poll.content.decode())) == circuits
    assert len(re.findall(r'<tr id="circuit-row-', full.content.decode())) == circuits


# ---------- Reset ----------


def test_reset_over_htmx_flips_the_row_and_audits(admin_client, frozen_engine):
    open_circuit(frozen_engine)

    response = admin_client.post(RESET_URL, {"provider": "openai", "model": "gpt-4o"}, headers=HX)

    assert response.status_code == 200
    assert response.content.decode().lstrip().startswith('<div id="circuit-table"')
    assert cells(row_html(response))["State"] == "Closed"
    assert cells(row_html(response))["Failures"] == "0 / 0 in window"
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
