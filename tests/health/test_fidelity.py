"""Provider Health as documented: Failure count and Total requests as sortable columns with the window in the
header's help, and the threshold editor's tuning guidance with its "Save anyway" confirmation."""

import html
import re

import pytest

from audit.models import AuditEvent
from health.breaker import Outcome
from health.forms import tuning_warnings
from health.models import BreakerConfig, BreakerOverride
from health.selectors import breaker_config_get, breaker_config_snapshot, circuit_anchor

pytestmark = pytest.mark.django_db

T0 = 1_700_000_000.0
HX = {"HX-Request": "true"}
INDEX_URL = "/fallback/health/"
CONFIGURE_URL = "/fallback/health/configure/"
OVERRIDE_URL = "/fallback/health/configure/override/"


def record(engine, provider: str, model: str, failures: int, successes: int) -> None:
    for outcome in [Outcome.of_status(200)] * successes + [Outcome.of_status(503)] * failures:
        engine.record(engine.allow(provider, model), outcome)


def config_data(**changes: str) -> dict[str, str]:
    data = {
        "failure_threshold": "5",
        "window_seconds": "60",
        "minimum_requests": "10",
        "initial_cooldown_seconds": "60",
        "cooldown_cap_seconds": "300",
        "failure_status_codes": "429, 500, 502, 503, 504",
    }
    data.update(changes)
    return data


def model_order(response) -> list[str]:
    """The models of the table's figures rows, top to bottom."""
    return re.findall(
        r'<td class="truncate circuit-model" data-label="Model" title="([^"]+)"', response.content.decode()
    )


def header(response, label: str) -> str:
    match = re.search(rf"<th [^>]*>(?:(?!</th>).)*{label}(?:(?!</th>).)*</th>", response.content.decode(), re.S)
    assert match, f"no header {label}"
    return match.group(0)


def warning_items(response) -> list[str]:
    block = re.search(r'<div class="alert alert-warning th-warning".*?</div>', response.content.decode(), re.S)
    if block is None:
        return []
    return [html.unescape(m) for m in re.findall(r'<li><a href="#[^"]+">(.*?)</a></li>', block.group(0))]


def signature_of(response) -> str:
    match = re.search(r'name="confirm_risky" value="([0-9a-f]+)"', response.content.decode())
    assert match, "no Save anyway box"
    return match.group(1)


@pytest.fixture
def three_circuits(frozen_engine):
    # failures / total: a 1/9, b 4/4, c 2/20 (none open: below the default minimum or threshold)
    record(frozen_engine, "openai", "a-model", failures=1, successes=8)
    record(frozen_engine, "openai", "b-model", failures=4, successes=0)
    record(frozen_engine, "openai", "c-model", failures=2, successes=18)
    return frozen_engine


# ---------- Columns and sorting ----------


def test_failure_count_and_total_requests_are_separate_cells(admin_client, three_circuits):
    response = admin_client.get(INDEX_URL)

    text = response.content.decode()
    key = circuit_anchor("openai", "b-model")
    row = re.search(rf'<tr id="circuit-row-{key}".*?</tr>', text, re.S).group(0)
    assert re.search(r'data-label="Failure count"[^>]*><span class="window-count has-failures">4</span></td>', row)
    assert re.search(r'data-label="Total requests"[^>]*>4</td>', row)
    assert "in window" not in text


def test_headers_name_the_window_in_their_help(admin_client, three_circuits):
    BreakerOverride.objects.create(provider="openai", model="a-model", window_seconds=120)
    three_circuits.configure(breaker_config_snapshot())
    response = admin_client.get(INDEX_URL)

    help_text = re.search(r'<p class="visually-hidden" id="window-help">(.*?)</p>', response.content.decode()).group(1)
    assert help_text == (
        "Failure count and Total requests: the last 60 s (120 s for circuits with an override; see each cell)."
    )
    for label in ("Failure count", "Total requests"):
        th = header(response, label)
        assert 'aria-describedby="window-help"' in th
        assert f'title="{help_text}"' in th


@pytest.mark.parametrize(
    ("sort", "expected", "aria"),
    [
        ("", ["a-model", "b-model", "c-model"], None),
        ("-failures", ["b-model", "c-model", "a-model"], ("Failure count", "descending")),
        ("failures", ["a-model", "c-model", "b-model"], ("Failure count", "ascending")),
        ("-requests", ["c-model", "a-model", "b-model"], ("Total requests", "descending")),
        ("requests", ["b-model", "a-model", "c-model"], ("Total requests", "ascending")),
    ],
)
def test_sorting_by_failure_count_and_total_requests(admin_client, three_circuits, sort, expected, aria):
    response = admin_client.get(INDEX_URL + (f"?sort={sort}" if sort else ""))

    assert model_order(response) == expected
    if aria:
        label, direction = aria
        assert f'aria-sort="{direction}"' in header(response, label)
        assert response.content.decode().count("aria-sort=") == 1


def test_count_headers_sort_most_first_then_flip(admin_client, three_circuits):
    default = admin_client.get(INDEX_URL)
    assert 'href="/fallback/health/?sort=-failures"' in header(default, "Failure count")
    assert 'href="/fallback/health/?sort=-requests"' in header(default, "Total requests")

    by_failures = admin_client.get(INDEX_URL + "?sort=-failures")
    assert 'href="/fallback/health/?sort=failures"' in header(by_failures, "Failure count")
    # The same markup as the other sortable headers of the console (includes/sort_link.html): a link inside
    # a th with aria-sort, its icon showing the direction.
    assert re.search(
        r'<th scope="col" class="num" aria-sort="descending"[^>]*>\s*<a class="sort-link"[^>]*>Failure count '
        r'<span aria-hidden="true">▼</span>',
        header(by_failures, "Failure count"),
    )
    assert '<span aria-hidden="true">↕</span>' in header(by_failures, "Total requests")


def test_the_poll_and_a_sort_click_keep_the_order(admin_client, three_circuits):
    poll = admin_client.get(INDEX_URL + "?sort=-failures", headers={**HX, "HX-Target": "circuit-table"})

    text = poll.content.decode()
    assert text.lstrip().startswith('<div id="circuit-table" hx-get="/fallback/health/?sort=-failures"')
    assert model_order(poll) == ["b-model", "c-model", "a-model"]


def test_a_reset_answered_with_the_table_keeps_the_page_sort(admin_client, three_circuits):
    response = admin_client.post(
        "/fallback/health/reset/",
        {"provider": "openai", "model": "a-model"},
        headers={**HX, "HX-Current-URL": "http://testserver/fallback/health/?sort=-requests"},
    )

    assert model_order(response) == ["c-model", "b-model", "a-model"]  # a-model reset to 0 / 0


def test_an_unknown_sort_falls_back_to_the_default(admin_client, three_circuits):
    response = admin_client.get(INDEX_URL + "?sort=drop-table")

    assert response.status_code == 200
    assert model_order(response) == ["a-model", "b-model", "c-model"]


def test_providers_follow_their_first_circuit_in_the_order(admin_client, frozen_engine):
    record(frozen_engine, "anthropic", "claude", failures=1, successes=0)
    record(frozen_engine, "openai", "gpt", failures=3, successes=0)

    response = admin_client.get(INDEX_URL + "?sort=-failures")

    assert model_order(response) == ["gpt", "claude"]
    text = response.content.decode()
    assert text.index('id="provider-row-openai') < text.index('id="provider-row-anthropic')


# ---------- Tuning guidance and the warning before saving ----------


def test_editor_explains_when_to_tune_and_each_tradeoff(admin_client, frozen_engine):
    response = admin_client.get(CONFIGURE_URL)

    text = html.unescape(response.content.decode())
    assert "When to tune these" in text
    assert "Circuits open during normal latency spikes" in text
    assert "An outage takes too long to start serving the fallback" in text
    for field in (
        "failure_threshold",
        "window_seconds",
        "minimum_requests",
        "initial_cooldown_seconds",
        "cooldown_cap_seconds",
        "failure_status_codes",
    ):
        assert f'id="id_{field}-tradeoff"' in text
        assert re.search(rf'id="id_{field}"[^>]*aria-describedby="id_{field}-help id_{field}-tradeoff"', text, re.S)


@pytest.mark.parametrize(
    ("changes", "keys"),
    [
        ({"minimum_requests": "3", "failure_threshold": "3"}, ["few_requests"]),
        ({"failure_threshold": "1"}, ["low_threshold"]),
        ({"failure_threshold": "2"}, ["low_threshold"]),
        ({"failure_threshold": "20", "minimum_requests": "10"}, ["threshold_above_minimum"]),
        ({"window_seconds": "3600", "minimum_requests": "500"}, ["slow_to_open"]),
        ({"failure_status_codes": ""}, ["no_codes"]),
        ({"failure_threshold": "1", "minimum_requests": "1"}, ["low_threshold", "few_requests"]),
    ],
)
def test_risky_values_warn(changes, keys):
    assert [w.key for w in tuning_warnings(config_data(**changes))] == keys


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"failure_threshold": "3", "minimum_requests": "5"},
        {"failure_threshold": "10", "minimum_requests": "20", "window_seconds": "120"},
        {"window_seconds": "3600", "minimum_requests": "50"},
        # Invalid values are the service's to refuse; they get errors, not warnings.
        {"failure_threshold": "0"},
        {"minimum_requests": "ten"},
        {"initial_cooldown_seconds": "29", "failure_threshold": "1"},
    ],
)
def test_sane_or_invalid_values_do_not_warn(changes):
    assert tuning_warnings(config_data(**changes)) == []


def test_sane_values_save_at_once(admin_client, frozen_engine):
    response = admin_client.post(CONFIGURE_URL, config_data(failure_threshold="8", minimum_requests="20"), headers=HX)

    assert warning_items(response) == []
    assert "closeDialog" in response["HX-Trigger"]
    assert breaker_config_get().failure_threshold == 8


def test_risky_values_ask_first_then_save_anyway(admin_client, frozen_engine):
    data = config_data(failure_threshold="1", minimum_requests="2")

    first = admin_client.post(CONFIGURE_URL, data, headers=HX)

    assert first.status_code == 200
    assert first.content.decode().lstrip().startswith('<div id="configure-body"')
    assert warning_items(first) == [
        "Failure threshold 1: a single failed request opens the circuit (within 60 s), so one bad moment sends "
        "traffic to the fallback.",
        "Minimum requests 2: the circuit is judged on as few as 2 requests, so a normal latency spike can open it.",
    ]
    text = first.content.decode()
    assert "nothing was saved yet" in text
    assert 'name="failure_threshold" value="1"' in text  # the input stays
    assert "closeDialog" not in first.get("HX-Trigger", "")
    assert BreakerConfig.objects.count() == 0 and AuditEvent.objects.count() == 0

    # Submitting again without ticking the box asks again.
    again = admin_client.post(CONFIGURE_URL, data, headers=HX)
    assert len(warning_items(again)) == 2
    assert BreakerConfig.objects.count() == 0

    saved = admin_client.post(CONFIGURE_URL, {**data, "confirm_risky": signature_of(first)}, headers=HX)

    assert "closeDialog" in saved["HX-Trigger"]
    config = breaker_config_get()
    assert (config.failure_threshold, config.minimum_requests) == (1, 2)
    assert AuditEvent.objects.get().action == "breaker_config.update"


def test_a_confirmation_covers_only_the_values_it_was_given_for(admin_client, frozen_engine):
    first = admin_client.post(CONFIGURE_URL, config_data(minimum_requests="3", failure_threshold="3"), headers=HX)
    signature = signature_of(first)

    # The value the warning is about changed: the old confirmation does not cover it.
    changed = admin_client.post(
        CONFIGURE_URL, config_data(minimum_requests="2", failure_threshold="2", confirm_risky=signature), headers=HX
    )

    assert len(warning_items(changed)) == 2
    assert BreakerConfig.objects.count() == 0


def test_the_warning_works_without_javascript(admin_client, frozen_engine):
    data = config_data(failure_status_codes="")

    first = admin_client.post(CONFIGURE_URL, data)

    assert first.status_code == 200
    assert first.content.decode().lstrip().startswith("<!doctype html>")
    assert warning_items(first)[0].startswith("No failure status codes")
    saved = admin_client.post(CONFIGURE_URL, {**data, "confirm_risky": signature_of(first)})
    assert saved.status_code == 302
    assert breaker_config_get().failure_status_codes == ()


def test_invalid_values_get_their_errors_before_any_warning(admin_client, frozen_engine):
    data = config_data(failure_threshold="1", cooldown_cap_seconds="30")  # cap below the initial cooldown

    response = admin_client.post(CONFIGURE_URL, data, headers=HX)

    assert "Cooldown cap (30 s) must be at least the initial cooldown (60 s)." in html.unescape(
        response.content.decode()
    )
    assert warning_items(response) == []
    assert BreakerConfig.objects.count() == 0


def test_the_api_saves_risky_values_without_asking(admin_client, frozen_engine):
    response = admin_client.put(
        "/api/breaker-config/", {"failure_threshold": 1, "minimum_requests": 1}, content_type="application/json"
    )

    assert response.status_code == 200, response.content
    assert breaker_config_get().failure_threshold == 1


def test_an_override_that_makes_its_circuit_risky_asks_too(admin_client, frozen_engine, health_catalog):
    # With the global threshold (5), a minimum of 4 also warns that the threshold is above it.
    data = {"override-provider": "openai", "override-model": "gpt-4o", "override-minimum_requests": "4"}

    first = admin_client.post(OVERRIDE_URL, data, headers=HX)

    assert [m.split(":")[0] for m in warning_items(first)] == [
        "Minimum requests 4",
        "Failure threshold 5 is above minimum requests 4",
    ]
    assert BreakerOverride.objects.count() == 0
    match = re.search(r'name="override-confirm_risky" value="([0-9a-f]+)"', first.content.decode())
    admin_client.post(OVERRIDE_URL, {**data, "override-confirm_risky": match.group(1)}, headers=HX)
    assert BreakerOverride.objects.get().minimum_requests == 4


def test_a_sane_override_saves_at_once(admin_client, frozen_engine, health_catalog):
    data = {"override-provider": "openai", "override-model": "gpt-4o", "override-failure_threshold": "8"}

    response = admin_client.post(OVERRIDE_URL, data, headers=HX)

    assert warning_items(response) == []
    assert BreakerOverride.objects.get().failure_threshold == 8
