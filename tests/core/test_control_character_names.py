"""Names with control characters (CR/LF, other C0/C1 controls, DEL) or invisible formatting characters
(U+2028/U+2029, bidi overrides, zero-width characters) are refused at every entry point."""

import pytest

from audit.models import AuditEvent
from catalog.models import Agent, ApiKey, Application, ConsoleToken, LlmModel, Provider, Team
from catalog.services import console_token_create
from chains.models import FallbackChain
from core.errors import ValidationFailed
from core.validators import CONTROL_CHARACTERS_MESSAGE
from routing.models import Alias, Guardrail, RoutingRule
from routing.services import GuardrailInput, guardrail_create
from tests.factories import TeamFactory, UserFactory
from tests.helpers.api import patch_json, post_json

# Inside the name: leading and trailing whitespace (a trailing newline included) is stripped, not refused.
# NUL is left out: DRF's and Django's form CharFields already refuse it ("Null characters are not allowed.").
BAD_NAMES = ["evil\r\nx-injected: 1", "line\nbreak", "esc\x1b[31m", "tab\there", "del\x7fete", "c1\x85next"]

# Invisible characters that make one name look like another or break lines outside Python: U+2028/U+2029
# (Zl/Zp), bidi embeddings, overrides and isolates, zero-width characters, the BOM, a stray ZWJ.
INVISIBLE_NAMES = [
    "line\u2028sep",
    "para\u2029sep",
    "gpt\u202e4o",
    "lre\u202amodel",
    "iso\u2066late\u2069",
    "zero\u200bwidth",
    "zw\u200cnj",
    "lrm\u200emark",
    "b\ufeffom",
    "stray\u200djoiner",
]
RULE = {"source_model": "gpt-4o", "target_model": "gpt-4o-mini", "scope": {"type": "global", "id": None}}
CHAIN = {"source_model": "gpt-4o", "entries": [{"model": "claude-sonnet", "provider": None}]}
PROVIDER = {"protocol": "openai", "base_url": "http://127.0.0.1:9/v1", "connect_timeout": 2, "read_timeout": 5}
ENDPOINTS = [
    ("/api/providers/", PROVIDER, Provider),
    ("/api/models/", {"provider": "openai"}, LlmModel),
    ("/api/teams/", {}, Team),
    ("/api/applications/", {}, Application),
    ("/api/agents/", {}, Agent),
    ("/api/keys/", {}, ApiKey),
    ("/api/routing-rules/", RULE, RoutingRule),
    ("/api/aliases/", {"model": "gpt-4o"}, Alias),
    ("/api/chains/", CHAIN, FallbackChain),
]


@pytest.mark.parametrize("name", BAD_NAMES)
@pytest.mark.parametrize(("url", "body", "model"), ENDPOINTS, ids=[e[0] for e in ENDPOINTS])
def test_api_create_refuses_control_characters_in_names(admin_client, catalog, url, body, model, name):
    before = model.objects.count()

    response = post_json(admin_client, url, {**body, "name": name})

    assert response.status_code == 400
    assert response.json()["errors"] == {"name": [CONTROL_CHARACTERS_MESSAGE]}
    assert model.objects.count() == before
    assert AuditEvent.objects.count() == 0


@pytest.mark.parametrize("name", INVISIBLE_NAMES)
@pytest.mark.parametrize(("url", "body", "model"), ENDPOINTS, ids=[e[0] for e in ENDPOINTS])
def test_api_create_refuses_invisible_formatting_characters_in_names(admin_client, catalog, url, body, model, name):
    before = model.objects.count()

    response = post_json(admin_client, url, {**body, "name": name})

    assert response.status_code == 400
    assert response.json()["errors"] == {"name": [CONTROL_CHARACTERS_MESSAGE]}
    assert model.objects.count() == before


@pytest.mark.parametrize("name", ["café", "模型", "Équipe 数据 — ünïcode", "👩‍💻 squad", "🏳️‍🌈 pride", "thumbs 👍🏽"])
def test_unicode_and_emoji_names_stay_allowed(admin_client, name):
    # Emoji ZWJ sequences keep their U+200D: it is refused only when it does not join two emoji parts.
    response = post_json(admin_client, "/api/teams/", {"name": name})

    assert response.status_code == 201, response.json()
    assert Team.objects.get().name == name


def test_api_update_refuses_control_characters_and_keeps_the_name(admin_client):
    team = TeamFactory(name="payments")

    response = patch_json(admin_client, f"/api/teams/{team.pk}/", {"name": "pay\nments"})

    assert response.status_code == 400
    assert response.json()["errors"] == {"name": [CONTROL_CHARACTERS_MESSAGE]}
    team.refresh_from_db()
    assert team.name == "payments"


def test_api_refuses_control_characters_in_the_provider_api_key(admin_client):
    response = post_json(admin_client, "/api/providers/", {**PROVIDER, "name": "acme", "api_key": "sk-1\r\nx-evil: 1"})

    assert response.status_code == 400
    assert response.json()["errors"] == {"api_key": ["API keys cannot contain control characters such as line breaks."]}
    assert not Provider.objects.exists()


def test_surrounding_whitespace_is_still_stripped_not_refused(admin_client):
    response = post_json(admin_client, "/api/teams/", {"name": "  payments\n"})

    assert response.status_code == 201
    assert Team.objects.get().name == "payments"


def test_unicode_names_stay_allowed(admin_client):
    response = post_json(admin_client, "/api/teams/", {"name": "Équipe 数据 — ünïcode"})

    assert response.status_code == 201


@pytest.mark.django_db
def test_guardrail_and_console_token_services_refuse_control_characters(catalog):
    user = UserFactory()

    with pytest.raises(ValidationFailed) as guardrail:
        data = GuardrailInput(name="no\r\ngpt-4o", model="gpt-4o", action="deny", message="Too expensive.")
        guardrail_create(actor=None, data=data)
    with pytest.raises(ValidationFailed) as token:
        console_token_create(actor=None, user=user, name="ci\nbot")

    assert guardrail.value.errors == {"name": [CONTROL_CHARACTERS_MESSAGE]}
    assert token.value.errors == {"name": [CONTROL_CHARACTERS_MESSAGE]}
    assert not Guardrail.objects.exists() and not ConsoleToken.objects.exists()


def test_admin_provider_form_shows_the_field_error(admin_client):
    response = admin_client.post(
        "/admin/catalog/provider/add/",
        {"name": "ac\nme", **PROVIDER, "api_key": ""},
    )

    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {"name": [CONTROL_CHARACTERS_MESSAGE]}
    assert not Provider.objects.exists()


def test_admin_guardrail_form_shows_the_field_error(admin_client, catalog):
    form = {
        "name": "No\x1bgpt-4o",
        "model": catalog["gpt-4o"].pk,
        "action": "deny",
        "target_model": "",
        "message": "Too expensive.",
        "scope_type": "global",
        "scope_id": "",
        "enabled": "on",
    }

    response = admin_client.post("/admin/routing/guardrail/add/", form)

    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {"name": [CONTROL_CHARACTERS_MESSAGE]}
    assert not Guardrail.objects.exists()
