"""Bad input to the chains console and API is a field error, a 400 or a 415, never a 500."""

import json

import pytest

from audit.models import AuditEvent
from chains.models import FallbackChain
from core.validators import CONTROL_CHARACTERS_MESSAGE
from tests.chains.test_views import error_text, form_data
from tests.factories import ChainFactory

pytestmark = pytest.mark.django_db

HUGE = 10**400  # a JSON integer Python reads exactly; float() of it overflows


@pytest.mark.parametrize("knob", ["max_retries", "deadline_seconds"])
def test_a_knob_too_large_for_a_float_is_a_400_naming_its_bounds(admin_client, knob):
    version = admin_client.get("/api/resilience/defaults/").json()["version"]
    body = json.dumps({"version": version, "policy": {knob: HUGE}})

    response = admin_client.put("/api/resilience/defaults/", body, content_type="application/json")

    assert response.status_code == 400
    [message] = response.json()["errors"][f"policy.{knob}"]
    assert message.startswith("Must be between") and message.endswith("(got a number of more than 15 digits).")


def test_a_chain_with_a_knob_too_large_for_a_float_is_a_400_and_nothing_is_saved(admin_client, catalog):
    body = {
        "name": "c",
        "source_model": "gpt-4o",
        "entries": [{"model": "gpt-4o-mini"}],
        "resilience": {"max_retries": HUGE},
    }

    response = admin_client.post("/api/chains/", json.dumps(body), content_type="application/json")

    assert response.status_code == 400
    assert "resilience.max_retries" in response.json()["errors"]
    assert not FallbackChain.objects.exists()


def test_a_knob_named_with_a_lone_surrogate_is_a_400(admin_client):
    version = admin_client.get("/api/resilience/defaults/").json()["version"]
    body = '{"version": VERSION, "policy": {"\\ud800": 1}}'.replace("VERSION", str(version))

    response = admin_client.put("/api/resilience/defaults/", body, content_type="application/json")

    assert response.status_code == 400
    assert b"\\ud800" in response.content  # the message names it, escaped: the answer is ASCII


@pytest.mark.parametrize("form_body", ["scope.type=global", "entries[0]model=gpt-4o-mini"])
def test_the_api_takes_json_only_a_form_body_is_a_415(admin_client, catalog, form_body):
    chain = ChainFactory(source_model=catalog["gpt-4o"], entries=[catalog["claude-sonnet"]])

    response = admin_client.patch(
        f"/api/chains/{chain.pk}/",
        f"version={chain.version}&{form_body}",
        content_type="application/x-www-form-urlencoded",
    )

    assert response.status_code == 415
    assert "application/x-www-form-urlencoded" in response.json()["detail"]
    chain.refresh_from_db()
    assert chain.scope_type == "global" and [e.model.name for e in chain.entries.all()] == ["claude-sonnet"]


def test_a_search_of_more_than_200_characters_is_a_400(admin_client):
    response = admin_client.get("/api/chains/", {"search": " ".join(["a"] * 1200)})

    assert response.status_code == 400
    assert "search" in response.json()["errors"]


def test_a_delete_over_htmx_with_a_current_url_that_is_no_url_answers_the_table(admin_client):
    chain = ChainFactory(name="doomed")

    response = admin_client.post(
        f"/fallback/chains/{chain.pk}/delete/", headers={"HX-Request": "true", "HX-Current-URL": "http://["}
    )

    assert response.status_code == 200
    assert 'id="chain-table"' in response.content.decode()  # the first page, as without the header
    assert not FallbackChain.objects.filter(pk=chain.pk).exists()
    assert list(AuditEvent.objects.values_list("action", flat=True)) == ["chain.delete"]


@pytest.mark.parametrize(
    ("overrides", "entry"),
    [
        ({"entries-0-model": "gpt-4o-mini\x00"}, 1),
        ({"entries-1-provider": "openai\x00"}, 2),
        ({"entries-1-provider": "openai\x00", "op": "refresh"}, None),
    ],
)
def test_an_entry_named_with_a_nul_is_an_entry_error(admin_client, chain_catalog, overrides, entry):
    # PostgreSQL refuses NUL in a query's text: such a name is refused before any lookup.
    response = admin_client.post("/fallback/chains/new/", form_data(**overrides))

    assert response.status_code == 200
    if entry:  # a save shows the error; a refresh (the cost hints, the warnings) shows none yet
        assert error_text(response, f"id_entries-{entry - 1}") == [f"Entry {entry}: {CONTROL_CHARACTERS_MESSAGE}"]
    assert not FallbackChain.objects.exists()


def test_a_source_model_named_with_a_control_character_is_that_field_s_error(admin_client, catalog):
    body = {"name": "c", "source_model": "gpt-4o\u0007", "entries": [{"model": "gpt-4o-mini"}]}

    response = admin_client.post("/api/chains/", json.dumps(body), content_type="application/json")

    assert response.status_code == 400
    assert response.json()["errors"]["source_model"] == [CONTROL_CHARACTERS_MESSAGE]
    assert not FallbackChain.objects.exists()
