"""Provider Health's table as a review found it: a sort header back to the default order, a held open circuit's
cooldown, and an error share that reads 100% while some attempts succeeded."""

import re
from datetime import UTC, datetime

import pytest
import time_machine

from health.breaker import ManualClock, MemoryEngine, use_engine
from tests.health.test_fidelity import HX, INDEX_URL, T0, record

pytestmark = pytest.mark.django_db


def model_order(response):
    return re.findall(
        r'<td class="truncate circuit-model" data-label="Model" title="([^"]+)"', response.content.decode()
    )


@pytest.fixture
def three_circuits(frozen_engine):
    record(frozen_engine, "openai", "a-model", failures=1, successes=8)
    record(frozen_engine, "openai", "b-model", failures=4, successes=0)
    record(frozen_engine, "openai", "c-model", failures=2, successes=18)
    return frozen_engine


def test_clicking_model_header_from_a_count_sort_goes_back_to_model_order(admin_client, three_circuits):
    """The Model header links to /fallback/health/ (no ?sort=); htmx sends the page it leaves as HX-Current-URL,
    which the view read the sort from, so the table stayed sorted by failures while the URL said the default."""
    page = admin_client.get(INDEX_URL + "?sort=-failures")
    model_link = re.search(r'<a class="sort-link"[^>]*href="([^"]+)"[^>]*>Model ', page.content.decode()).group(1)
    assert model_link == "/fallback/health/"

    response = admin_client.get(
        model_link,
        headers={
            **HX,
            "HX-Target": "circuit-table",
            "HX-Current-URL": "http://testserver/fallback/health/?sort=-failures",
        },
    )

    assert model_order(response) == ["a-model", "b-model", "c-model"]
    assert 'hx-get="/fallback/health/"' in response.content.decode().split(">", 1)[0]


def test_an_open_circuit_under_a_hold_shows_no_cooldown_countdown(admin_client, health_catalog, admin_user):
    """The Cooldown cell reads "—" under a hold, which lets no probe through; an open circuit that was forced open
    counted down "in 60 s" (then "now"), as if traffic would resume then."""
    from health.services import circuit_force_open

    with time_machine.travel(datetime.fromtimestamp(T0, UTC), tick=False):
        engine = MemoryEngine(clock=ManualClock(T0))
        with use_engine(engine):
            record(engine, "openai", "gpt-4o", failures=10, successes=0)
            circuit_force_open(actor=admin_user, provider="openai", model="gpt-4o", reason="incident", minutes=30)

            text = admin_client.get(INDEX_URL).content.decode()

    from health.selectors import circuit_anchor

    key = circuit_anchor("openai", "gpt-4o")
    row = re.search(rf'<tr id="circuit-row-{key}".*?</tr>', text, re.S).group(0)
    assert 'data-held="forced"' in row
    cooldown = re.search(r'<td class="nowrap" data-label="Cooldown">(.*?)</td>', row, re.S).group(1)
    assert "in 60 s" not in cooldown


def test_last_hour_error_share_never_reads_100_percent_while_some_attempts_succeeded():
    """Never "100% errors" while some attempts succeeded (999 failures of 1,000 read so, as if the provider
    answered nothing), as never "0%" while some failed."""
    from health.stats import CircuitStats
    from health.views import _stats_words

    words = _stats_words(CircuitStats(attempts=1000, errors=999, p50_ms=120.0))

    assert words["errors_text"] == ">99% errors"
    assert _stats_words(CircuitStats(attempts=1000, errors=1000, p50_ms=None))["errors_text"] == "100% errors"
